"""Prepared tasks through the Linux port: PREPARE once, SUBMIT_PREPARED with the handle and the
fences in the struct; more fences than the struct carries fall back to SUBMIT; a task the daemon
dropped is prepared again; a freed buffer is refused; an unknown handle is ENOENT. A task's scalar
arguments travel as PREPARE_ARGS."""

from __future__ import annotations

from pathlib import Path

from pydla.linux.daemon import KmdDaemon
from tests.linux.test_daemon import client, daemon, finish, net, wait_until  # noqa: F401 (fixtures)

BODY = """
from pydla.portability.interface import NvDlaFence
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
x, y = run_net(rt, 1)
port, h = rt.port, rt.handle
step = next(s for s in rt.runner.steps if getattr(s, "prepared", None) is not None)
prepared = step.prepared
print(type(prepared.handle).__name__)
# five post-fences: more than SUBMIT_PREPARED carries, so a SUBMIT
sems = [port.NvDlaCreateSemaphore(h) for _ in range(5)]
port.NvDlaSubmitPrepared(h, prepared, [], [NvDlaFence(s, 1) for s in sems])
for s in sems:
    port.NvDlaWaitFence(NvDlaFence(s, 1), 10_000)
print("fallback ok")
# a handle the daemon does not know (as after a drop): prepared again, transparently
prepared.handle.prepared = 99_999
rt.submit()
print("again", prepared.handle.prepared != 99_999)
# a raw SUBMIT_PREPARED of an unknown handle: ENOENT, with the reason
args = U.dla_submit_prepared_t(prepared=77_777)
try:
    fcntl.ioctl(h.fd, COMMANDS[U.dla_ioctl_e.SUBMIT_PREPARED], bytearray(bytes(args)), True)
except OSError as e:
    print("raw", errno.errorcode[e.errno])
# the same network on new data gives the right numbers again
x2, y2 = run_net(rt, 2)
np.save(OUT + "/x.npy", x2); np.save(OUT + "/y.npy", y2)
# a freed input buffer: the daemon drops the task, preparing it again refuses the freed memory
a = rt.runner.bound[next(iter(rt.runner.bound))]
rt.freeSystemMemory(a)
try:
    rt.submit()
except DlaError as e:
    print("freed", e.code.name)
port.NvDlaReleaseTask(h, prepared)
port.NvDlaReleaseTask(h, prepared)  # idempotent
print("released")
"""


def test_prepared_tasks_through_the_daemon(daemon: tuple[KmdDaemon, Path],  # noqa: F811 (fixture)
                                           net: tuple[Path, object], tmp_path: Path) -> None:  # noqa: F811
    d, mnt = daemon
    blob, model = net
    lines = finish(client(mnt, blob, f"OUT = {str(tmp_path)!r}\n" + BODY))
    assert lines[0] == "_LinuxPrepared"
    assert lines[1] == "fallback ok"
    assert lines[2] == "again True"
    assert lines[3] == "raw ENOENT"
    assert lines[4] in ("freed BadParameter", "freed InvalidState")
    assert lines[5] == "released"
    import numpy as np

    from pydla.demo import reference

    x, y = np.load(tmp_path / "x.npy"), np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(y, reference(model, {"input": x})[0], rtol=1e-5, atol=1e-6)
    # The client has exited, but the kernel sends a file's RELEASE after close(2) returns.
    wait_until(lambda: d.counts() == {"clients": 0, "buffers": 0, "syncs": 0})


SCALARS_BODY = """
from pydla.portability.interface import NvDlaTask
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
x, y = run_net(rt, 3)
port, h = rt.port, rt.handle
step = next(s for s in rt.runner.steps if getattr(s, "prepared", None) is not None)
addresses = step.prepared.task.address_list
# the DPU opcode of XRT's run recipe and a negative sentinel, as PREPARE_ARGS carries them
prepared = port.NvDlaPrepareTask(h, NvDlaTask(addresses, scalars=[(0, 3), (6, -1)]))
status = port.NvDlaSubmitPrepared(h, prepared, [], [])
print("prepared", status.task_id)
status = port.NvDlaSubmit(h, [NvDlaTask(addresses, scalars=[(1, 7)])])[0]
print("submitted", status.task_id)
rt.submit()  # the runtime's own task (no scalars) is untouched
for bad in ([(5000, 1)], [(1, 0), (1, 0)]):
    try:
        port.NvDlaPrepareTask(h, NvDlaTask(addresses, scalars=bad))
    except DlaError as e:
        print("refused", e.code.name, e.message)
port.NvDlaReleaseTask(h, prepared)
"""


def test_scalar_arguments_travel_through_the_daemon(daemon: tuple[KmdDaemon, Path],  # noqa: F811 (fixture)
                                                    net: tuple[Path, object]) -> None:  # noqa: F811
    d, mnt = daemon
    blob, _ = net
    lines = finish(client(mnt, blob, SCALARS_BODY))
    prepared_id, submitted_id = int(lines[0].split()[1]), int(lines[1].split()[1])
    history = {job.job_id: job for job in d.kmds[0].history}
    assert history[prepared_id].task.scalars == ((0, 3), (6, (1 << 64) - 1))
    assert history[submitted_id].task.scalars == ((1, 7),)
    assert history[prepared_id].state == history[submitted_id].state == "completed"
    assert lines[2].startswith("refused BadParameter")
    assert "scalar argidx 5000 is outside the argument registers of compute unit 'dla_engine:dla' (0..477)" \
        in lines[2]
    assert lines[3].startswith("refused BadParameter") and "scalar argidx 1 given twice" in lines[3]
