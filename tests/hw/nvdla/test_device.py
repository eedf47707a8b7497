"""The NVDLA device on NVDLA's configurations: operations programmed through NVDLA's register map as the
firmware programs them, computed on device memory through the selected IOMMU context, the done
interrupt; the on-the-fly pipeline (CONV -> SDP -> PDP); bad accesses and memory faults counted, never
raised; the interrupt line and the modes."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.generated import nvdla_smmu as S
from pydla.hw.nvdla import conv_weights
from pydla.hw.nvdla.bdma import BdmaParams, BdmaTransfer
from pydla.hw.nvdla.conv_params import direct
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.pdp import ON_FLYING, PdpParams
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.sdp_params import DST_PDP, SdpParams
from pydla.hw.nvdla.strided import read_block
from pydla.hw.nvdla.surface import Cube
from pydla.hw.nvdla_device import NvdlaDevice
from pydla.target.config import load_config
from tests.hw.nvdla.device_arena import DeviceArena
from tests.hw.nvdla.nvdla_program import operation_writes

PDP_DONE0, SDP_DONE0, CACC_DONE0 = 1 << 4, 1 << 0, 1 << 20
INT8 = Precision.INT8


def _max_pool(arena: DeviceArena, src: Cube, dst: Cube) -> PdpParams:
    """2x2/2 max pooling of ``src`` into ``dst`` from memory."""
    return PdpParams(
        cube_in_width=src.width - 1, cube_in_height=src.height - 1, cube_in_channel=src.channel - 1,
        cube_out_width=dst.width - 1, cube_out_height=dst.height - 1, cube_out_channel=dst.channel - 1,
        pooling_method=1, kernel_width=1, kernel_height=1, kernel_stride_width=1, kernel_stride_height=1,
        pad_left=0, pad_top=0, pad_right=0, pad_bottom=0, input_data=0, src_base_addr=src.address,
        src_line_stride=src.line_stride, src_surface_stride=src.surf_stride, dst_base_addr=dst.address,
        dst_line_stride=dst.line_stride, dst_surface_stride=dst.surf_stride)


@pytest.mark.parametrize("config", ["nv_full", "nv_small", "nv_large", "nv_medium_512"])
def test_a_max_pooling_programmed_through_the_registers(config: str) -> None:
    dev = NvdlaDevice(config)
    calls: list[int] = []
    dev.connect_irq(lambda: calls.append(dev.reg_read(dev.regs.regs.NVDLA_GLB_S_INTR_STATUS_0)))
    arena = DeviceArena(dev)
    c, h, w = 11, 6, 8
    x = np.random.default_rng(5).integers(-128, 128, (c, h, w), dtype=np.int8)
    src, dst = arena.cube(w, h, c, INT8, x), arena.cube(w // 2, h // 2, c, INT8)
    arena.program("PDP", _max_pool(arena, src, dst))
    assert np.array_equal(arena.get(dst), x.reshape(c, h // 2, 2, w // 2, 2).max(axis=(2, 4)))
    assert arena.status() == PDP_DONE0 and calls == [PDP_DONE0] and dev.irq
    assert (dev.ops_done, dev.ops_failed, dev.bus_errors) == (1, 0, 0)
    dev.reg_write(dev.regs.regs.NVDLA_GLB_S_INTR_STATUS_0, PDP_DONE0)  # the ISR clears it: the line drops
    assert not dev.irq and arena.status() == 0
    dev.close()


# -- the on-the-fly pipeline ------------------------------------------------------------------------


def _fused(arena: DeviceArena, x: np.ndarray, w: np.ndarray) -> tuple[list[tuple[str, object]], Cube]:
    """A 3x3 INT8 convolution (pad 1) whose result flies into the SDP (converted to INT8, saturating),
    whose output flies into the PDP (max 2x2/2), which writes memory."""
    dev = arena.dev
    c, h, wd = x.shape
    k = w.shape[0]
    src = arena.cube(wd, h, c, INT8, x)
    weights = arena.buffer(1 << 16)
    arena.memory.write(weights, conv_weights.pack(w, dev.target, INT8))
    conv = direct(target=dev.target, precision=INT8, width=wd, height=h, channel=c, kernels=k, kernel_width=3,
                  kernel_height=3, data_addr=src.address, weight_addr=weights, pad=(1, 1, 1, 1))
    sdp = SdpParams(width=wd - 1, height=h - 1, channel=k - 1, in_precision=0, proc_precision=0,
                    out_precision=0, flying_mode=1, output_dst=DST_PDP)
    dst = arena.cube(wd // 2, h // 2, k, INT8)
    pool = dataclasses.replace(_max_pool(arena, Cube(0, wd, h, k, 0, 0, INT8), dst), flying_mode=ON_FLYING,
                               src_base_addr=0, src_line_stride=0, src_surface_stride=0)
    return [("CONV", conv), ("SDP", sdp), ("PDP", pool)], dst


def _reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    _, h, wd = x.shape
    padded = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1)))
    out = np.zeros((w.shape[0], h, wd), dtype=np.int64)
    for r in range(3):
        for s in range(3):
            out += np.einsum("kc,chw->khw", w[:, :, r, s].astype(np.int64), padded[:, r:r + h, s:s + wd])
    out = np.clip(out, -128, 127)
    return out.reshape(w.shape[0], h // 2, 2, wd // 2, 2).max(axis=(2, 4))


@pytest.mark.parametrize("config", ["nv_small", "nv_full"])
@pytest.mark.parametrize("order", ["consumers first", "producers first"])
def test_a_convolution_flies_through_the_sdp_into_the_pdp(config: str, order: str) -> None:
    dev = NvdlaDevice(config)
    arena = DeviceArena(dev)
    rng = np.random.default_rng(7)
    x = rng.integers(-8, 8, (16, 6, 8), dtype=np.int8)
    w = rng.integers(-4, 4, (12, 16, 3, 3), dtype=np.int8)
    ops, dst = _fused(arena, x, w)
    if order == "consumers first":
        ops.reverse()  # as NVIDIA's firmware enables a fused pipeline
    seen = []
    for processor, params in ops[:-1]:
        arena.program(processor, params)
        seen.append((dev.engine.waiting, dev.ops_done))
    # a consumer waits for its input; a producer holds its output until its consumer takes it, and
    # completes then
    assert seen == ([(["PDP"], 0), (["PDP", "SDP"], 0)] if order == "consumers first" else
                    [(["CONV"], 0), (["SDP"], 1)])
    arena.program(*ops[-1])
    assert np.array_equal(arena.get(dst), _reference(x, w))
    assert arena.status() == PDP_DONE0 | SDP_DONE0 | CACC_DONE0 | (1 << 16) | (1 << 18)
    assert (dev.ops_done, dev.ops_failed, dev.engine.waiting) == (3, 0, [])
    dev.close()


def test_weights_rewritten_between_runs_are_used_by_the_next_run() -> None:
    """The device keeps a convolution's prepared weights by its registers and compares their bytes at
    every run: the same launch again is served from the cache, new weight bytes at the same address
    compute with the new weights."""
    dev = NvdlaDevice("nv_small")
    arena = DeviceArena(dev)
    rng = np.random.default_rng(8)
    x = rng.integers(-8, 8, (16, 6, 8), dtype=np.int8)
    w = rng.integers(-4, 4, (12, 16, 3, 3), dtype=np.int8)
    ops, dst = _fused(arena, x, w)
    weights = ops[0][1].cdma.weight_addr  # type: ignore[attr-defined]
    results = []
    for run, kernels in enumerate((w, w, -w)):
        if run == 2:
            arena.memory.write(weights, conv_weights.pack(kernels, dev.target, INT8))
        for processor, params in ops:
            arena.program(processor, params, group=run % 2)  # the blocks' groups take turns
        results.append(arena.get(dst))
        assert np.array_equal(results[-1], _reference(x, kernels)) and dev.ops_done == 3 * (run + 1)
    cache = dev.engine.weights
    assert (cache.misses, cache.hits, len(cache)) == (2, 1, 1)
    assert not np.array_equal(results[2], results[0])
    dev.close()


# -- faults ----------------------------------------------------------------------------------------


def test_a_dma_outside_the_mappings_ends_the_operation_without_its_interrupt() -> None:
    dev = NvdlaDevice("nv_small")
    calls: list[bool] = []
    dev.connect_irq(lambda: calls.append(True))
    arena = DeviceArena(dev)
    src, dst = arena.cube(8, 6, 11, INT8), arena.cube(4, 3, 11, INT8)
    unmapped = src.address + 0x100000
    arena.program("PDP", dataclasses.replace(_max_pool(arena, src, dst), src_base_addr=unmapped))
    s = S
    assert arena.status() == 0 and dev.irq and calls == [True]  # the SMMU's line, not GLB's
    assert (dev.ops_done, dev.ops_failed) == (0, 1) and "address not mapped" in dev.errors[-1]
    assert (dev.reg_read(s.PYDLA_SMMU_FAULT_STATUS), dev.reg_read(s.PYDLA_SMMU_FAULT_ADDR_LO),
            dev.reg_read(s.PYDLA_SMMU_FAULT_CTX), dev.reg_read(s.PYDLA_SMMU_FAULT_UNIT),
            dev.reg_read(s.PYDLA_SMMU_FAULT_COUNT)) == (1, unmapped, arena.ctx, 3, 1)
    assert dev.fault == (unmapped, arena.ctx, 3)
    # the groups were released: the same operation on good addresses runs in the other group
    assert dev.reg_read(dev.regs.regs.NVDLA_PDP_S_STATUS_0) == 0
    dev.reg_write(s.PYDLA_SMMU_FAULT_STATUS, 1)
    assert not dev.irq and dev.reg_read(s.PYDLA_SMMU_FAULT_STATUS) == 0
    arena.program("PDP", _max_pool(arena, src, dst), group=1)
    assert arena.status() == PDP_DONE0 << 1 and dev.ops_done == 1


def test_no_context_selected_faults_every_access() -> None:
    dev = NvdlaDevice("nv_small")
    arena = DeviceArena(dev)
    src, dst = arena.cube(8, 6, 11, INT8), arena.cube(4, 3, 11, INT8)
    dev.reg_write(S.PYDLA_SMMU_CTX, 0)
    dev.reg_write(S.PYDLA_SMMU_FAULT_MASK, 1)  # masked: recorded, the line stays down
    arena.program("PDP", _max_pool(arena, src, dst))
    assert not dev.irq and dev.reg_read(S.PYDLA_SMMU_FAULT_STATUS) == 1
    assert dev.reg_read(S.PYDLA_SMMU_FAULT_CTX) == 0 and "no such context" in dev.errors[-1]


def test_registers_a_block_refuses_fail_the_operation_and_are_counted() -> None:
    dev = NvdlaDevice("nv_small")  # INT8 only
    arena = DeviceArena(dev)
    src, dst = arena.cube(8, 6, 11, INT8), arena.cube(4, 3, 11, INT8)
    arena.program("PDP", dataclasses.replace(_max_pool(arena, src, dst), input_data=1))  # INT16
    assert arena.status() == 0 and not dev.irq and dev.ops_failed == 1
    assert "INT16 is not supported by nv_small" in dev.errors[-1]
    assert [f.kind for f in dev.regs.faults] == ["operation failed"]


@pytest.mark.parametrize("config", ["nv_full", "nv_small"])
def test_bad_accesses_are_counted_bus_errors_never_exceptions(config: str) -> None:
    dev = NvdlaDevice(config)
    r = dev.regs.regs
    bad_reads = [0x30000, r.NVDLA_GLB_S_INTR_STATUS_0 + 2, -4, 1 << 40, S.PYDLA_SMMU_FAULT_COUNT + 4]
    assert [dev.reg_read(a) for a in bad_reads] == [0] * len(bad_reads)
    dev.reg_write(0x30000, 1)
    dev.reg_write(r.NVDLA_PDP_D_OP_ENABLE_0, 1 << 32)
    dev.reg_write(S.PYDLA_SMMU_CTX, -1)
    dev.reg_write(S.PYDLA_SMMU_CTX, True)  # type: ignore[arg-type]
    dev.reg_write("0x20000", 1)  # type: ignore[arg-type]
    assert dev.bus_errors == len(bad_reads) + 5 and dev.reg_read(S.PYDLA_SMMU_CTX) == 0
    assert dev.ops_done == dev.ops_failed == 0
    if config == "nv_small":  # the map has BDMA's registers, nv_small has no BDMA: its window is not decoded
        assert dev.reg_read(r.NVDLA_BDMA_CFG_LINE_0) == 0 and dev.bus_errors == len(bad_reads) + 6
        assert "BDMA is not in nv_small" in dev.regs.faults[-1].message


# -- the interrupt line and the modes ----------------------------------------------------------------


def test_a_masked_done_raises_the_line_when_unmasked() -> None:
    dev = NvdlaDevice("nv_full")
    calls: list[int] = []
    dev.connect_irq(lambda: calls.append(1))
    arena = DeviceArena(dev)
    src, dst = arena.cube(8, 6, 11, INT8), arena.cube(4, 3, 11, INT8)
    mask = dev.regs.regs.NVDLA_GLB_S_INTR_MASK_0
    dev.reg_write(mask, 0xFFFFFFFF)  # everything masked
    for address, value in operation_writes(arena.regs, "PDP", _max_pool(arena, src, dst), unmask=False):
        dev.reg_write(address, value)
    assert arena.status() == PDP_DONE0 and not dev.irq and calls == []
    dev.reg_write(mask, dev.reg_read(mask) & ~PDP_DONE0)
    assert dev.irq and calls == [1]


def test_threaded_mode_computes_beside_the_host_and_interrupts_it() -> None:
    dev = NvdlaDevice("nv_small", mode="threaded")
    done = threading.Event()
    dev.connect_irq(done.set)
    arena = DeviceArena(dev)
    x = np.arange(11 * 6 * 8, dtype=np.int64).reshape(11, 6, 8) % 251 - 125
    src, dst = arena.cube(8, 6, 11, INT8, x.astype(np.int8)), arena.cube(4, 3, 11, INT8)
    arena.program("PDP", _max_pool(arena, src, dst))
    assert done.wait(10) and arena.status() == PDP_DONE0
    assert np.array_equal(arena.get(dst), x.reshape(11, 3, 2, 4, 2).max(axis=(2, 4)))
    dev.close()


def test_step_mode_runs_an_operation_per_step_and_reset_drops_what_waits() -> None:
    dev = NvdlaDevice("nv_small", mode="step")
    arena = DeviceArena(dev)
    src, dst = arena.cube(8, 6, 11, INT8), arena.cube(4, 3, 11, INT8)
    arena.program("PDP", _max_pool(arena, src, dst))
    assert arena.status() == 0 and dev.reg_read(arena.regs.NVDLA_PDP_S_STATUS_0) == 1  # RUNNING
    assert dev.step() and arena.status() == PDP_DONE0 and not dev.step()
    arena.program("PDP", _max_pool(arena, src, dst), group=1)
    dev.reset()
    assert not dev.step() and arena.status() == 0 and dev.reg_read(S.PYDLA_SMMU_CTX) == 0
    assert dev.reg_read(arena.regs.NVDLA_PDP_S_STATUS_0) == 0
    with pytest.raises(DlaError) as e:
        NvdlaDevice("nv_small").step()
    assert e.value.code == NvError.InvalidState


def test_bdma_copies_into_the_on_chip_sram_and_back() -> None:
    """nv_full's secondary memory (CVIF): RAM type 0 addresses the SRAM, not the IOMMU."""
    dev = NvdlaDevice("nv_full")
    assert dev.sram is not None and dev.sram.size == load_config("nv_full").nvdla.sram_bytes  # type: ignore[union-attr]
    arena = DeviceArena(dev)
    src, dst = arena.buffer(4096), arena.buffer(4096)
    data = np.random.default_rng(1).integers(0, 256, 1024, dtype=np.uint8)
    arena.memory.write(src, data)
    to_sram = BdmaTransfer(src_addr=src, dst_addr=0x800, line_size=1024 // 32 - 1, line_repeat=0,
                           src_line=1024, dst_line=1024, surf_repeat=0, src_surf=0, dst_surf=0,
                           src_ram_type=1, dst_ram_type=0)
    back = dataclasses.replace(to_sram, src_addr=0x800, dst_addr=dst, src_ram_type=0, dst_ram_type=1)
    arena.program("BDMA", BdmaParams((to_sram, back)))
    assert arena.status() == 1 << 6
    assert np.array_equal(dev.sram.read(0x800, 1024), data)
    assert np.array_equal(arena.memory.read(dst, 1024), data)


def test_only_nvdla_configurations_make_an_nvdla_device() -> None:
    for bad, code, words in (("full", NvError.BadParameter, "not an NVDLA configuration"),
                             ("nv_full", NvError.BadParameter, "device mode 'fast'")):
        with pytest.raises(DlaError) as e:
            NvdlaDevice(bad, mode="fast" if bad == "nv_full" else "deterministic")
        assert e.value.code == code and words in e.value.message


@pytest.mark.parametrize("config", ["nv_full", "nv_small"])
def test_random_register_storms_raise_nothing_and_leave_the_device_usable(config: str) -> None:
    """3,000 writes of random values (addresses inside and beside a mapping, sizes, enables) to random
    registers of the map and the SMMU: no exception reaches the writer; every launched operation either
    completed or failed; after a reset the device computes a pooling exactly."""
    import random

    rng = random.Random(config)
    dev = NvdlaDevice(config)
    arena = DeviceArena(dev)
    base = arena.buffer(1 << 16)
    names = [n for n in arena.regs.REGISTERS if n.startswith("NVDLA_")]
    enables = [n for n in names
               if n.endswith(("D_OP_ENABLE_0", "CFG_LAUNCH0_0", "CFG_LAUNCH1_0", "CFG_OP_0"))]
    for _ in range(3000):
        name = rng.choice(enables) if rng.random() < 0.1 else rng.choice(names)
        value = rng.choice([0, 1, rng.getrandbits(32), base + rng.randrange(-64, 1 << 16, 32),
                            rng.randrange(64)])
        dev.reg_write(arena.regs.REGISTERS[name], value)
        if rng.random() < 0.02:
            smmu = rng.choice([S.PYDLA_SMMU_CTX, S.PYDLA_SMMU_FAULT_STATUS])
            dev.reg_write(smmu, rng.choice([0, 1, arena.ctx]))
    # the storm launched operations, bad ones failed (some wait for an on-the-fly partner that never came)
    assert dev.ops_done + dev.ops_failed >= 5 and dev.ops_failed > 0
    assert all(":" in e for e in dev.errors)
    dev.reset()
    dev.reg_write(S.PYDLA_SMMU_CTX, arena.ctx)
    x = np.random.default_rng(2).integers(-128, 128, (11, 6, 8), dtype=np.int8)
    src, dst = arena.cube(8, 6, 11, INT8, x), arena.cube(4, 3, 11, INT8)
    arena.program("PDP", _max_pool(arena, src, dst))
    assert arena.status() == PDP_DONE0
    assert np.array_equal(arena.get(dst), x.reshape(11, 3, 2, 4, 2).max(axis=(2, 4)))


class _Counting(ByteMemory):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.reads = 0

    def read(self, address: int, size: int) -> np.ndarray:
        self.reads += 1
        return super().read(address, size)


def test_a_huge_sparse_transfer_past_the_memory_fails_at_once() -> None:
    """10 million 32-byte lines 2.5 GB apart from a 1 MiB SRAM (a register storm found it: 30 s listing
    the lines' offsets before the first read failed): refused after one read, nothing copied."""
    sram = _Counting(1 << 20)
    with pytest.raises(DlaError) as e:
        read_block(sram, 0, (10363674,), (2514115008,), 32)
    assert e.value.code == NvError.InvalidAddress and sram.reads == 1
    assert read_block(sram, 0x40, (3,), (0x40000,), 32).shape == (3, 32)  # sparse: the last line, then each
    assert sram.reads == 1 + 1 + 3


def test_a_hung_operation_holds_its_groups_until_the_reset_register() -> None:
    dev = NvdlaDevice("nv_full")
    arena = DeviceArena(dev)
    x = np.random.default_rng(4).integers(-128, 128, (11, 6, 8), dtype=np.int8)
    src, dst = arena.cube(8, 6, 11, INT8, x), arena.cube(4, 3, 11, INT8)
    dev.inject_hang("PDP")
    arena.program("PDP", _max_pool(arena, src, dst))
    status = arena.regs.NVDLA_PDP_S_STATUS_0
    assert arena.status() == 0 and dev.reg_read(status) == 1 and "hangs (injected)" in dev.errors[-1]
    arena.program("PDP", _max_pool(arena, src, dst), group=1)  # queued behind the hung group: PENDING
    assert dev.reg_read(status) == 1 | (2 << 16) and dev.ops_done == 0
    assert dev.reg_read(S.PYDLA_CTL_RESET) == 0  # write only
    dev.reg_write(S.PYDLA_CTL_RESET, 1)  # the driver's recovery
    assert dev.reg_read(status) == 0 and dev.reg_read(S.PYDLA_SMMU_CTX) == 0
    dev.reg_write(S.PYDLA_SMMU_CTX, arena.ctx)
    arena.program("PDP", _max_pool(arena, src, dst))
    assert arena.status() == PDP_DONE0 and dev.ops_done == 1
    assert np.array_equal(arena.get(dst), x.reshape(11, 3, 2, 4, 2).max(axis=(2, 4)))
    dev.reg_write(S.PYDLA_CTL_RESET, 0)  # 0: nothing
    dev.reg_write(S.PYDLA_CTL_RESET, 1 << 33)  # not 32 bits: a bus error
    assert arena.status() == PDP_DONE0 and dev.bus_errors == 1


def test_an_injected_error_ends_the_operation_without_its_interrupt() -> None:
    dev = NvdlaDevice("nv_small")
    arena = DeviceArena(dev)
    src, dst = arena.cube(8, 6, 11, INT8), arena.cube(4, 3, 11, INT8)
    dev.inject_error("PDP")
    arena.program("PDP", _max_pool(arena, src, dst))
    assert arena.status() == 0 and dev.ops_failed == 1 and "failed (injected)" in dev.errors[-1]
    arena.program("PDP", _max_pool(arena, src, dst), group=1)
    assert arena.status() == PDP_DONE0 << 1
    with pytest.raises(DlaError) as e:
        dev.inject_hang("RUBIK")
    assert e.value.code == NvError.BadParameter and "has no 'RUBIK' operations" in e.value.message


def test_the_reset_register_in_threaded_mode_waits_for_the_computing_operation() -> None:
    dev = NvdlaDevice("nv_small", mode="threaded")
    arena = DeviceArena(dev)
    src, dst = arena.cube(64, 64, 64, INT8), arena.cube(32, 32, 64, INT8)
    for group in (0, 1):
        arena.program("PDP", _max_pool(arena, src, dst), group=group)
    dev.reg_write(S.PYDLA_CTL_RESET, 1)  # while the worker runs the first, the second queued
    assert dev.wait_idle(10)
    assert arena.status() == 0 and dev.reg_read(arena.regs.NVDLA_PDP_S_STATUS_0) == 0
    dev.reg_write(S.PYDLA_SMMU_CTX, arena.ctx)
    done = threading.Event()
    dev.connect_irq(done.set)
    arena.program("PDP", _max_pool(arena, src, dst))
    assert done.wait(10) and arena.status() == PDP_DONE0
    dev.close()


def test_a_completion_for_no_running_operation_is_reported_not_raised() -> None:
    from pydla.hw.nvdla.engine import Done

    dev = NvdlaDevice("nv_small")
    dev._apply([Done("PDP", 1)], dev._epoch)  # the engine's guard: nothing runs
    assert dev.errors[-1] == "PDP group 1: completed but not running" and dev.ops_done == 0


def test_two_fused_convolutions_queue_in_both_register_groups() -> None:
    """The firmware's order with both groups: SDP g0, SDP g1 (PENDING behind g0), CONV g0, CONV g1; each
    convolution meets its own SDP and both outputs are exact."""
    dev = NvdlaDevice("nv_small")
    arena = DeviceArena(dev)
    rng = np.random.default_rng(11)
    x = rng.integers(-8, 8, (16, 4, 4), dtype=np.int8)
    src = arena.cube(4, 4, 16, INT8, x)
    ops = []
    for seed in (0, 1):
        w = np.random.default_rng(seed).integers(-4, 4, (8, 16, 3, 3), dtype=np.int8)
        weights = arena.buffer(1 << 12)
        arena.memory.write(weights, conv_weights.pack(w, dev.target, INT8))
        conv = direct(target=dev.target, precision=INT8, width=4, height=4, channel=16, kernels=8,
                      kernel_width=3, kernel_height=3, data_addr=src.address, weight_addr=weights,
                      pad=(1, 1, 1, 1))
        out = arena.cube(4, 4, 8, INT8)
        sdp = SdpParams(width=3, height=3, channel=7, in_precision=0, proc_precision=0, out_precision=0,
                        flying_mode=1, dst_base_addr=out.address, dst_line_stride=out.line_stride,
                        dst_surface_stride=out.surf_stride)
        ops.append((w, conv, sdp, out))
    arena.program("SDP", ops[0][2], group=0)
    arena.program("SDP", ops[1][2], group=1)
    assert dev.reg_read(arena.regs.NVDLA_SDP_S_STATUS_0) == 1 | (2 << 16)  # g0 RUNNING (waiting), g1 PENDING
    arena.program("CONV", ops[0][1], group=0)
    assert dev.ops_done == 2 and dev.engine.waiting == ["SDP"]  # g1 launched, waiting for its convolution
    arena.program("CONV", ops[1][1], group=1)
    assert dev.ops_done == 4 and dev.engine.waiting == [] and dev.ops_failed == 0
    for w, _, _, out in ops:
        padded = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1)))
        want = sum(np.einsum("kc,chw->khw", w[:, :, r, s].astype(np.int64), padded[:, r:r + 4, s:s + 4])
                   for r in range(3) for s in range(3))
        assert np.array_equal(arena.get(out), np.clip(want, -128, 127))
    assert arena.status() == 0x3 | (0x3 << 16) | (0x3 << 18) | (0x3 << 20)  # both groups' done bits
