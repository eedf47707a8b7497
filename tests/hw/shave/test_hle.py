"""High-level emulation ("fast", the default) against the kernels' machine code ("exact"): the same
invocations on two devices agree within each kernel's documented tolerance (clamp bit for bit), the
fast device runs no kernel code for them, and what the equivalents do not cover (a changed ELF, a
pointer outside the windows) runs on the emulator, faults included."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError
from pydla.hw.device import VirtualDevice
from pydla.kernels.build import kernel_elf
from tests.hw.shave.conftest import config
from tests.hw.shave.host import Args, Host, cmx, treg
from tests.hw.shave.test_kernels import _run_unary, layernorm_case, run_layernorm, run_softmax
from tests.hw.shave.test_scenario import run_clamp


@pytest.fixture
def hosts() -> Iterator[dict[str, Host]]:
    devices = {mode: VirtualDevice(config(mode), mode="deterministic") for mode in ("fast", "exact")}
    yield {mode: Host(dev) for mode, dev in devices.items()}
    for dev in devices.values():
        dev.close()


def fast_count(host: Host) -> int:
    assert host.dev.shave is not None
    return sum(t.fast_invocations for t in host.dev.shave.tiles)


def both(hosts: dict[str, Host], run: Callable[[Host], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``run`` on the fast and the exact device: (fast result, exact result)."""
    got = {mode: run(host) for mode, host in hosts.items()}
    assert fast_count(hosts["fast"]) >= 1 and fast_count(hosts["exact"]) == 0
    return got["fast"], got["exact"]


def assert_fp16_close(a: np.ndarray, b: np.ndarray) -> None:
    """Within float16's precision (a float32 result one rounding boundary away) or the kernels'
    absolute tolerance (1e-6, which is several float16 units for results near 0)."""
    np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=1e-3, atol=2e-6)


def test_the_default_mode_is_fast() -> None:
    dev = VirtualDevice("full")
    try:
        assert dev.config.shave is not None and dev.config.shave.emulation == "fast"
    finally:
        dev.close()


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_clamp_is_bit_exact(hosts: dict[str, Host], dtype: type) -> None:
    x = np.concatenate([np.linspace(-9, 9, 501), [np.nan, np.inf, -np.inf]]).astype(dtype).reshape(3, 7, 24)

    def run(host: Host) -> np.ndarray:
        host.start_tile(0)
        return run_clamp(host, x, -2.5, 3.25)

    fast, exact = both(hosts, run)
    assert fast.tobytes() == exact.tobytes()


@pytest.mark.parametrize(("shape", "axis"), [((1000,), 0), ((6, 70), -1), ((6, 70), 0), ((3, 4, 50), 1)])
def test_softmax(hosts: dict[str, Host], shape: tuple[int, ...], axis: int) -> None:
    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 10).astype(np.float32)
    x.flat[0] = -200.0  # below max - 87: exactly 0 in both

    def run(host: Host) -> np.ndarray:
        host.start_tile(1)
        return run_softmax(host, x, axis, tile=1)

    fast, exact = both(hosts, run)
    np.testing.assert_allclose(fast, exact, rtol=2e-5, atol=1e-30)


def test_softmax_dynamic_output(hosts: dict[str, Host]) -> None:
    x = np.random.default_rng(5).standard_normal((5, 33)).astype(np.float32)

    def run(host: Host) -> np.ndarray:
        host.start_tile(0)
        got = run_softmax(host, x, -1, dynamic_at=0x1F0000)
        out = host.alloc(128)
        host.dma(cmx(0x1F0000), out, 128, src_tile=0)
        return np.concatenate([got.ravel(), np.frombuffer(host.read(out, 128), np.float32)])

    fast, exact = both(hosts, run)
    np.testing.assert_allclose(fast[:x.size], exact[:x.size], rtol=2e-5)
    assert fast[x.size:].tobytes() == exact[x.size:].tobytes()  # the dims and strides it wrote


@pytest.mark.parametrize("op", [m.name for m in S.shave_activation_e])
@pytest.mark.parametrize(("in_dtype", "out_dtype"), [(np.float32, np.float32), (np.float16, np.float16)])
def test_activation(hosts: dict[str, Host], op: str, in_dtype: type, out_dtype: type) -> None:
    x = np.linspace(-12, 12, 3001).astype(in_dtype)

    def run(host: Host) -> np.ndarray:
        return _run_unary(host, "activation", S.ActivationParams, x, out_dtype, op=S.shave_activation_e[op])

    fast, exact = both(hosts, run)
    if out_dtype is np.float16:
        assert_fp16_close(fast, exact)
    else:
        np.testing.assert_allclose(fast, exact, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize(("shape", "axis", "affine"), [((4, 3, 50), -1, True), ((4, 3, 50), 1, True),
                                                      ((7, 64), -1, False)])
def test_layernorm(hosts: dict[str, Host], shape: tuple[int, ...], axis: int, affine: bool) -> None:
    x, scale, bias = layernorm_case(shape, axis, affine)
    fast, exact = both(hosts, lambda host: run_layernorm(host, x, axis, scale, bias))
    np.testing.assert_allclose(fast, exact, rtol=2e-5, atol=2e-5)


def test_a_changed_kernel_runs_its_machine_code(hosts: dict[str, Host]) -> None:
    """One byte appended to clamp's ELF: no longer the shipped kernel, so the emulator runs it."""
    host = hosts["fast"]
    host.start_tile(0)
    x = np.linspace(-4, 4, 64).astype(np.float32)
    src, out = host.put(x), host.alloc(x.nbytes)
    host.barrier(0, 1, 1)
    host.barrier(1, 1, 1)
    a = Args(S.ClampParams)
    a.memref("input", cmx(0), x.shape, np.float32)
    a.memref("output", cmx(0x1000), x.shape, np.float32)
    a.params.minVal, a.params.maxVal = np.float16(-1).view(np.uint16), np.float16(1).view(np.uint16)
    host.dma(src, cmx(0), x.nbytes, dst_tile=0, update=1)
    host.kernel(0, "changed", a, image=kernel_elf("clamp") + b"\0", wait=1, update=2)
    host.dma(cmx(0x1000), out, x.nbytes, src_tile=0, wait=2)
    assert host.r(treg(0, "error")) == 0
    np.testing.assert_array_equal(np.frombuffer(host.read(out, x.nbytes), np.float32), np.clip(x, -1, 1))
    assert fast_count(host) == 0


@pytest.mark.parametrize("field", ["input", "output"])
def test_an_uncovered_invocation_faults_as_the_kernel_does(hosts: dict[str, Host], field: str) -> None:
    """A pointer outside the windows: the equivalent does not cover it, the machine code runs and
    faults; both devices report the same error and address."""
    errors: dict[str, dict[str, int]] = {}
    for mode, host in hosts.items():
        host.start_tile(0)
        a = Args(S.ActivationParams)
        a.memref("input", cmx(0), (16,), np.float32)
        a.memref("output", cmx(0x1000), (16,), np.float32)
        getattr(a.params, field).dataAddr = 0x40000000
        a.params.op = S.shave_activation_e.EXP
        host.kernel(0, "activation", a)
        errors[mode] = host.tile_error(0)
    assert errors["fast"]["error"] in (R.shave_error_e.READ_FAULT, R.shave_error_e.WRITE_FAULT)
    for key in ("error", "error_addr", "error_kernel"):
        assert errors["fast"][key] == errors["exact"][key], key
    assert fast_count(hosts["fast"]) == 0


def test_emulation_must_be_fast_or_exact() -> None:
    from pydla.target.shave import parse_shave

    with pytest.raises(DlaError) as e:
        parse_shave({"tiles": 1, "emulation": "quick"}, "cfg.json")
    assert e.value.code == NvError.BadValue
    assert "shave.emulation" in str(e.value) and "'quick'" in str(e.value)


@pytest.mark.parametrize(("in_dtype", "out_dtype"), [(np.float32, np.float32), (np.float16, np.float32),
                                                     (np.float32, np.float16)])
def test_log_softmax(hosts: dict[str, Host], in_dtype: type, out_dtype: type) -> None:
    x = (np.random.default_rng(4).standard_normal((5, 90)) * 6).astype(in_dtype)

    def run(host: Host) -> np.ndarray:
        return _run_unary(host, "log_softmax", S.SoftmaxParams, x, out_dtype, axis=-1)

    fast, exact = both(hosts, run)
    np.testing.assert_allclose(fast.astype(np.float32), exact.astype(np.float32),
                               rtol=1e-3 if out_dtype is np.float16 else 2e-5, atol=2e-5)


@pytest.mark.parametrize("op", [m.name for m in S.shave_reduce_e])
def test_reduce(hosts: dict[str, Host], op: str) -> None:
    from tests.hw.shave.test_kernels import run_reduce

    x = np.random.default_rng(9).standard_normal((4, 41, 6)).astype(np.float32)
    if op in ("LOG_SUM", "PROD"):
        x = (np.abs(x) + 0.5).astype(np.float32)

    def run(host: Host) -> np.ndarray:
        return run_reduce(host, x, op)

    fast, exact = both(hosts, run)
    np.testing.assert_allclose(fast, exact, rtol=2e-5, atol=2e-6)
