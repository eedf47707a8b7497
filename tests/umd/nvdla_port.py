"""A test port for NVDLA Loadables at the KMD boundary: the in-process port whose NvDlaSubmit records
each task and checks it against the submit contract (one NvDlaTask per DLA1 task, its address list
the loadable task's, in order: entry ``i`` the memory of address-list entry ``task.address_list[i]``
at its offset and size; entry 0 the network descriptor), then does what a firmware would for the one
operation these tests use (BDMA: the copies its surface descriptor lists, read through the address
list) and reaches the task's fences. Until the NVDLA firmware lands, this is what the runner is tested
against."""

from __future__ import annotations

import struct
import types
from typing import Any

from pydla.deviceapi.generated import dla_interface as I
from pydla.platform import open_port
from pydla.portability.interface import NvDlaPort, NvDlaTask, NvDlaTaskStatus


class RecordingPort:
    """Wraps an in-process port; ``submitted`` holds every NvDlaTask given to NvDlaSubmit."""

    def __init__(self, execute: bool = True) -> None:
        self.port: Any = open_port("inprocess")
        self.submitted: list[NvDlaTask] = []
        self.snapshots: list[list[bytes]] = []  # each task's address-list bytes when submitted
        self.execute = execute
        self.port.NvDlaSubmit = self.submit
        # the runner submits prepared tasks: the interface's own versions, which go through NvDlaSubmit
        for name in ("NvDlaPrepareTask", "NvDlaSubmitPrepared", "NvDlaReleaseTask"):
            setattr(self.port, name, types.MethodType(getattr(NvDlaPort, name), self.port))

    def submit(self, h: Any, tasks: list[NvDlaTask]) -> list[NvDlaTaskStatus]:
        out = []
        for task in tasks:
            self.submitted.append(task)
            self.snapshots.append([bytes(e[0].bytes_view()[e[1]:e[1] + e[2]]) for e in task.address_list])
            if self.execute:
                run_bdma(task)
            for fence in task.post_fences:
                self.port.NvDlaSignalFence(fence)
            out.append(NvDlaTaskStatus(len(self.submitted), None))
        return out


def _entry(task: NvDlaTask, index: int) -> Any:
    mem, offset, size = task.address_list[index]  # type: ignore[misc]
    return mem.bytes_view()[offset:offset + size]


def run_bdma(task: NvDlaTask) -> None:
    """The BDMA copies of a one-operation BDMA network, as NVIDIA's firmware and the BDMA do them."""
    net = I.dla_network_desc.from_buffer_copy(bytes(_entry(task, 0)[:I.dla_network_desc.SIZE]))
    assert net.num_operations == 1 and net.op_head[I.dla_op_e.BDMA] == 0
    surfaces = _entry(task, net.surface_desc_index)
    surface = I.dla_bdma_surface_desc.from_buffer_copy(bytes(surfaces[:I.dla_bdma_surface_desc.SIZE]))
    for t in surface.transfers[:surface.num_transfers]:
        src, dst = _entry(task, t.source_address), _entry(task, t.destination_address)
        for s in range(t.surface_repeat):
            for line in range(t.line_repeat):
                a = s * t.source_surface + line * t.source_line
                b = s * t.destination_surface + line * t.destination_line
                dst[b:b + t.line_size] = src[a:a + t.line_size]


def network_desc_head(raw: bytes) -> tuple[int, int, int]:
    """(operation, surface, dependency-graph index) of a network descriptor's bytes."""
    return struct.unpack_from("<hhh", raw)
