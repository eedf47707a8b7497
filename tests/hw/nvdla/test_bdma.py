"""BDMA: strided copies against a per-byte reference, the checks, and NVIDIA's BDMA_L0_0."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import bdma
from pydla.hw.nvdla.bdma import BdmaParams, BdmaTransfer
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL
from tests.hw.nvdla.nvdla_run import Run, bdma_params


def reference_copy(mem: np.ndarray, t: BdmaTransfer) -> None:
    src = mem.copy()
    for s in range(t.surf_repeat + 1):
        for line in range(t.line_repeat + 1):
            for b in range((t.line_size + 1) * 32):
                mem[t.dst_addr + s * t.dst_surf + line * t.dst_line + b] = \
                    src[t.src_addr + s * t.src_surf + line * t.src_line + b]


@pytest.mark.parametrize("seed", range(6))
def test_random_transfers_match_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mem = ByteMemory(1 << 16)
    mem.data[:] = rng.integers(0, 256, mem.size, dtype=np.uint8)
    ref = mem.data.copy()
    transfers = []
    for _ in range(int(rng.integers(1, 4))):
        size = int(rng.integers(0, 4))
        lines = int(rng.integers(0, 5))
        surfs = int(rng.integers(0, 3))
        lb = (size + 1) * 32
        sl = lb + 32 * int(rng.integers(0, 3))
        dl = lb + 32 * int(rng.integers(0, 3))
        ss = sl * (lines + 1) + 32 * int(rng.integers(0, 2))
        ds = dl * (lines + 1) + 32 * int(rng.integers(0, 2))
        src = 32 * int(rng.integers(0, 700))
        dst = 32 * int(rng.integers(1000, 1400))
        transfers.append(BdmaTransfer(src, dst, size, lines, sl, dl, surfs, ss, ds))
    bdma.execute(BdmaParams(tuple(transfers)), mem, NV_FULL)
    for t in transfers:
        reference_copy(ref, t)
    assert np.array_equal(mem.data, ref)


def test_sram_is_chosen_by_ram_type() -> None:
    mem, sram = ByteMemory(4096), ByteMemory(4096)
    sram.data[:64] = np.arange(64)
    t = BdmaTransfer(0, 1024, 1, 0, 64, 64, 0, 64, 64, src_ram_type=0, dst_ram_type=1)
    bdma.execute(BdmaParams((t,)), mem, NV_FULL, sram=sram)
    assert mem.data[1024:1088].tolist() == list(range(64))
    with pytest.raises(DlaError) as e:
        bdma.execute(BdmaParams((t,)), mem, NV_FULL)
    assert e.value.code == NvError.NotSupported and "BDMA transfer 0 src: RAM type 0" in str(e.value)


@pytest.mark.parametrize(("change", "words"), [
    (dict(src_addr=16), "src_addr 0x10 is not a non-negative multiple of 32"),
    (dict(dst_line=32), "dst_line 32 is less than the line (64 bytes)"),
    (dict(src_surf=64), "src_surf 64 is less than a surface of 2 lines"),
    (dict(line_size=0x2000), "line_size 8192 is outside its field"),
    (dict(dst_addr=4096 - 32), "BDMA transfer 0 dst: write of 256 bytes at 0xfe0 is outside memory"),
])
def test_bad_transfers_are_refused(change: dict[str, int], words: str) -> None:
    base = dict(src_addr=0, dst_addr=1024, line_size=1, line_repeat=1, src_line=64, dst_line=64,
                surf_repeat=1, src_surf=128, dst_surf=128)
    base.update(change)
    with pytest.raises(DlaError) as e:
        bdma.execute(BdmaParams((BdmaTransfer(**base),)), ByteMemory(4096), NV_FULL)
    assert words in str(e.value)


def test_configuration_and_count_limits() -> None:
    t = BdmaTransfer(0, 64, 0, 0, 32, 32, 0, 32, 32)
    with pytest.raises(DlaError) as e:
        bdma.execute(BdmaParams((t,)), ByteMemory(256), NV_SMALL)
    assert e.value.code == NvError.NotSupported
    with pytest.raises(DlaError) as e:
        bdma.execute(BdmaParams((t,) * 21), ByteMemory(256), NV_FULL)
    assert "21 transfers, at most 20" in str(e.value)


def test_nvidia_bdma_l0_0_golden_image() -> None:
    run = Run("BDMA_L0_0")
    params = bdma_params(run, run.op(0))
    assert len(params.transfers) == 1 and params.transfers[0].line_bytes == 256
    bdma.execute(params, run.memory, NV_FULL)
    t = params.transfers[0]
    copied = run.memory.read(t.dst_addr, 2048)
    assert np.array_equal(copied, run.memory.read(t.src_addr, 2048))
    assert run.image() == run.golden()
