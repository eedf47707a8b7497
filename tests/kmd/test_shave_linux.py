"""A SHAVE task list through the Linux port: a client process builds the seed scenario in memory from
NvDlaGetMem and submits it with NvDlaSubmit (the same ioctls as a DLA task) to the KMD daemon; a
faulting list comes back as the DlaError the daemon's KMD raised, and the next list runs. Skipped
where FUSE is not available, as the other Linux tests are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pydla.linux.daemon import KmdDaemon
from tests.linux.test_daemon import daemon  # noqa: F401 (fixture)

CLIENT = """
import numpy as np
import pydla
from pydla import DlaError
from pydla.portability.interface import NvDlaFence, NvDlaTask
from tests.hw.shave.host import RET, lw, tiny_elf
from tests.kmd.shave_lists import F16, ListBuilder, seed_list

rt = pydla.createRuntime("linux", path={mnt!r})
port, h = rt.port, rt.handle


class PortMemory:
    '''What ListBuilder needs of a driver (bo_create, bo_array), over the port's NvDlaGetMem.'''

    def __init__(self):
        self.mems = {{}}

    def bo_create(self, ctx, size):
        self.mems[len(self.mems) + 1] = port.NvDlaGetMem(h, size)
        return len(self.mems)

    def bo_array(self, ctx, handle):
        return self.mems[handle][1]


def run(memory, entries):
    sem = port.NvDlaCreateSemaphore(h)
    addresses = [(memory.mems[e.handle][0], e.offset) for e in entries]
    port.NvDlaSubmit(h, [NvDlaTask(addresses, post_fences=[NvDlaFence(sem, 1)], timeout_ms=5000)])
    port.NvDlaWaitFence(NvDlaFence(sem, 1), 10_000)


memory = PortMemory()
x = (np.random.default_rng(7).standard_normal((8, 100)) * 8).astype(F16)
lb, out, entries = seed_list(memory, 0, x, -1, 2)
for _ in range(2):
    run(memory, entries)
    got = lb.read(out, F16, x.shape)
    print("clamp", np.array_equal(got.view(np.uint16), np.clip(x, F16(-1), F16(2)).view(np.uint16)))
bad = ListBuilder(memory, 0)
bad.act(1, "reader", b"\\0" * 4, image=tiny_elf([lw(10, 0, 0x100), RET]), kernel_id=9, update=[0])
try:
    run(memory, bad.addresses(notify=[0]))
except DlaError as e:
    print("fault", e.code.name, "READ_FAULT" in e.message and "SHAVE tile 1" in e.message)
run(memory, entries)
print("after", np.array_equal(lb.read(out, F16, x.shape).view(np.uint16),
                               np.clip(x, F16(-1), F16(2)).view(np.uint16)))
rt.close()
"""


def test_a_shave_task_list_through_the_linux_daemon(daemon: tuple[KmdDaemon, Path]) -> None:  # noqa: F811
    d, mnt = daemon
    p = subprocess.run([sys.executable, "-c", CLIENT.format(mnt=str(mnt))], capture_output=True, text=True,
                       timeout=120, cwd=Path(__file__).parents[2])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:4] == ["clamp True", "clamp True", "fault InvalidAddress True", "after True"]
    assert d.counts() == {"clients": 0, "buffers": 0, "syncs": 0}
