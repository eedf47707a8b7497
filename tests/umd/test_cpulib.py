"""pydla's CPU library through the run recipe's CPU library interface: library_init, lookup, the callable."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.umd import cpulib, cpumath


def _lookup(name: str):
    init = types.SimpleNamespace(lookup_fn=None)
    cpulib.library_init(init)
    found = types.SimpleNamespace(num_args=0, callable=None)
    init.lookup_fn(name, found)
    return found


def test_softmax_matches_numpy() -> None:
    found = _lookup("softmax")
    assert found.num_args == 6
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    out = np.zeros(10 * 4 + 8, np.uint8)
    found.callable([x.view(np.uint8).ravel(), out, 1, "2,5", "float32", "float32"])
    y = out[:40].view(np.float32).reshape(2, 5)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-6)
    assert (out[40:] == 0).all()


def test_lookup_of_a_missing_function_names_library_and_function() -> None:
    with pytest.raises(DlaError, match="no function 'gelu'") as e:
        _lookup("gelu")
    assert e.value.code == NvError.NotSupported


@pytest.mark.parametrize(("args", "fragment"), [
    ([np.zeros(8, np.uint8), np.zeros(40, np.uint8), 1, "2,5", "float32", "float32"], "holds 8 bytes"),
    ([np.zeros(40, np.uint8), np.zeros(40, np.uint8), 3, "2,5", "float32", "float32"], "axis 3"),
    ([np.zeros(40, np.uint8), np.zeros(40, np.uint8), 1, "2,x", "float32", "float32"], "not d0,d1"),
    ([np.zeros(40, np.uint8), np.zeros(40, np.uint8), 1, "2,5", "int8", "float32"], "dtype 'int8'"),
])
def test_bad_arguments_are_dlaerrors(args, fragment) -> None:
    with pytest.raises(DlaError, match=fragment):
        _lookup("softmax").callable(args)


def test_pad_and_resize_reject_bad_arguments() -> None:
    buf = np.zeros(4096, np.uint8)
    pad = _lookup("pad").callable
    with pytest.raises(DlaError, match="reflect pads"):
        pad([buf, buf, "1,1,2,2", "0,0,2,0,0,0,2,0", "reflect", 0.0, "float32", "float32"])
    with pytest.raises(DlaError, match="pad mode 'wrap'"):
        pad([buf, buf, "1,1,2,2", "0,0,1,0,0,0,1,0", "wrap", 0.0, "float32", "float32"])
    resize = _lookup("resize").callable
    with pytest.raises(DlaError, match="only H and W"):
        resize([buf, buf, "1,2,3,3", "1,4,3,3", "linear", "half_pixel", "floor", "float32", "float32"])
    with pytest.raises(DlaError, match="coordinate_transformation_mode 'tf_crop_and_resize'"):
        resize([buf, buf, "1,2,3,3", "1,2,6,6", "linear", "tf_crop_and_resize", "floor", "float32",
                "float32"])


def _bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8).ravel()


def _reference(op: str, inputs: dict[str, np.ndarray], opset: int = 19, **attrs) -> np.ndarray:
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("y", 0, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(m).run(None, inputs)[0]


def test_pad_nd_reads_parameters_from_buffers_and_crops() -> None:
    x = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    pads = np.array([1, 0, 2, 1], np.int64)  # axes 1 and 2: 1 / 0 before, 2 / 1 after
    axes = np.array([1, -1], np.int64)
    for mode in ("constant", "edge", "wrap"):
        want = _reference("Pad", {"x": x, "pads": pads, "v": np.array(9, np.int32), "axes": axes}, mode=mode)
        out = np.zeros(want.nbytes, np.uint8)
        _lookup("pad_nd").callable([_bytes(x), out, "2,3,4", _bytes(pads), _bytes(axes), mode,
                                    _bytes(np.array(9, np.int32)), "int32", "int32"])
        np.testing.assert_array_equal(out.view(np.int32).reshape(want.shape), want)
    crop = np.zeros(2 * 3 * 1 * 4, np.uint8)  # negative pads crop
    _lookup("pad_nd").callable([_bytes(x), crop, "2,3,4", "0,-1,0,-2", "1,2", "constant", 0.0, "int32",
                                "int32"])
    np.testing.assert_array_equal(crop.view(np.int32).reshape(2, 3, 1), x[:, :, 1:2])
    with pytest.raises(DlaError, match="holds 4 bytes"):  # parameters that do not give the compiled size
        _lookup("pad_nd").callable([_bytes(x), np.zeros(4, np.uint8), "2,3,4", _bytes(pads), "1,2", "edge",
                                    0.0, "int32", "int32"])


def _resize_inputs(seed: int, ctm: str, scales, sizes) -> tuple[np.ndarray, np.ndarray, dict]:
    """x (1, 3, 4, 5), the roi, and Resize's inputs as onnx's reference takes them."""
    x = np.random.default_rng(seed).standard_normal((1, 3, 4, 5)).astype(np.float32)
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.1], np.float32)
    inputs = {"x": x, "roi": roi if ctm == "tf_crop_and_resize" else np.zeros(0, np.float32),
              "scales": np.array(scales or [], np.float32)}
    if sizes is not None:
        inputs["sizes"] = np.array(sizes, np.int64)
    return x, roi, inputs


@pytest.mark.parametrize(("mode", "ctm", "scales", "sizes", "attrs"), [
    ("linear", "half_pixel_symmetric", [1, 1, 2.3, 0.6], None, {}),
    ("linear", "align_corners", [1, 1, 0.6, 1.7], None, {}),
    ("nearest", "pytorch_half_pixel", None, [2, 7], dict(axes=[3, 2], keep_aspect_ratio_policy="not_larger")),
    ("linear", "tf_crop_and_resize", None, [1, 3, 4, 3], dict(extrapolation_value=-2.0)),
])
def test_resize_nd_matches_onnx(mode, ctm, scales, sizes, attrs) -> None:
    x, roi, inputs = _resize_inputs(2, ctm, scales, sizes)
    want = _reference("Resize", inputs, mode=mode, coordinate_transformation_mode=ctm, **attrs)
    out = np.zeros(want.nbytes, np.uint8)
    axes = ",".join(str(a) for a in attrs.get("axes", []))
    _lookup("resize_nd").callable([
        _bytes(x), out, "1,3,4,5", ",".join(map(str, want.shape)), mode, ctm, "round_prefer_floor",
        _bytes(roi) if ctm == "tf_crop_and_resize" else "", _bytes(inputs["scales"]) if scales else "",
        _bytes(inputs["sizes"]) if sizes is not None else "", axes,
        attrs.get("keep_aspect_ratio_policy", "stretch"), attrs.get("extrapolation_value", 0.0),
        "float32", "float32"])
    np.testing.assert_allclose(out.view(np.float32).reshape(want.shape), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("mode", "ctm", "scales", "sizes", "attrs"), [
    ("cubic", "half_pixel", [1, 1, 2, 1.5], None, {}),
    ("cubic", "align_corners", [1, 1, 0.6, 1.8], None, dict(cubic_coeff_a=-0.5)),
    ("cubic", "asymmetric", None, [1, 3, 7, 3], dict(exclude_outside=1)),
    ("cubic", "pytorch_half_pixel", [1, 1, 0.5, 0.8], None, dict(exclude_outside=1, cubic_coeff_a=-0.5)),
    ("cubic", "tf_crop_and_resize", None, [1, 3, 5, 6], dict(extrapolation_value=-7.0)),
    ("cubic", "half_pixel_symmetric", [1, 1, 1.7, 0.7], None, {}),
    ("linear", "half_pixel", [1, 1, 0.4, 0.6], None, dict(antialias=1)),
    ("linear", "align_corners", None, [1, 3, 2, 9], dict(antialias=1)),  # down in H, up in W
    ("cubic", "half_pixel", [1, 1, 0.3, 0.5], None, dict(antialias=1)),
    ("cubic", "asymmetric", None, [1, 3, 2, 2], dict(antialias=1, exclude_outside=1, cubic_coeff_a=-0.5)),
])
def test_resize_filtered_matches_onnx(mode, ctm, scales, sizes, attrs) -> None:
    """Cubic and antialiased Resize against onnx's reference, every coordinate transformation mode."""
    x, roi, inputs = _resize_inputs(3, ctm, scales, sizes)
    want = _reference("Resize", inputs, mode=mode, coordinate_transformation_mode=ctm, **attrs)
    out = np.zeros(want.nbytes, np.uint8)
    _lookup("resize_filtered").callable([
        _bytes(x), out, "1,3,4,5", ",".join(map(str, want.shape)), mode, ctm, "round_prefer_floor",
        _bytes(roi) if ctm == "tf_crop_and_resize" else "", _bytes(inputs["scales"]) if scales else "",
        _bytes(inputs["sizes"]) if sizes is not None else "", "", "stretch",
        attrs.get("extrapolation_value", 0.0), "float32", "float32",
        attrs.get("cubic_coeff_a", -0.75), attrs.get("exclude_outside", 0), attrs.get("antialias", 0)])
    np.testing.assert_allclose(out.view(np.float32).reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_resize_weights_rows_sum_to_one_and_bad_options_are_refused() -> None:
    from pydla.umd.resize_filters import resize_weights

    origin = (np.arange(7) + 0.5) / 0.35 - 0.5
    for mode in ("linear", "cubic"):
        for antialias in (False, True):
            w = resize_weights(mode, origin, 20, 0.35, antialias=antialias, exclude_outside=True)
            np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
            assert w.shape == (7, 20)
    # Antialiasing a 0.35 downscale widens the cubic filter to 2 * 2 / 0.35 taps, not 4.
    assert (resize_weights("cubic", origin, 20, 0.35, antialias=True)[3] != 0).sum() > 4
    with pytest.raises(DlaError, match="mode 'nearest'"):
        resize_weights("nearest", origin, 20, 0.35)
    with pytest.raises(DlaError, match="scale 0"):
        resize_weights("cubic", origin, 20, 0.0)
    buf = np.zeros(4096, np.uint8)
    with pytest.raises(DlaError, match="resize_filtered options"):
        _lookup("resize_filtered").callable([buf, buf, "1,1,2,2", "1,1,4,4", "cubic", "half_pixel",
                                             "floor", "", "", "", "", "stretch", 0.0, "float32", "float32",
                                             "a", 0, 0])


@pytest.mark.parametrize(("op", "attrs"), [
    ("MaxPool", dict(kernel_shape=[3, 2], dilations=[2, 3], pads=[1, 0, 2, 1], ceil_mode=1, strides=[2, 2])),
    ("AveragePool", dict(kernel_shape=[2, 3], dilations=[1, 2], pads=[1, 1, 1, 1], strides=[2, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], count_include_pad=1,
                         ceil_mode=1)),
])
def test_pool_matches_onnx(op, attrs) -> None:
    x = np.random.default_rng(3).standard_normal((2, 2, 7, 8)).astype(np.float32)
    want = _reference(op, {"x": x}, **attrs)
    out = np.zeros(want.nbytes, np.uint8)
    include = attrs.get("count_include_pad", 0)
    _lookup("pool").callable([
        _bytes(x), out, "2,2,7,8", ",".join(map(str, want.shape)), "max" if op == "MaxPool" else "avg",
        ",".join(map(str, attrs["kernel_shape"])), ",".join(map(str, attrs["strides"])),
        ",".join(map(str, attrs["pads"])), ",".join(map(str, attrs.get("dilations", [1, 1]))), include,
        "float32", "float32"])
    np.testing.assert_allclose(out.view(np.float32).reshape(want.shape), want, rtol=1e-5, atol=1e-6)


def test_batchnorm_params_repeat_scale_and_shift() -> None:
    rng = np.random.default_rng(4)
    scale, bias, mean = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    var = np.abs(rng.standard_normal(3)).astype(np.float32)
    out = np.zeros(2 * 2 * 3 * 4, np.uint8)
    _lookup("batchnorm_params").callable([_bytes(scale), _bytes(bias), _bytes(mean), _bytes(var), out, 1e-3,
                                          2, "float32", "float32"])
    y = out.view(np.float32).reshape(2, 2, 3)
    factor = scale / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(y[0], [factor, factor], rtol=1e-6)
    np.testing.assert_allclose(y[1], [bias - mean * factor] * 2, rtol=1e-5, atol=1e-6)


def _bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8).ravel()


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                   np.uint64])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_eltwise_int_broadcasts_and_wraps_around_like_numpy(dtype, op) -> None:
    found = _lookup("eltwise_int")
    assert found.num_args == 8
    info = np.iinfo(dtype)
    a = np.array([[info.max, info.min, 3], [0, 1, info.max - 1]], dtype)
    b = np.array([2, 3, info.max], dtype)
    out = np.zeros(6 * a.itemsize, np.uint8)
    found.callable([_bytes(a), _bytes(b), out, "2,3", "3", "2,3", op, np.dtype(dtype).name])
    with np.errstate(over="ignore"):
        want = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
                "min": np.minimum}[op](a, b)
    np.testing.assert_array_equal(out.view(dtype).reshape(2, 3), want)
    if op == "add":  # the wraparound is really there
        assert out.view(dtype)[0] == info.min + 1


@pytest.mark.parametrize(("change", "fragment"), [
    ({3: "2,4"}, r"eltwise_int of \(2, 4\) and \(3,\) into \(2, 3\)"),
    ({5: "3,2"}, r"into \(3, 2\)"),
    ({6: "pow"}, "eltwise_int 'pow' of int32"),
    ({7: "float32"}, "eltwise_int 'add' of float32"),
    ({0: np.zeros(8, np.uint8)}, "a holds 8 bytes"),
    ({2: np.zeros(28, np.uint8)}, "destination holds 28 bytes"),
])
def test_eltwise_int_refuses_bad_arguments(change, fragment) -> None:
    args = [np.zeros(24, np.uint8), np.zeros(12, np.uint8), np.zeros(24, np.uint8), "2,3", "3", "2,3", "add",
            "int32"]
    for index, value in change.items():
        args[index] = value
    with pytest.raises(DlaError, match=fragment) as e:
        _lookup("eltwise_int").callable(args)
    assert e.value.code in (NvError.BadParameter, NvError.InvalidSize)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int32])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "max", "min"])
def test_eltwise_computes_floats_in_their_own_type_and_integers_as_eltwise_int(dtype, op) -> None:
    found = _lookup("eltwise")
    assert found.num_args == 8
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((2, 3)) * 10).astype(dtype)
    b = (rng.standard_normal(3) * 10).astype(dtype)
    b[b == 0] = 3
    out = np.zeros(a.nbytes, np.uint8)
    found.callable([_bytes(a), _bytes(b), out, "2,3", "3", "2,3", op, np.dtype(dtype).name])
    if np.dtype(dtype).kind == "i":
        want_int = np.zeros(a.nbytes, np.uint8)
        _lookup("eltwise_int").callable([_bytes(a), _bytes(b), want_int, "2,3", "3", "2,3", op, "int32"])
        np.testing.assert_array_equal(out, want_int)  # Div rounds toward zero there too
        return
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
          "min": np.minimum}[op]
    np.testing.assert_array_equal(out.view(dtype).reshape(2, 3), fn(a, b))  # exactly numpy's, in dtype


def test_eltwise_refuses_bools_and_eltwise_int_refuses_floats() -> None:
    args = [np.zeros(48, np.uint8), np.zeros(24, np.uint8), np.zeros(48, np.uint8), "2,3", "3", "2,3", "add",
            "float64"]
    with pytest.raises(DlaError, match="eltwise_int 'add' of float64"):
        _lookup("eltwise_int").callable(args)
    with pytest.raises(DlaError, match="eltwise 'add' of bool"):
        _lookup("eltwise").callable([*args[:7], "bool"])
    with pytest.raises(DlaError, match="eltwise 'pow' of float64"):
        _lookup("eltwise").callable([*args[:6], "pow", "float64"])


def test_clip_int_bounds_absent_constant_or_from_a_buffer() -> None:
    clip = _lookup("clip_int")
    assert clip.num_args == 6
    x = np.array([-100, -5, 0, 5, 100], np.int16)
    out = np.zeros(10, np.uint8)
    clip.callable([_bytes(x), out, "", 7, "5", "int16"])
    assert out.view(np.int16).tolist() == [-100, -5, 0, 5, 7]
    clip.callable([_bytes(x), out, _bytes(np.array([-6], np.int16)), "", "5", "int16"])
    assert out.view(np.int16).tolist() == [-6, -5, 0, 5, 100]
    clip.callable([_bytes(x), out, "-6", "7", "5", "int16"])  # a constant may come as text
    assert out.view(np.int16).tolist() == [-6, -5, 0, 5, 7]
    clip.callable([_bytes(x), out, 3, 1, "5", "int16"])  # min above max: everything is max, as ONNX
    assert out.view(np.int16).tolist() == [1] * 5


@pytest.mark.parametrize(("low", "high", "dtype", "fragment"), [
    (-1, "", "uint8", "min -1 outside uint8"),
    ("", 300, "uint8", "max 300 outside uint8"),
    ("x", "", "uint8", "min 'x' is not an integer"),
    (1.5, "", "uint8", "min 1.5 is not an integer"),
    ("", True, "uint8", "max True is not an integer"),
    ("", "", "float32", "clip_int of float32"),
    (np.zeros(2, np.uint8), "", "uint8", "min holds 2 bytes"),
])
def test_clip_int_refuses_bad_bounds(low, high, dtype, fragment) -> None:
    with pytest.raises(DlaError, match=fragment):
        _lookup("clip_int").callable([np.zeros(4, np.uint8), np.zeros(4, np.uint8), low, high, "4", dtype])


def test_integer_maxpool_is_exact_and_integer_averagepool_is_refused() -> None:
    pool = _lookup("pool").callable
    big = np.iinfo(np.int64).max
    x = np.array([[[[big, big - 1], [-big, 3]]]], np.int64)  # beyond float64's 53-bit mantissa
    out = np.zeros(8, np.uint8)
    pool([_bytes(x), out, "1,1,2,2", "1,1,1,1", "max", "2,2", "1,1", "0,0,0,0", "1,1", 0, "int64", "int64"])
    assert out.view(np.int64)[0] == big
    out2 = np.zeros(8, np.uint8)
    pool([_bytes(x - 1), out2, "1,1,2,2", "1,1,1,1", "max", "2,2", "1,1", "0,0,0,0", "1,1", 0, "int64",
          "int64"])
    assert out2.view(np.int64)[0] == big - 1
    with pytest.raises(DlaError, match="avg pool of int64 into int64"):
        pool([_bytes(x), out, "1,1,2,2", "1,1,1,1", "avg", "2,2", "1,1", "0,0,0,0", "1,1", 0, "int64",
              "int64"])
    with pytest.raises(DlaError, match="max pool of int64 into float32"):
        pool([_bytes(x), out, "1,1,2,2", "1,1,1,1", "max", "2,2", "1,1", "0,0,0,0", "1,1", 0, "int64",
              "float32"])


def test_eltwise_int_div_truncates_wraps_and_refuses_zero() -> None:
    div = _lookup("eltwise_int").callable
    a = np.array([-7, 7, -7, 7, -2**31, 0], np.int32)
    b = np.array([2, -2, -2, 2, -1, 5], np.int32)
    out = np.zeros(24, np.uint8)
    div([_bytes(a), _bytes(b), out, "6", "6", "6", "div", "int32"])
    assert out.view(np.int32).tolist() == [-3, -3, 3, 3, -2**31, 0]
    u = np.array([7, 255], np.uint8)
    out8 = np.zeros(2, np.uint8)
    div([_bytes(u), _bytes(np.array([2, 16], np.uint8)), out8, "2", "2", "2", "div", "uint8"])
    assert out8.tolist() == [3, 15]
    with pytest.raises(DlaError, match="division by zero") as e:
        div([_bytes(a), _bytes(np.zeros(1, np.int32)), out, "6", "1", "6", "div", "int32"])
    assert e.value.code == NvError.BadValue


def test_functions_compute_inf_and_nan_without_numpy_warnings() -> None:
    x = np.array([[np.inf, 1.0, -np.inf], [np.nan, 0.0, 1e38]], np.float32)
    out = np.zeros(24, np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _lookup("softmax").callable([_bytes(x), out, 1, "2,3", "float32", "float32"])
    assert np.isnan(out.view(np.float32)).all()  # inf - inf, as numpy's IEEE arithmetic gives


def test_erf_matches_the_standard_library_to_float64_precision() -> None:
    import math

    xs = np.concatenate([np.linspace(-6, 6, 20001), np.logspace(-12, 0.5, 400), -np.logspace(-12, 0.5, 400)])
    want = np.array([math.erf(v) for v in xs])
    got = cpumath.erf(xs)
    assert np.all(np.abs(got - want) <= 1e-7 * np.maximum(np.abs(want), 1e-300))  # relative, also near 0


def test_unary_computes_and_checks_its_arguments() -> None:
    unary = _lookup("unary")
    assert unary.num_args == 8
    x = np.array([-2.0, -0.5, 0.0, 0.5, 3.0], np.float32)
    out = np.zeros(20, np.uint8)
    unary.callable([_bytes(x), out, "5", "HardSigmoid", 0.25, 0.5, "float32", "float32"])
    np.testing.assert_allclose(out.view(np.float32), np.clip(0.25 * x + 0.5, 0, 1))
    unary.callable([_bytes(x), out, "5", "Elu", 2.0, 0.0, "float32", "float32"])
    np.testing.assert_allclose(out.view(np.float32), np.where(x > 0, x, 2.0 * np.expm1(x)), rtol=1e-6)
    for args, fragment in (
            ([_bytes(x), out, "5", "Frobnicate", 0.0, 0.0, "float32", "float32"], "unary op 'Frobnicate'"),
            ([_bytes(x), out, "5", "Elu", "1", 0.0, "float32", "float32"], "alpha '1' is not a number"),
            ([_bytes(x), out[:16], "5", "Exp", 0.0, 0.0, "float32", "float32"], "holds 16 bytes"),
            ([_bytes(x), out, "5", "Exp", 0.0, 0.0, "int32", "float32"], "dtype 'int32'")):
        with pytest.raises(DlaError, match=fragment):
            unary.callable(args)


def test_reduce_computes_and_checks_its_arguments() -> None:
    reduce = _lookup("reduce")
    assert reduce.num_args == 8
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = np.zeros(8 * 4, np.uint8)
    reduce.callable([_bytes(x), out, "2,3,4", _bytes(np.array([-2], np.int64)), 0, "ReduceMean", "float32",
                     "float32"])
    np.testing.assert_allclose(out.view(np.float32), x.mean(axis=1).ravel())
    whole = np.zeros(4, np.uint8)
    reduce.callable([_bytes(x), whole, "2,3,4", "", 0, "ReduceSum", "float32", "float32"])
    assert whole.view(np.float32)[0] == x.sum()
    b = np.array([[0, 1], [0, 0]], np.uint8)
    bout = np.zeros(2, np.uint8)
    reduce.callable([b.ravel(), bout, "2,2", "1", 0, "ReduceMax", "bool", "bool"])
    assert bout.tolist() == [1, 0]
    for args, fragment in (
            ([_bytes(x), out, "2,3,4", "3", 0, "ReduceMean", "float32", "float32"], r"axes \[3\] of"),
            ([_bytes(x), out, "2,3,4", "1,-2", 0, "ReduceMean", "float32", "float32"], "repeat an axis"),
            ([_bytes(x), out, "2,3,4", "1", 0, "ReduceMedian", "float32", "float32"], "'ReduceMedian'"),
            ([_bytes(x), out, "2,3,4", "1", 0, "ReduceMean", "int32", "int32"], "ReduceMean of int32"),
            ([_bytes(x), out[:28], "2,3,4", "1", 0, "ReduceMean", "float32", "float32"], "holds 28 bytes")):
        with pytest.raises(DlaError, match=fragment):
            reduce.callable(args)


def test_compare_where_cast_argmax_check_their_arguments() -> None:
    a = np.array([1.0, 2.0, 3.0], np.float32)
    out = np.zeros(3, np.uint8)
    _lookup("compare").callable([_bytes(a), _bytes(np.float32(2.0)), out, "3", "1", "3", "Less", "float32",
                                 "float32"])
    assert out.tolist() == [1, 0, 0]
    weird = np.array([0, 7, 255], np.uint8)  # bool bytes other than 0 and 1 read as true
    _lookup("compare").callable([weird, np.ones(1, np.uint8), out, "3", "1", "3", "And", "bool", "bool"])
    assert out.tolist() == [0, 1, 1]
    for name, args, fragment in (
            ("compare", [_bytes(a), _bytes(a), out, "3", "2", "3", "Less", "float32", "float32"],
             r"Less of \(3,\) and \(2,\)"),
            ("compare", [_bytes(a), _bytes(a), out, "3", "3", "3", "Like", "float32", "float32"],
             "comparison 'Like'"),
            ("where", [weird, _bytes(a), _bytes(a), np.zeros(12, np.uint8), "3", "3", "3", "3", "float32",
                       "int32", "float32"], "Where of float32 and int32"),
            ("cast", [_bytes(a), np.zeros(8, np.uint8), "3", "float32", "int32"], "holds 8 bytes"),
            ("argmax", [_bytes(a), np.zeros(8, np.uint8), "3", 1, 0, "ArgMax", "float32"], "axis 1 of"),
            ("argmax", [_bytes(a), np.zeros(8, np.uint8), "3", 0, 0, "ArgMedian", "float32"], "'ArgMedian'")):
        with pytest.raises(DlaError, match=fragment):
            _lookup(name).callable(args)
    cast = np.zeros(12, np.uint8)
    _lookup("cast").callable([_bytes(np.array([-1.7, 2.9, 1e20], np.float32)), cast, "3", "float32", "int32"])
    assert cast.view(np.int32).tolist() == [-1, 2, 2**31 - 1]  # toward zero; out of range saturates
