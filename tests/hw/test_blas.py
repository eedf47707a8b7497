"""pydla.hw.blas: the direct sgemm, the choice of OpenBLAS kernels, the private instance."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pydla.hw import blas, conv, conv_gemm

needs_sgemm = pytest.mark.skipif(blas.SGEMM is None, reason="numpy's BLAS sgemm was not found")
AVX512 = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "sse2"})


def test_wanted_core_chooses_skylakex_only_for_avx512_cpus_on_lesser_kernels() -> None:
    assert blas.wanted_core("Haswell", AVX512, None) == "SkylakeX"
    assert blas.wanted_core("Zen", AVX512, "auto") == "SkylakeX"
    assert blas.wanted_core("SkylakeX", AVX512, None) is None  # numpy's already runs them
    assert blas.wanted_core("Cooperlake", AVX512, None) is None
    assert blas.wanted_core("Haswell", AVX512 - {"avx512bw"}, None) is None  # not all of AVX-512
    assert blas.wanted_core("Haswell", frozenset(), None) is None  # flags unknown: keep numpy's


def test_wanted_core_follows_the_setting() -> None:
    assert blas.wanted_core("Haswell", AVX512, "numpy") is None
    assert blas.wanted_core("Haswell", AVX512, " NumPy ") is None
    assert blas.wanted_core("SkylakeX", frozenset(), "Haswell") == "Haswell"  # as given, even if lesser


def _operands(rng: np.random.Generator, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    return (rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32))


@needs_sgemm
@pytest.mark.parametrize("layout", ["plain", "a-transposed", "b-transposed", "padded-rows", "one-row",
                                    "one-column"])
def test_product_matches_numpy(layout: str) -> None:
    sgemm = blas.SGEMM
    assert sgemm is not None
    rng = np.random.default_rng(0)
    m, k, n = {"one-row": (1, 7, 5), "one-column": (6, 7, 1)}.get(layout, (6, 7, 5))
    a, b = _operands(rng, m, k, n)
    if layout == "a-transposed":
        a = np.ascontiguousarray(a.T).T
    elif layout == "b-transposed":
        b = np.ascontiguousarray(b.T).T
    elif layout == "padded-rows":  # views into wider arrays: leading dimensions larger than the rows
        a = np.pad(a, ((0, 0), (0, 3)))[:, :k]
        b = np.pad(b, ((0, 0), (0, 4)))[:, :n]
    wide = np.full((m, n + 2), 7.0, np.float32)
    c = wide[:, :n]
    assert sgemm.product(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert (wide[:, n:] == 7.0).all()  # nothing written outside the view
    assert sgemm.product(a, b, c, accumulate=True)
    np.testing.assert_allclose(c, 2 * (a @ b), rtol=1e-5, atol=1e-5)


@needs_sgemm
def test_product_declines_what_blas_cannot_take_and_writes_nothing() -> None:
    sgemm = blas.SGEMM
    assert sgemm is not None
    rng = np.random.default_rng(1)
    a, b = _operands(rng, 4, 6, 8)
    c = np.zeros((4, 8), np.float32)
    assert not sgemm.product(a.astype(np.float64), b, c)  # dtype
    assert not sgemm.product(a, b[:5], c)  # inner dimensions differ
    assert not sgemm.product(a, b, c[:, :7])  # result shape
    assert not sgemm.product(a[:, ::2], b[:3], c)  # neither rows nor columns unit-stride
    assert not sgemm.product(a, b, np.zeros((8, 4), np.float32).T)  # result columns strided
    both = np.zeros((4, 14), np.float32)
    assert not sgemm.product(both[:, :6], b, both[:, 6:])  # result overlaps an operand
    assert (c == 0).all() and (both == 0).all()


@needs_sgemm
@pytest.mark.parametrize("groups", [1, 3, conv_gemm.SGEMM_MAX_STACK + 1])
def test_conv_matmul_of_stacks_matches_numpy(groups: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert conv.SGEMM is not None
    monkeypatch.setattr(conv_gemm, "_SGEMM_MIN_MACS", 0)  # these small products through sgemm too
    monkeypatch.setattr(conv.SGEMM, "private", True)
    calls = []
    product = conv.SGEMM.product
    monkeypatch.setattr(conv.SGEMM, "product", lambda *a, **k: calls.append(1) or product(*a, **k))
    rng = np.random.default_rng(2)
    a = rng.standard_normal((groups, 5, 9)).astype(np.float32)
    b = rng.standard_normal((groups, 9, 11)).astype(np.float32)
    out = np.empty((groups, 5, 11), np.float32)
    conv_gemm.matmul(a, b, out)
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)
    assert len(calls) == (groups if groups <= conv_gemm.SGEMM_MAX_STACK else 0)  # past it: numpy's batch


def _load_in_subprocess(tmp_path: Path, setting: str | None) -> dict[str, object]:
    """What pydla.hw.blas chose in a fresh interpreter with PYDLA_BLAS_CORE=setting."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYDLA_BLAS_CORE", "OPENBLAS_CORETYPE")}
    env["PYDLA_CACHE_DIR"] = str(tmp_path)
    if setting is not None:
        env["PYDLA_BLAS_CORE"] = setting
    code = """
import json, warnings, ctypes
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from pydla.hw import blas
s = blas.SGEMM
numpy_lib = ctypes.CDLL(blas._candidates()[0])
print(json.dumps({"core": s.core, "private": s.private, "numpy_core": blas.corename(numpy_lib),
                  "warnings": [str(w.message) for w in caught]}))
"""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@needs_sgemm
@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                    reason="Haswell kernels: OpenBLAS on Linux x86-64")
def test_a_named_core_gets_a_private_instance_and_numpys_is_left_alone(tmp_path: Path) -> None:
    got = _load_in_subprocess(tmp_path, "Haswell")  # every x86-64 OpenBLAS build has Haswell kernels
    if not blas.corename(blas.ctypes.CDLL(blas._candidates()[0])):
        pytest.skip("this OpenBLAS does not report its kernels")
    assert got["private"] is True and got["core"] == "Haswell", got
    assert got["warnings"] == []
    copies = list((tmp_path / "blas").iterdir())
    assert [p.name for p in copies] == [Path(blas._candidates()[0]).name]
    assert copies[0].stat().st_size == Path(blas._candidates()[0]).stat().st_size
    made = copies[0].stat().st_mtime_ns
    again = _load_in_subprocess(tmp_path, "Haswell")  # the copy is made once and reused
    assert again["private"] is True and copies[0].stat().st_mtime_ns == made


@needs_sgemm
def test_numpy_setting_keeps_numpys_instance(tmp_path: Path) -> None:
    got = _load_in_subprocess(tmp_path, "numpy")
    assert got["private"] is False and got["core"] == got["numpy_core"]
    assert not (tmp_path / "blas").exists()


@needs_sgemm
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the private instance is made on Linux")
def test_an_unknown_core_warns_and_falls_back_to_numpys(tmp_path: Path) -> None:
    got = _load_in_subprocess(tmp_path, "NoSuchCore")
    assert got["private"] is False
    assert any("PYDLA_BLAS_CORE=NoSuchCore" in w for w in got["warnings"]), got  # type: ignore[attr-defined]


@needs_sgemm
def test_automatic_choice_matches_this_cpu(tmp_path: Path) -> None:
    got = _load_in_subprocess(tmp_path, None)
    wanted = blas.wanted_core(str(got["numpy_core"]), blas.cpu_flags(), None)
    if wanted is None:
        assert got["private"] is False
    else:
        assert got["private"] is True and str(got["core"]).lower() == wanted.lower()


def test_describe_names_the_kernels_and_whose_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blas, "SGEMM", None)
    assert blas.describe() == "numpy's matmul (OpenBLAS sgemm not found or turned off)"
    fake = blas.Sgemm(blas.ctypes.CFUNCTYPE(None)(lambda: None), blas.ctypes.c_int32, "SkylakeX", True)
    monkeypatch.setattr(blas, "SGEMM", fake)
    assert blas.describe() == ("OpenBLAS sgemm, SkylakeX kernels, pydla's private instance "
                               "(PYDLA_BLAS_CORE=numpy uses numpy's)")
    fake.core, fake.private = "", False
    assert blas.describe() == "OpenBLAS sgemm, kernels it does not name, numpy's instance"


@pytest.mark.skipif(not blas._candidates() or not hasattr(os, "getuid"), reason="no OpenBLAS file, or no uid")
def test_private_copy_is_remade_when_stale_and_refused_when_others_may_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path))
    source = blas._candidates()[0]
    copy = Path(blas._private_copy(source))
    assert copy.parent == tmp_path / "blas" and copy.stat().st_size == os.path.getsize(source)
    assert copy.stat().st_mtime_ns == os.stat(source).st_mtime_ns
    copy.write_bytes(b"not a library")  # stale (or tampered with): made again
    assert Path(blas._private_copy(source)).stat().st_size == os.path.getsize(source)
    assert [p.name for p in copy.parent.iterdir()] == [copy.name]  # no temporary left behind
    copy.chmod(0o666)
    with pytest.raises(OSError, match="writable by others"):
        blas._private_copy(source)


@needs_sgemm
def test_prepared_product_computes_on_current_data_and_keeps_its_operands() -> None:
    import gc

    sgemm = blas.SGEMM
    assert sgemm is not None
    rng = np.random.default_rng(3)
    a, b = _operands(rng, 5, 6, 7)
    c = np.ones((5, 7), np.float32)
    run = sgemm.prepare(a, np.ascontiguousarray(b.T).T, c, accumulate=True)
    assert run is not None
    want = 1 + a @ b
    del b
    gc.collect()  # the transposed copy of b lives on in the prepared product
    run()
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    a[...] = 0.0
    run()
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)  # c += 0 @ b


@needs_sgemm
def test_prepare_declines_what_blas_cannot_take() -> None:
    sgemm = blas.SGEMM
    assert sgemm is not None
    rng = np.random.default_rng(4)
    a, b = _operands(rng, 4, 4, 4)
    c = np.zeros((4, 4), np.float32)
    assert sgemm.prepare(a, b, a) is None  # c overlaps a
    assert sgemm.prepare(a, b, c.T) is None  # c with unit-stride columns: BLAS writes rows
    assert sgemm.prepare(a[:, ::2], b[::2], c) is None  # a's rows not unit-stride, nor its columns
    assert sgemm.prepare(a, b.astype(np.float64), c) is None
    assert sgemm.prepare(a, b[:3], c) is None  # shapes do not agree
    frozen = np.zeros((4, 4), np.float32)
    frozen.flags.writeable = False
    assert sgemm.prepare(a, b, frozen) is None
