"""Random register programming: whatever a driver writes, the device never raises into the host and
never fails by accident.

Each trial writes random values (biased towards small numbers, valid enumerations, addresses inside
a mapped buffer and the right context) into every D register of one block, or of a CONV + SDP pair,
enables it and resets the device. Every operation must complete, fail with a status, or wait for a
partner; an operation that fails with "internal error" (a Python exception inside the device
rather than a configuration check) is a device bug. This is how a CONV kernel larger than its
padded input, and numpy warnings escaping the device, were found. More trials:
``PYDLA_RANDOM_REGISTERS=100000 python -m pytest tests/hw/test_random_registers.py`` (12,000 by default,
about 2.5 s).
"""

from __future__ import annotations

import os
import random
import struct
import warnings

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.device import VirtualDevice
from tests.hw.regs import Arena

TRIALS = int(os.environ.get("PYDLA_RANDOM_REGISTERS", "12000"))
BLOCKS = ("BDMA", "CONV", "SDP", "PDP", "CDP", "RUBIK")
ENUMS = (("OUT_PRECISION", R.dla_precision_e), ("PRECISION", R.dla_precision_e),
         ("CONV_D_MODE", R.conv_mode_e), ("WT_FORMAT", R.conv_weight_format_e), ("METHOD", R.pdp_method_e),
         ("RUBIK_D_MODE", R.rubik_mode_e), ("SDP_D_ACT", R.sdp_act_e), ("EW_MODE", R.sdp_ew_mode_e),
         ("EW_OP", R.sdp_ew_op_e), ("SRC_MODE", R.sdp_src_mode_e))
FLOATS = ("ALPHA", "_MIN", "_MAX", "LUT_START", "LUT_END")


def _registers(block: str) -> list[str]:
    return sorted(k for k in R.REGISTERS if k.startswith(f"{block}_D_") and not k.endswith("OP_ENABLE"))


def _value(r: random.Random, name: str, arena: Arena) -> int:
    if r.random() < 0.04:
        return r.getrandbits(32)
    for key, enum in ENUMS:
        if name.endswith(key) and r.random() < 0.95:
            return int(r.choice(list(enum)))
    if name.endswith(("ENABLE", "SWAP", "INCLUDE_PAD")):
        return r.choice([0, 1])
    if name.endswith("ADDR_LO"):
        return (arena.iova + r.randrange(0, arena.size, r.choice([1, 2, 4, 4, 4]))) & 0xFFFFFFFF
    if name.endswith("ADDR_HI"):
        return arena.iova >> 32 if r.random() < 0.95 else r.getrandbits(32)
    if "STRIDE" in name:
        return r.choice([0, 4, 8, 16, 32, 64, 128, 256, 1024, 4096])
    if name.endswith("CTX_ID"):
        return arena.ctx if r.random() < 0.95 else r.randrange(0, 5)
    if any(key in name for key in FLOATS):
        value = r.choice([0.0, 1.0, -1.0, 0.5, 1e30, float("nan"), float("inf"), r.uniform(-4, 4)])
        bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
        return bits
    return r.choice([0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 5, 7, 8, 16, 64, 0xFFFF, 0x10000])


def test_random_register_programming_never_raises_nor_fails_by_accident() -> None:
    dev = VirtualDevice("full", mode="deterministic")
    arena = Arena(dev, size=1 << 16)
    arena.bo.array[:] = np.random.default_rng(0).standard_normal(1 << 14).astype(np.float32).view(np.uint8)
    outcomes = {"done": 0, "error": 0, "waiting": 0}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing the device computes may warn in the host
            for trial in range(TRIALS):
                r = random.Random(trial)
                block = r.choice(BLOCKS)
                pair = ["SDP", "CONV"] if block == "CONV" or r.random() < 0.15 else [block]
                for b in pair:
                    dev.reg_write(R.REGISTERS[f"{b}_S_POINTER"], 0)
                    for name in _registers(b):
                        dev.reg_write(R.REGISTERS[name], _value(r, name, arena))
                    if b == "SDP" and len(pair) == 2 and r.random() < 0.8:
                        dev.reg_write(R.REGISTERS["SDP_D_SRC_MODE"], int(R.sdp_src_mode_e.FLYING))
                    dev.reg_write(R.REGISTERS[f"{b}_D_OP_ENABLE"], 1)
                status = dev.reg_read(R.GLB_INTR_STATUS)
                outcomes["done" if status & 0xFFFF else "error" if status else "waiting"] += 1
                accidents = [line for line in dev.log if "internal error" in line]
                assert not accidents, f"trial {trial}: {accidents[0]}"
                dev.reg_write(R.GLB_RESET, 1 << 31)  # the whole device, for the next trial
                assert dev.idle()
    finally:
        dev.close()
    # The trials reach the blocks' arithmetic, not only their checks.
    assert outcomes["done"] >= TRIALS // 50, outcomes
    if TRIALS >= 600:
        assert outcomes["error"] >= TRIALS // 2, outcomes


@pytest.mark.parametrize("block", BLOCKS)
def test_every_block_has_registers_to_program(block: str) -> None:
    assert len(_registers(block)) >= 5
