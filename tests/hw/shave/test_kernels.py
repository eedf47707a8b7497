"""The shipped kernels on a tile: softmax against numpy (relative tolerance 1e-5: a degree-6
polynomial exp, float32 sums), the dynamic-shape MemRefData case (the kernel writes the output's
dims and strides in WIN_F), and the committed ELFs against their sources."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.kernels import build
from tests.hw.shave.host import Args, Host, cmx, treg
from tests.hw.shave.test_scenario import clamp_args

ROOT = Path(__file__).resolve().parents[3]
RTOL = 1e-5  # the documented tolerance of the softmax kernel (kernels/src/softmax.c)


def np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


def run_softmax(host: Host, x: np.ndarray, axis: int, tile: int = 0, dynamic_at: int | None = None
                ) -> np.ndarray:
    out_off = 0x100000
    src, out = host.put(x), host.alloc(x.nbytes)
    host.barrier(0, 1, 1)
    host.barrier(1, 1, 1)
    host.dma(src, cmx(0), x.nbytes, dst_tile=tile, update=1)
    a = Args(S.SoftmaxParams)
    a.memref("input", cmx(0), x.shape, np.float32)
    a.memref("output", cmx(out_off), x.shape, np.float32,
             dynamic_at=None if dynamic_at is None else cmx(dynamic_at))
    a.params.axis = axis
    host.kernel(tile, "softmax", a, wait=1, update=2)
    host.dma(cmx(out_off), out, x.nbytes, src_tile=tile, wait=2)
    assert host.r(treg(tile, "error")) == 0, host.dev.shave.error_text(tile)  # type: ignore[union-attr]
    return np.frombuffer(host.read(out, x.nbytes), np.float32).reshape(x.shape)


@pytest.mark.parametrize(("shape", "axis"), [((1000,), 0), ((6, 70), -1), ((6, 70), 0), ((3, 4, 50), 1)])
def test_softmax_matches_numpy(host: Host, shape: tuple[int, ...], axis: int) -> None:
    host.start_tile(1)
    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 10).astype(np.float32)
    got = run_softmax(host, x, axis, tile=1)
    np.testing.assert_allclose(got, np_softmax(x, axis), rtol=RTOL, atol=1e-30)


def test_softmax_extremes(host: Host) -> None:
    host.start_tile(0)
    x = np.array([0.0, -200.0, 88.0, 88.0, -1e30, 3.5], np.float32)
    np.testing.assert_allclose(run_softmax(host, x, 0), np_softmax(x, 0), rtol=RTOL, atol=1e-30)


def _dynamic_dims(host: Host, tile: int, at: int, ndims: int) -> tuple[list[int], list[int]]:
    """The dims and strides the kernel wrote in WIN_F, fetched by DMA as a host would."""
    out = host.alloc(64 + 8 * ndims)
    host.dma(cmx(at), out, 64 + 8 * ndims, src_tile=tile)
    raw = host.read(out, 64 + 8 * ndims)
    dims = np.frombuffer(raw[:4 * ndims], np.int32).tolist()
    strides = np.frombuffer(raw[64:64 + 8 * ndims], np.int64).tolist()
    return dims, strides


def test_dynamic_output_shape_softmax(host: Host) -> None:
    host.start_tile(0)
    x = np.random.default_rng(5).standard_normal((5, 33)).astype(np.float32)
    got = run_softmax(host, x, -1, dynamic_at=0x1F0000)
    np.testing.assert_allclose(got, np_softmax(x, -1), rtol=RTOL, atol=1e-30)
    assert _dynamic_dims(host, 0, 0x1F0000, 2) == ([5, 33], [33 * 32, 32])  # strides in bits


def test_dynamic_output_shape_clamp(host: Host) -> None:
    host.start_tile(1)
    x = np.linspace(-5, 5, 2 * 3 * 7).astype(np.float16).reshape(2, 3, 7)
    src, out = host.put(x), host.alloc(x.nbytes)
    host.barrier(9, 1, 1)
    host.barrier(10, 1, 1)
    host.dma(src, cmx(0), x.nbytes, dst_tile=1, update=1 << 9)
    host.kernel(1, "clamp", clamp_args(cmx(0), cmx(0x400), x.shape, np.float16, -1, 2,
                                       dynamic_at=cmx(0x800)), wait=1 << 9, update=1 << 10)
    host.dma(cmx(0x400), out, x.nbytes, src_tile=1, wait=1 << 10)
    got = np.frombuffer(host.read(out, x.nbytes), np.float16).reshape(x.shape)
    assert np.array_equal(got, np.clip(x, np.float16(-1), np.float16(2)))
    assert _dynamic_dims(host, 1, 0x800, 3) == ([2, 3, 7], [21 * 16, 7 * 16, 16])


needs_toolchain = pytest.mark.skipif(build.compiler() is None,
                                     reason=f"no RISC-V C compiler: {build.INSTALL_HINT}")
needs_reference = pytest.mark.skipif(
    build.reference_toolchain() is None,
    reason="the committed kernel ELFs are what Debian's riscv64-unknown-elf-gcc builds (zig's compiler "
           "makes other bytes), and it is not installed: apt-get install gcc-riscv64-unknown-elf to check "
           "them (CI does)")


@needs_reference
def test_committed_kernels_are_built_from_their_sources() -> None:
    stale = build.stale_kernels()
    assert not stale, f"run tools/build-kernels: stale {', '.join(stale)}"


def test_the_check_without_debians_gcc_says_why(tmp_path: Path) -> None:
    """tools/build-kernels (--check) compares with what Debian's gcc builds: without it, whatever
    other compiler there is (zig's from PyPI), exit 2 saying what to install."""
    env = {k: v for k, v in os.environ.items() if k != build.CC_ENV}
    env["PATH"] = str(tmp_path)  # no riscv64-unknown-elf-gcc; the tool runs with this interpreter
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "build-kernels"), "--check"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "apt-get install gcc-riscv64-unknown-elf" in result.stderr and "zig" in result.stderr
    assert result.stderr.count("\n") == 1


@needs_toolchain
def test_builds_are_reproducible() -> None:
    source = build.SOURCE_DIR / "clamp.c"
    assert build.build(source) == build.build(source)


def test_every_source_has_its_elf() -> None:
    assert sorted(p.stem for p in build.sources()) == sorted(p.stem for p in build.KERNELS_DIR.glob("*.elf"))
    assert {"runtime", "clamp", "softmax"} <= {p.stem for p in build.sources()}


def test_kernels_and_runtimes_replace_each_other_on_a_tile(host: Host) -> None:
    """The emulator caches translated code: a new kernel in WIN_D (or runtime in RT_WIN) must run,
    not the code that was there before."""
    from tests.hw.shave.host import RET, tiny_elf

    host.start_tile(0)
    x = np.random.default_rng(9).standard_normal(300).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(run_softmax(host, x, 0), np_softmax(x, 0), rtol=RTOL, atol=1e-30)
        host.kernel(0, "empty", b"", image=tiny_elf([RET]))
        assert host.r(treg(0, "error")) == 0
        got = run_softmax(host, x * 2, 0)
        np.testing.assert_allclose(got, np_softmax(x * 2, 0), rtol=RTOL, atol=1e-30)
        host.start_tile(0)  # the same runtime again, reloaded


def _reference(op: str, x: np.ndarray) -> np.ndarray:
    import math

    d = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    softplus = np.logaddexp(0.0, d)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"EXP": lambda: np.exp(d), "SIGMOID": lambda: 1 / (1 + np.exp(-d)), "TANH": lambda: np.tanh(d),
                "ERF": lambda: erf(d), "GELU": lambda: 0.5 * d * (1 + erf(d / math.sqrt(2))),
                "SQRT": lambda: np.sqrt(d), "LOG": lambda: np.log(d), "SOFTPLUS": lambda: softplus,
                "MISH": lambda: d * np.tanh(softplus)}[op]()


@pytest.mark.parametrize("op", [m.name for m in S.shave_activation_e])
def test_activation_kernel(host: Host, op: str) -> None:
    """Accuracy as activation.c documents it: EXP and SIGMOID relative 1e-5; the others absolute
    1e-6 and relative 1e-5; over -20..20 (EXP: -80..80) and around 0, strided output (SQRT and LOG:
    NaN below 0, LOG -inf at 0)."""
    host.start_tile(0)
    lim = 80 if op == "EXP" else 20
    x = np.concatenate([np.linspace(-lim, lim, 1500), np.linspace(-0.6, 0.6, 490),
                        [0.0, -0.0, 1e-30, 4.5, -9.5]]).astype(np.float32).reshape(5, 399)
    src, out = host.put(x), host.alloc(2 * x.nbytes)
    host.barrier(0, 1, 1)
    host.barrier(1, 1, 1)
    host.dma(src, cmx(0), x.nbytes, dst_tile=0, update=1)
    a = Args(S.ActivationParams)
    a.memref("input", cmx(0), x.shape, np.float32)
    a.memref("output", cmx(0x10000), x.shape, np.float32, strides=(399 * 8, 8))  # every other float
    a.params.op = S.shave_activation_e[op]
    host.kernel(0, "activation", a, wait=1, update=2)
    host.dma(cmx(0x10000), out, 2 * x.nbytes, src_tile=0, wait=2)
    assert host.r(treg(0, "error")) == 0, host.dev.shave.error_text(0)  # type: ignore[union-attr]
    got = np.frombuffer(host.read(out, 2 * x.nbytes), np.float32).reshape(5, 399, 2)[:, :, 0]
    atol = 0.0 if op in ("EXP", "SIGMOID") else 1e-6
    np.testing.assert_allclose(got, _reference(op, x), rtol=1e-5, atol=atol or 1e-37)


def np_layernorm(x: np.ndarray, axis: int, scale: np.ndarray | None, bias: np.ndarray | None,
                 eps: float) -> np.ndarray:
    d = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    y = (d - d.mean(axis=axes, keepdims=True)) / np.sqrt(d.var(axis=axes, keepdims=True) + eps)
    shape = x.shape[axis % x.ndim:]
    if scale is not None:
        y = y * scale.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def layernorm_case(shape: tuple[int, ...], axis: int, affine: bool
                   ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """An input and (``affine``) scale and bias for a layer normalisation from ``axis`` on."""
    rng = np.random.default_rng(len(shape) + axis)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    group = int(np.prod(shape[axis % len(shape):]))
    scale = rng.standard_normal(group).astype(np.float32) if affine else None
    bias = rng.standard_normal(group).astype(np.float32) if affine else None
    return x, scale, bias


def run_layernorm(host: Host, x: np.ndarray, axis: int, scale: np.ndarray | None,
                  bias: np.ndarray | None) -> np.ndarray:
    """The layernorm kernel on tile 1: x, scale and bias copied into CMX by one DMA."""
    host.start_tile(1)
    shape = x.shape
    group = int(np.prod(shape[axis % len(shape):]))
    blob = np.concatenate([x.ravel()] + ([scale, bias] if scale is not None and bias is not None else []))
    src, out = host.put(blob.astype(np.float32)), host.alloc(x.nbytes)
    host.barrier(0, 1, 1)
    host.barrier(1, 1, 1)
    host.dma(src, cmx(0), blob.nbytes, dst_tile=1, update=1)
    a = Args(S.LayerNormParams)
    a.memref("input", cmx(0), shape, np.float32)
    a.memref("output", cmx(0x80000), shape, np.float32)
    if scale is not None:
        a.memref("scale", cmx(x.nbytes), (group,), np.float32)
        a.memref("bias", cmx(x.nbytes + 4 * group), (group,), np.float32)
    a.params.axis, a.params.epsilon = axis, 1e-5
    host.kernel(1, "layernorm", a, wait=1, update=2)
    host.dma(cmx(0x80000), out, x.nbytes, src_tile=1, wait=2)
    assert host.r(treg(1, "error")) == 0, host.dev.shave.error_text(1)  # type: ignore[union-attr]
    return np.frombuffer(host.read(out, x.nbytes), np.float32).reshape(shape)


@pytest.mark.parametrize(("shape", "axis", "affine"), [((4, 3, 50), -1, True), ((4, 3, 50), 1, True),
                                                      ((7, 64), -1, False), ((300,), 0, True)])
def test_layernorm_kernel(host: Host, shape: tuple[int, ...], axis: int, affine: bool) -> None:
    """ONNX LayerNormalization: relative 1e-5, absolute 1e-5 (values near 0), as layernorm.c says."""
    x, scale, bias = layernorm_case(shape, axis, affine)
    got = run_layernorm(host, x, axis, scale, bias)
    np.testing.assert_allclose(got, np_layernorm(x, axis, scale, bias, 1e-5), rtol=1e-5, atol=1e-5)


def test_layernorm_refuses_a_strided_group(host: Host) -> None:
    host.start_tile(0)
    a = Args(S.LayerNormParams)
    a.memref("input", cmx(0), (4, 8), np.float32, strides=(64, 8))  # every other float
    a.memref("output", cmx(0x1000), (4, 8), np.float32)
    a.params.axis, a.params.epsilon = -1, 1e-5
    host.kernel(0, "layernorm", a)
    assert host.r(treg(0, "error")) == R.shave_error_e.TRAP


def _run_unary(host: Host, name: str, params: type, x: np.ndarray, out_dtype: type,
               **fields: int) -> np.ndarray:
    host.start_tile(0)
    out_bytes = x.size * np.dtype(out_dtype).itemsize
    src, out = host.put(x), host.alloc(out_bytes)
    host.barrier(0, 1, 1)
    host.barrier(1, 1, 1)
    host.dma(src, cmx(0), x.nbytes, dst_tile=0, update=1)
    a = Args(params)
    a.memref("input", cmx(0), x.shape, x.dtype)
    a.memref("output", cmx(0x40000), x.shape, out_dtype)
    for key, value in fields.items():
        setattr(a.params, key, value)
    host.kernel(0, name, a, wait=1, update=2)
    host.dma(cmx(0x40000), out, out_bytes, src_tile=0, wait=2)
    assert host.r(treg(0, "error")) == 0, host.dev.shave.error_text(0)  # type: ignore[union-attr]
    return np.frombuffer(host.read(out, out_bytes), out_dtype).reshape(x.shape)


def test_fp16_output_rounds_to_nearest_even(host: Host) -> None:
    """exp over -20..12 into FP16: zeros, subnormals, normals and infinities, each within one unit in
    the last place of numpy's float64 result rounded to float16 (the kernel's float32 exp differs by
    ~1e-7 relative, which can move a value across a rounding boundary)."""
    x = np.linspace(-20, 12, 4000).astype(np.float32)
    got = _run_unary(host, "activation", S.ActivationParams, x, np.float16, op=S.shave_activation_e.EXP)
    with np.errstate(over="ignore"):  # the top of the range is infinite in float16, as intended
        want = np.exp(x.astype(np.float64)).astype(np.float16)
    assert np.isinf(got[-1]) and got[0] == 0 and np.any((got > 0) & (got < np.float16(6.1e-5)))
    diff = np.abs(got.view(np.int16).astype(np.int32) - want.view(np.int16).astype(np.int32))
    assert diff.max() <= 1 and np.count_nonzero(diff) < x.size // 100


@pytest.mark.parametrize(("in_dtype", "out_dtype"), [(np.float16, np.float16), (np.float16, np.float32),
                                                     (np.float32, np.float16)])
def test_softmax_fp16(host: Host, in_dtype: type, out_dtype: type) -> None:
    x = (np.random.default_rng(3).standard_normal((4, 120)) * 4).astype(in_dtype)
    got = _run_unary(host, "softmax", S.SoftmaxParams, x, out_dtype, axis=-1)
    want = np_softmax(x.astype(np.float32), -1)
    rtol = 1e-3 if out_dtype is np.float16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=1e-7)


def test_activation_fp16_input(host: Host) -> None:
    x = np.linspace(-6, 6, 777).astype(np.float16)
    got = _run_unary(host, "activation", S.ActivationParams, x, np.float32, op=S.shave_activation_e.SIGMOID)
    np.testing.assert_allclose(got, _reference("SIGMOID", x.astype(np.float32)), rtol=1e-5)


def test_log_over_the_whole_float_range(host: Host) -> None:
    """LOG from subnormals to the largest floats: relative 1e-5 (absolute 1e-6 near x = 1)."""
    x = np.concatenate([np.logspace(-44, 38, 1500), np.linspace(0.5, 2.0, 499), [np.inf]]).astype(np.float32)
    got = _run_unary(host, "activation", S.ActivationParams, x, np.float32, op=S.shave_activation_e.LOG)
    np.testing.assert_allclose(got, np.log(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def np_log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    d = x.astype(np.float64) - x.max(axis=axis, keepdims=True)
    return d - np.log(np.exp(d).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize(("shape", "axis", "dtype"), [((6, 70), -1, np.float32), ((3, 4, 50), 1, np.float32),
                                                      ((4, 120), -1, np.float16)])
def test_log_softmax_kernel(host: Host, shape: tuple[int, ...], axis: int, dtype: type) -> None:
    """(x - max) - log(sum exp(x - max)): absolute 1e-5 plus relative 1e-5 (fp16 output: its precision);
    no -inf for elements far below the maximum."""
    x = (np.random.default_rng(11).standard_normal(shape) * 10).astype(dtype)
    x.flat[0] = -300.0 if dtype is np.float32 else -60000.0
    got = _run_unary(host, "log_softmax", S.SoftmaxParams, x, dtype, axis=axis)
    want = np_log_softmax(x, axis)
    assert np.isfinite(got).all()
    rtol, atol = (1e-5, 1e-5) if dtype is np.float32 else (1e-3, 1e-2)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol)


def _np_reduce(op: str, x: np.ndarray) -> np.ndarray:
    d = x.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        m = d.max(axis=1)
        return {"SUM": lambda: d.sum(1), "MEAN": lambda: d.mean(1), "MAX": lambda: m, "MIN": lambda: d.min(1),
                "PROD": lambda: d.prod(1), "L1": lambda: np.abs(d).sum(1),
                "L2": lambda: np.sqrt((d * d).sum(1)),
                "SUM_SQUARE": lambda: (d * d).sum(1), "LOG_SUM": lambda: np.log(d.sum(1)),
                "LOG_SUM_EXP": lambda: m + np.log(np.exp(d - m[:, None, :]).sum(1))}[op]()


def run_reduce(host: Host, x: np.ndarray, op: str, out_dtype: type = np.float32,
               keep: bool = True) -> np.ndarray:
    host.start_tile(0)
    a, _, b = x.shape
    out_shape = (a, 1, b) if keep else (a, b)
    out_bytes = a * b * np.dtype(out_dtype).itemsize
    src, out = host.put(x), host.alloc(out_bytes)
    host.barrier(0, 1, 1)
    host.barrier(1, 1, 1)
    host.dma(src, cmx(0), x.nbytes, dst_tile=0, update=1)
    args = Args(S.ReduceParams)
    args.memref("input", cmx(0), x.shape, x.dtype)
    args.memref("output", cmx(0x40000), out_shape, out_dtype)
    args.params.op = S.shave_reduce_e[op]
    host.kernel(0, "reduce", args, wait=1, update=2)
    host.dma(cmx(0x40000), out, out_bytes, src_tile=0, wait=2)
    assert host.r(treg(0, "error")) == 0, host.dev.shave.error_text(0)  # type: ignore[union-attr]
    return np.frombuffer(host.read(out, out_bytes), out_dtype).reshape(a, b)


@pytest.mark.parametrize("op", [m.name for m in S.shave_reduce_e])
def test_reduce_kernel(host: Host, op: str) -> None:
    """Each reduction over the middle of (A, R, B): relative 1e-5 (float32 sums of 37 terms),
    absolute 1e-6; MAX and MIN exact; LOG_SUM of a positive sum."""
    rng = np.random.default_rng(len(op))
    x = rng.standard_normal((3, 37, 5)).astype(np.float32)
    if op in ("LOG_SUM", "PROD"):
        x = (np.abs(x) + 0.5).astype(np.float32)
    got = run_reduce(host, x, op, keep=op != "MEAN")
    want = _np_reduce(op, x)
    if op in ("MAX", "MIN"):
        np.testing.assert_array_equal(got, want.astype(np.float32))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reduce_into_fp16_and_of_infinities(host: Host) -> None:
    x = np.array([[[1.0], [np.inf], [2.0]], [[-np.inf], [-np.inf], [-np.inf]]], np.float32)
    got = run_reduce(host, x, "LOG_SUM_EXP", np.float16)
    assert got[0, 0] == np.inf and got[1, 0] == -np.inf
    y = np.random.default_rng(1).standard_normal((2, 50, 3)).astype(np.float16)
    got16 = run_reduce(host, y, "SUM", np.float16).astype(np.float64)
    np.testing.assert_allclose(got16, _np_reduce("SUM", y), rtol=1e-3, atol=1e-2)
