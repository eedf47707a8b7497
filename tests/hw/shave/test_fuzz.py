"""A short fuzz campaign over what the SHAVE tiles take from outside: mutated task descriptors,
kernel and runtime ELF images and argument buffers, and random writes to the SHAVE registers. No
exception leaves the device, every failure is an error status, and the device runs the scenario
right afterwards. More cases: ``PYDLA_FUZZ_CASES=5000 python -m pytest tests/hw/shave/test_fuzz.py``."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.hw.device import VirtualDevice
from pydla.kernels.build import kernel_elf
from pydla.target.config import parse_config
from tests.hw.regs import raw_config
from tests.hw.shave.host import Host, cmx, treg
from tests.hw.shave.test_scenario import clamp_args, run_clamp

CASES = int(os.environ.get("PYDLA_FUZZ_CASES", "150"))
SEED = 20261125
E = R.shave_error_e


def mutate(rng: random.Random, data: bytes) -> bytes:
    """Flip bytes, overwrite words with boundary values, truncate or extend."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(5)
        if kind == 0 and out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif kind == 1 and len(out) >= 4:
            at = rng.randrange(0, len(out) - 3)
            value = rng.choice([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, S.WIN_D, S.WIN_E, S.WIN_F,
                                S.WIN_F + (1 << 20), rng.getrandbits(32)])
            out[at:at + 4] = value.to_bytes(4, "little")
        elif kind == 2 and out:
            del out[rng.randrange(len(out)):]
        elif kind == 3:
            out += bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64)))
        elif out:
            out[rng.randrange(len(out))] = rng.getrandbits(8)
    return bytes(out)


@pytest.fixture
def fuzz_host() -> Iterator[Host]:
    raw = raw_config()
    raw["shave"] = {"tiles": 2, "cmx_bytes": 1 << 20, "time_budget_ms": 20}
    dev = VirtualDevice(parse_config(raw, "fuzz"))
    yield Host(dev)
    dev.close()


def _recover(host: Host) -> None:
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_INTR_STATUS, 0xFFFFFFFF)
    host.w(R.SHAVE_CTX, host.ctx)
    host.release()


def _check_usable(host: Host) -> None:
    _recover(host)
    host.start_tile(0)
    x = np.linspace(-8, 8, 64).astype(np.float16)
    assert np.array_equal(run_clamp(host, x, -1, 1), np.clip(x, np.float16(-1), np.float16(1)))
    _recover(host)


def test_mutated_inputs_only_ever_give_error_statuses(fuzz_host: Host) -> None:
    host, rng = fuzz_host, random.Random(SEED)
    clamp = kernel_elf("clamp")
    runtime = kernel_elf("runtime")
    good_args = clamp_args(cmx(0), cmx(0x1000), (8, 8), np.float16, -1, 1)
    errors: set[int] = set()
    for case in range(CASES):
        what = case % 5
        host.start_tile(0, runtime=mutate(rng, runtime) if what == 0 else None)
        host.barrier(0, 1, 1)
        if what == 1:  # a mutated kernel ELF
            host.kernel(0, f"k{case}", good_args, image=mutate(rng, clamp))
        elif what == 2:  # a mutated argument buffer
            host.kernel(0, "clamp", mutate(rng, bytes(good_args)))
        elif what == 3:  # a mutated task descriptor
            desc = host.kernel(0, "clamp", good_args, push=False)
            raw = mutate(rng, host.read(desc, S.ActKernelTask.SIZE))
            desc = host.put(raw.ljust(S.ActKernelTask.SIZE, b"\0"))
            host.w(treg(0, "push_lo"), desc & 0xFFFFFFFF)
            host.w(treg(0, "push_hi"), desc >> 32)
        elif what == 4:  # a mutated DMA task, and random writes to the SHAVE registers
            good = S.DmaTask(src_addr=host.put(b"\1" * 256), dst_addr=cmx(0), src_tile=S.DDR, dst_tile=0,
                             line_size=256, line_repeat=1, surf_repeat=1, update_mask=1)
            desc = host.put(mutate(rng, bytes(good)).ljust(S.DmaTask.SIZE, b"\0"))
            host.w(R.SHAVE_DMA_PUSH_LO, desc & 0xFFFFFFFF)
            host.w(R.SHAVE_DMA_PUSH_HI, desc >> 32)
            for _ in range(8):
                address = R.SHAVE_TILES + 4 * rng.randrange(R.shave_regs_t.SIZE // 4)
                if address in (R.SHAVE_CTX, R.SHAVE_RESET):
                    continue
                host.w(address, rng.getrandbits(32))
                host.r(address)
        for tile in (0, 1):
            errors.add(host.r(treg(tile, "error")))
        errors.add(host.r(R.SHAVE_DMA_ERROR))
        assert errors <= {int(e) for e in E}, f"case {case}: unknown error status in {errors}"
        _recover(host)
        if case % 50 == 49:
            _check_usable(host)
    _check_usable(host)
    assert len(errors - {0}) >= 4, f"the mutations reached too few checks: {sorted(errors)}"
