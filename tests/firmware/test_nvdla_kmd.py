"""The KMD takes an NVDLA Loadable's DLA task on an NVDLA configuration (the submit contract of
docs/development/nvdla/firmware.md) and runs it through the engine scheduler's NVDLA front-end, over
NVDLA's real register file; on pydla's own configurations, NVDLA tasks are refused."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pydla.deviceapi.generated import nvdla_v1_regs as R1
from pydla.deviceapi.task_layout import AddressEntry
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import KmdDeviceInfo
from pydla.kmd.bo import BufferObject
from pydla.kmd.driver import Kmd
from pydla.kmd.job import Job
from pydla.kmd.port import KmdPortability
from tests.firmware.nvdla_support import RegfilePort, device_info

pytest.importorskip("flatbuffers")
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla import samples
from pydla.loadable.nvdla.memory import read_memory


class NvdlaKmdPort(RegfilePort, KmdPortability):
    """The register-file port with what a KMD needs of its OS: buffers at 4 KiB-aligned addresses."""

    def __init__(self, config: str) -> None:
        super().__init__(config)
        self.config = config
        self._handles = itertools.count(1)
        self._contexts = itertools.count(1)
        self._next_iova = 0x100000

    def dla_get_device_info(self) -> KmdDeviceInfo:
        return device_info(self.config)

    def dla_create_context(self) -> int:
        return next(self._contexts)

    def dla_destroy_context(self, ctx: int) -> None:
        pass

    def dla_alloc(self, size: int, fd: int | None = None) -> BufferObject:
        return BufferObject(next(self._handles), size, np.zeros(size, dtype=np.uint8), None)

    def dla_free(self, bo: BufferObject) -> None:
        pass

    def dla_map(self, ctx: int, bo: BufferObject) -> int:
        iova = self._next_iova
        self._next_iova += (bo.size + 0xFFF) & ~0xFFF
        return iova

    def dla_unmap(self, ctx: int, iova: int) -> None:
        pass


def submit_loadable(kmd: Kmd, lo: M.NvdlaLoadable,
                    version: tuple[int, int, int] | None) -> tuple[Job, dict[int, int]]:
    """What the UMD's runner does: a buffer per memory (SET contents in), then the DLA task's
    address list entry by entry as (buffer, offset, size), with the network blob's version."""
    ctx = kmd.open_context()
    handles = {}
    for m in lo.memory_list:
        h = kmd.bo_create(ctx, m.size)
        if m.flags & M.MemoryFlags.SET:
            kmd.bo_array(ctx, h)[:] = np.frombuffer(bytes(read_memory(lo, m.id, 0, m.size, "test")), np.uint8)
        handles[m.id] = h
    task = lo.task_list[0]
    addresses = [AddressEntry(handles[lo.address_list[i].mem_id], lo.address_list[i].offset,
                              lo.address_list[i].size) for i in task.address_list]
    job = kmd.submit(ctx, addresses, nvdla_interface=version)
    job.wait(5000)
    return job, {m: kmd.bo_iova(ctx, h) for m, h in handles.items()}


def test_kmd_runs_an_nvdla_task_on_an_nvdla_configuration() -> None:
    port = NvdlaKmdPort("nv_full")
    kmd = Kmd(port)
    lo = samples.bdma_loadable()
    job, iova = submit_loadable(kmd, lo, (0, 12, 5))
    assert job.error is None
    regs = dict(port.writes)
    assert regs[R1.NVDLA_BDMA_CFG_SRC_ADDR_LOW_0] == iova[4]
    assert regs[R1.NVDLA_BDMA_CFG_DST_ADDR_LOW_0] == iova[5]
    assert [launch.processor for launch in port.launches] == ["BDMA"]


def test_kmd_refuses_a_task_without_its_interface_version() -> None:
    kmd = Kmd(NvdlaKmdPort("nv_full"))
    with pytest.raises(DlaError) as e:
        submit_loadable(kmd, samples.bdma_loadable(), None)
    assert e.value.code == NvError.BadParameter and "interface version" in e.value.message


def test_kmd_prepared_nvdla_task_runs_again_and_again() -> None:
    port = NvdlaKmdPort("nv_full")
    kmd = Kmd(port)
    lo = samples.bdma_loadable()
    ctx = kmd.open_context()
    handles = {}
    for m in lo.memory_list:
        h = kmd.bo_create(ctx, m.size)
        if m.flags & M.MemoryFlags.SET:
            kmd.bo_array(ctx, h)[:] = np.frombuffer(bytes(read_memory(lo, m.id, 0, m.size, "test")), np.uint8)
        handles[m.id] = h
    addresses = [AddressEntry(handles[lo.address_list[i].mem_id], lo.address_list[i].offset)
                 for i in lo.task_list[0].address_list]
    prep = kmd.prepare(ctx, addresses, nvdla_interface=(0, 12, 5))
    for _ in range(3):
        job = kmd.submit_prepared(ctx, prep)
        job.wait(5000)
        assert job.error is None
    assert [launch.processor for launch in port.launches] == ["BDMA"] * 3
    # BDMA takes group 0 whenever group 0 is not busy (NVIDIA's bdma get_consumer: STATUS.GRP0_BUSY)
    assert [launch.group for launch in port.launches] == [0, 0, 0]
