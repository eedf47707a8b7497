"""Post-training calibration: the ranges (min-max, percentile, entropy as TensorRT describes it),
the versioned table and its checks, `pydla compile --calibrate` and `compile_model(calibration=)`,
the table in the loadable and in `pydla info`, and INT8 refused in one line naming the configuration."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla.compiler.api import compile_model
from pydla.compiler.calibrate import calibrate
from pydla.compiler.progress import TerminalProgress
from pydla.compiler.ranges import LEVELS, RangeObserver, entropy_threshold, percentile_threshold
from pydla.errors import DlaError, NvError
from pydla.loadable.calibration_table import CalibrationTable, model_digest
from pydla.loadable.cli import describe
from pydla.loadable.container import Loadable


def small_model(scale: float = 2.0) -> onnx.ModelProto:
    """y = relu(x * scale) + 1 of a 2x3 input: every tensor's range is known in closed form."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Add", ["r", "one"], ["y"])]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(np.array(scale, np.float32), "k"),
                           numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def samples(n: int = 4, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(-3, 3, (2, 3)).astype(np.float32)} for _ in range(n)]


def test_minmax_ranges_are_the_values_seen() -> None:
    data = samples()
    table = calibrate(small_model(), data, method="minmax")
    xs = np.stack([d["x"] for d in data])
    lo, hi = float(xs.min()), float(xs.max())
    assert table.samples == 4 and table.method == "minmax" and table.percentile is None
    assert set(table.tensors) == {"x", "m", "r", "y"}
    assert table.tensors["x"].range == (lo, hi)
    assert table.tensors["m"].range == pytest.approx((2 * lo, 2 * hi))
    assert table.tensors["r"].range == pytest.approx((0.0, 2 * hi))
    assert table.tensors["y"].range == pytest.approx((1.0, 2 * hi + 1))
    x = table.tensors["x"]
    assert x.zero_point == 0 and x.threshold == max(-lo, hi) and x.scale == pytest.approx(x.threshold / 127)


def test_percentile_cuts_an_outlier_and_minmax_does_not() -> None:
    rng = np.random.default_rng(1)
    data = [{"x": rng.uniform(-1, 1, (2, 3)).astype(np.float32)} for _ in range(2000)]
    data[7]["x"][0, 0] = 100.0  # one value in 12,000
    minmax = calibrate(small_model(), data, method="minmax").tensors["x"]
    pct = calibrate(small_model(), data, method="percentile").tensors["x"]
    assert minmax.threshold == 100.0
    assert pct.threshold <= 1.0 + 100.0 / 2048 and pct.range == minmax.range  # the range seen is kept


def kl_reference(hist: np.ndarray, amax: float) -> float:
    """TensorRT's calibration written plainly: candidate by candidate, bin by bin."""
    hist = hist.astype(np.float64)
    bins = len(hist)
    best, best_i = np.inf, bins
    for i in range(LEVELS, bins + 1):
        ref = hist[:i]
        p = ref.copy()
        p[-1] += hist[i:].sum()
        q = np.zeros(i)
        for c in range(LEVELS):
            a, b = c * i // LEVELS, (c + 1) * i // LEVELS
            held = ref[a:b] > 0
            if held.any():
                q[a:b][held] = ref[a:b].sum() / held.sum()
        if q.sum() == 0:
            continue
        pn, qn = p / p.sum(), q / q.sum()
        m = pn > 0
        kl = float(np.sum(pn[m] * np.log(pn[m] / np.where(qn[m] > 0, qn[m], 1e-12))))
        if kl < best:
            best, best_i = kl, i
    return best_i * amax / bins


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_entropy_threshold_is_tensorrts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = np.abs(rng.laplace(size=20000) if seed else rng.standard_normal(20000))
    if seed == 2:
        values = np.append(values, 60.0)  # a far outlier: the threshold stays near the bulk
    amax = float(values.max())
    bins = 512  # the algorithm takes any count of bins from 128 (calibration uses 2048): a faster test
    hist = np.bincount(np.minimum((values * bins / amax).astype(int), bins - 1), minlength=bins)
    got = entropy_threshold(hist, amax)
    assert got == kl_reference(hist, amax)
    assert got < amax  # the long tail is clipped
    if seed == 2:
        assert got < 20


def test_percentile_threshold_edges() -> None:
    hist = np.zeros(2048, np.int64)
    hist[9] = 999
    hist[2047] = 1
    assert percentile_threshold(hist, 2048.0, 99.9) == 10.0
    assert percentile_threshold(hist, 2048.0, 100.0) == 2048.0


def test_non_finite_values_and_integer_tensors_take_no_part() -> None:
    obs = RangeObserver("minmax")
    obs.observe({"a": np.array([1.0, np.inf, -2.0, np.nan], np.float32), "i": np.array([1000, -5])})
    assert obs.thresholds() == {"a": (2.0, (-2.0, 1.0))}


def test_table_round_trips_and_is_checked(tmp_path: Path) -> None:
    m = small_model()
    table = calibrate(m, samples(), method="entropy", name="small.onnx")
    path = tmp_path / "t.json"
    table.save(path)
    back = CalibrationTable.load(path)
    assert back == table
    assert json.loads(path.read_text())["version"] == 1
    back.check_model(m, "small.onnx")
    other = small_model(3.0)
    with pytest.raises(DlaError) as e:
        back.check_model(other, "other.onnx")
    assert e.value.code == NvError.BadParameter
    assert "'small.onnx'" in e.value.message and "'other.onnx'" in e.value.message
    assert model_digest(other)[:19] in e.value.message


@pytest.mark.parametrize(("change", "field"), [
    (lambda t: t.update(format="tensorrt"), "format"),
    (lambda t: t.update(version="1"), "version"),
    (lambda t: t.update(method="mean"), "method"),
    (lambda t: t.update(samples=0), "samples"),
    (lambda t: t["model"].pop("digest"), "model"),
    (lambda t: t["tensors"]["x"].update(scale=0.0), "tensor 'x' scale"),
    (lambda t: t["tensors"]["x"].update(scale=float("nan")), "tensor 'x' scale"),
    (lambda t: t["tensors"]["x"].update(zero_point=200), "tensor 'x' zero_point"),
    (lambda t: t["tensors"]["x"].update(zero_point=1.5), "tensor 'x' zero_point"),
    (lambda t: t["tensors"]["x"].update(range=[2, 1]), "tensor 'x' range"),
    (lambda t: t["tensors"]["x"].update(range=[0]), "tensor 'x' range"),
    (lambda t: t["tensors"]["x"].update(threshold=-1), "tensor 'x' threshold"),
])
def test_malformed_tables_are_refused_naming_the_field(change: Any, field: str) -> None:
    raw = calibrate(small_model(), samples(2), method="minmax").as_json()
    change(raw)
    with pytest.raises(DlaError) as e:
        CalibrationTable.parse(json.dumps(raw), "t.json")
    assert e.value.code == NvError.BadValue and e.value.message.startswith(f"t.json: {field}")


def test_a_newer_table_version_is_not_supported() -> None:
    raw = calibrate(small_model(), samples(1), method="minmax").as_json()
    raw["version"] = 2
    with pytest.raises(DlaError) as e:
        CalibrationTable.parse(json.dumps(raw), "t.json")
    assert e.value.code == NvError.NotSupported and "version 2" in e.value.message


def test_calibration_inputs_are_checked() -> None:
    m = small_model()
    for data, said in (([{"y": np.zeros((2, 3), np.float32)}], "input 'x' is missing"),
                       ([{"x": np.zeros((2, 3), np.float32), "z": np.zeros(1)}], "'z' is not an input"),
                       ([{"x": np.zeros((3, 2), np.float32)}], "has shape (3, 2)"),
                       ([{"x": np.zeros((2, 3), np.int32)}], "is int32"),
                       ([[1, 2]], "not list"), ([], "no calibration inputs")):
        with pytest.raises(DlaError) as e:
            calibrate(m, data, method="minmax")
        assert e.value.code == NvError.BadValue and said in e.value.message, e.value.message
    with pytest.raises(DlaError, match="calibration method 'mean'"):
        calibrate(m, samples(), method="mean")


def test_an_iterator_and_a_directory_give_the_same_table(tmp_path: Path) -> None:
    data = samples(5)
    for i, d in enumerate(data):
        np.save(tmp_path / f"{i:03d}.npy", d["x"])
    (tmp_path / "notes.txt").write_text("ignored")
    m = small_model()
    from_dir = calibrate(m, tmp_path, method="entropy", name="m")
    from_iter = calibrate(m, iter(data), method="entropy", name="m")  # read twice: kept
    assert from_dir == from_iter and from_dir.samples == 5
    npz = tmp_path / "npz"
    npz.mkdir()
    np.savez(npz / "a.npz", x=data[0]["x"])
    assert calibrate(m, npz, method="minmax").tensors["x"].range == \
        (float(data[0]["x"].min()), float(data[0]["x"].max()))
    with pytest.raises(DlaError) as e:
        calibrate(m, tmp_path / "notes.txt")
    assert e.value.code == NvError.BadParameter


def test_progress_is_reported_per_run() -> None:
    calls: list[tuple[int, int, str]] = []
    calibrate(small_model(), samples(3), method="percentile",
              progress=lambda d, t, w: calls.append((d, t, w)))
    assert [(d, t) for d, t, _ in calls] == [(i, 6) for i in range(1, 7)]
    assert all(w.startswith("calibrating") for _, _, w in calls)
    out = io.StringIO()
    calibrate(small_model(), samples(2), method="minmax", progress=TerminalProgress(out, interval=0))
    assert "[" in out.getvalue() and "2/2 calibrating" in out.getvalue()


def test_compile_model_records_the_table_and_refuses_int8() -> None:
    m = small_model()
    result = compile_model(m, calibration=samples(), calibration_method="minmax")
    info = describe(Loadable(result.blob))
    recorded = info["calibration"]
    assert recorded["method"] == "minmax" and set(recorded["tensors"]) == {"x", "m", "r", "y"}
    assert recorded["model"]["digest"] == model_digest(m)
    with pytest.raises(DlaError) as e:
        compile_model(m, precision="int8", calibration=samples())
    assert e.value.code == NvError.NotSupported
    assert e.value.message.startswith("device config 'full' has no INT8 path")
    with pytest.raises(DlaError) as e:
        compile_model(m, precision="int8")
    assert e.value.code == NvError.BadParameter and "needs a calibration" in e.value.message
    with pytest.raises(DlaError) as e:
        compile_model(m, calibration=calibrate(small_model(3.0), samples(1), method="minmax"))
    assert e.value.code == NvError.BadParameter and "is for model" in e.value.message


def test_pydla_compile_calibrates_writes_the_table_then_refuses_int8(tmp_path: Path) -> None:
    model = tmp_path / "small.onnx"
    onnx.save(small_model(), str(model))
    cal = tmp_path / "cal"
    cal.mkdir()
    for i, d in enumerate(samples()):
        np.save(cal / f"{i}.npy", d["x"])
    cmd = [sys.executable, "-m", "pydla", "compile", str(model)]
    table = tmp_path / "small.calib.json"
    done = subprocess.run([*cmd, "--precision", "int8", "--calibrate", str(cal), "--calibration-method",
                           "percentile", "--calibration-table-out", str(table)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "device config 'full' has no INT8 path" in lines[0], done.stderr
    assert "\r" not in done.stderr  # no progress bar when stderr is not a terminal
    back = CalibrationTable.load(table)
    assert back.method == "percentile" and back.percentile == 99.99 and back.model_name == "small.onnx"
    ok = subprocess.run([*cmd, "--calibration-table", str(table)], capture_output=True, text=True,
                        timeout=300)
    assert ok.returncode == 0, ok.stderr
    info = subprocess.run([sys.executable, "-m", "pydla", "info", str(tmp_path / "small.dla")],
                          capture_output=True, text=True, timeout=300)
    assert "calibration: percentile, 4 tensors from 4 samples" in info.stdout
    assert f"x{' ' * 23} scale {back.tensors['x'].scale:.6g} zero point 0" in info.stdout
    alone = subprocess.run([*cmd, "--calibration-table-out", str(tmp_path / "t.json")], capture_output=True,
                           text=True, timeout=300)
    assert alone.returncode != 0 and "--calibration-table-out needs --calibrate DIR" in alone.stderr
    other = tmp_path / "other.onnx"
    onnx.save(small_model(5.0), str(other))
    bad = subprocess.run([sys.executable, "-m", "pydla", "compile", str(other), "--calibration-table",
                          str(table)], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "is for model 'small.onnx'" in bad.stderr and "other.onnx" in bad.stderr


def test_a_relus_zeros_do_not_shrink_the_entropy_threshold() -> None:
    """Half of a ReLU's outputs are exact zeros: left out of the histogram, which they made choose
    a threshold clipping 12 % of a half-normal's positive values (1.77); now 3.96 of 4.73."""
    rng = np.random.default_rng(0)
    relu = np.maximum(rng.normal(0, 1, 200_000), 0).astype(np.float32)
    positive = relu[relu > 0]
    thresholds = {}
    for method in ("entropy", "percentile"):
        observer = RangeObserver(method)
        observer.observe({"t": relu})
        observer.start_histograms()
        observer.observe({"t": relu})
        thresholds[method] = observer.thresholds()["t"][0]
    assert np.mean(positive > thresholds["entropy"]) < 0.001
    assert np.mean(positive > thresholds["percentile"]) <= 1e-4  # 99.99 % of the values that are not 0
