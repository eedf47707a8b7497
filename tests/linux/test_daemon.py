"""The KMD daemon behind real ioctl(2) calls: several client processes at once, isolation between
them, clients killed mid-wait and mid-submit, the daemon killed under a waiting client, and the
version handshake. Clients are separate Python processes using LinuxPort (or raw ioctls)."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pydla.linux import unmount
from pydla.linux.daemon import KmdDaemon
from tests.linux.conftest import fuse_unavailable

CLIENT_TIMEOUT = 120

PRELUDE = """
import errno, fcntl, os, sys, time
import numpy as np
import pydla
from pydla import DlaError, NvError
from pydla.deviceapi.generated import dla_uapi as U
from pydla.uapi.ioctl import COMMANDS
MNT = {mnt!r}
BLOB = open({blob!r}, "rb").read()

def run_net(rt, seed):
    d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
    a, b = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
    x = np.random.default_rng(seed).standard_normal(d_in.dims).astype(np.float32)
    a.array(np.float32, d_in.dims)[...] = x
    rt.bindInputTensor(0, a); rt.bindOutputTensor(0, b)
    rt.submit()
    return x, b.array(np.float32, d_out.dims).copy()
"""


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    from pydla.compiler.api import compile_model
    from pydla.demo import build_demo_model

    model = build_demo_model()
    path = tmp_path_factory.mktemp("net") / "demo.dla"
    # Its softmax as a CPU run: one NPU task a run, which the job counts below rely on (the SHAVE
    # task lists through the daemon: tests/kmd/test_shave_linux.py).
    path.write_bytes(compile_model(model, shave=False).blob)
    return path, model


@pytest.fixture(scope="module")
def shave_net(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """The demo network as compiled by default: its softmax a SHAVE task list."""
    from pydla.compiler.api import compile_model
    from pydla.demo import build_demo_model

    model = build_demo_model()
    path = tmp_path_factory.mktemp("shave_net") / "demo.dla"
    path.write_bytes(compile_model(model).blob)
    return path, model


@pytest.fixture(params=["full", "full-headed"])
def daemon(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[KmdDaemon, Path]]:
    """A daemon over headless devices and one over headed ones (the engine scheduler on each device's
    microcontroller, the daemon's KMDs talking to it through the device-API mailbox)."""
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    if request.param == "full-headed" and request.node.get_closest_marker("headless_only") is not None:
        pytest.skip("headless only: " + str(request.node.get_closest_marker("headless_only").args[0]))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    d = KmdDaemon(request.param, default_timeout_ms=20_000)
    server = d.serve(mnt)
    try:
        yield d, mnt
    finally:
        server.stop(timeout=5.0)
        d.close()
        unmount(str(mnt))


def client(mnt: Path, blob: Path, body: str) -> subprocess.Popen[str]:
    code = PRELUDE.format(mnt=str(mnt), blob=str(blob)) + body
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(p: subprocess.Popen[str]) -> list[str]:
    out, err = p.communicate(timeout=CLIENT_TIMEOUT)
    assert p.returncode == 0, err
    return out.split("\n")


def wait_until(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_several_client_processes_at_once_get_their_numbers(daemon, net) -> None:
    d, mnt = daemon
    blob, model = net
    body = """
rt = pydla.createRuntime("linux", path=MNT, device={dev})
rt.load(BLOB)
for s in range(3):
    x, y = run_net(rt, {seed} * 10 + s)
    np.save(f"{out}/x{{s}}.npy", x); np.save(f"{out}/y{{s}}.npy", y)
rt.close()
print("done")
"""
    outs = []
    procs = []
    for i in range(4):
        out = mnt.parent / f"out{i}"
        out.mkdir()
        outs.append(out)
        procs.append(client(mnt, blob, body.format(dev=i % 2, seed=i, out=out)))
    assert all("done" in finish(p) for p in procs)
    import numpy as np

    from pydla.demo import reference

    for out in outs:
        for s in range(3):
            x, y = np.load(out / f"x{s}.npy"), np.load(out / f"y{s}.npy")
            np.testing.assert_allclose(y, reference(model, {"input": x})[0], rtol=1e-5, atol=1e-6)
    # The clients have exited, but the kernel sends a file's RELEASE after close(2) returns.
    wait_until(lambda: d.counts() == {"clients": 0, "buffers": 0, "syncs": 0})
    # the clients' jobs ran on the daemon's KMDs (as prepared tasks: PREPARE once, SUBMIT_PREPARED after)
    assert sum(len(kmd.history) for kmd in d.kmds) > 0


def test_isolation_between_clients(daemon, net) -> None:
    d, mnt = daemon
    blob, _ = net
    owner = client(mnt, blob, """
port_rt = pydla.createRuntime("linux", path=MNT)
mem = port_rt.allocateSystemMemory(4096)
print(mem.handle, flush=True)
sys.stdin.readline() if False else time.sleep(30)
""")
    handle = int(owner.stdout.readline())  # type: ignore[union-attr]
    try:
        lines = finish(client(mnt, blob, f"""
import ctypes
from pydla.portability.linux import LinuxPort
port = LinuxPort(MNT)
h = port.NvDlaOpen(0)
mine, _ = port.NvDlaGetMem(h, 64)
def submit(entries):
    arr = (U.dla_address_t * len(entries))(*entries)
    args = U.dla_submit_t(addresses=ctypes.addressof(arr), num_addresses=len(entries))
    try:
        h.ioctl(U.dla_ioctl_e.SUBMIT, args)
        print("accepted")
    except DlaError as e:
        print(e.code.name, "|", e.message)
submit([U.dla_address_t(handle={handle})])                  # another client's buffer
submit([U.dla_address_t(handle=mine.handle, offset=64)])    # outside my buffer
submit([U.dla_address_t(handle=999999)])                    # nobody's
try:
    h.ioctl(U.dla_ioctl_e.BO_DESTROY, U.dla_bo_destroy_t(handle={handle}))
except DlaError as e:
    print(e.code.name, "|", e.message)
buf = bytearray(8)
try:
    fcntl.ioctl(h.fd, 0xC0086499, buf, True)
except OSError as e:
    print(errno.errorcode[e.errno])
"""))
    finally:
        owner.kill()
        owner.wait()
    perm, outside, nobody, destroy, unknown = lines[:5]
    # another client's handle and nobody's get the same answer (no probing of others' handles)
    assert perm.startswith("BadParameter") and f"buffer object {handle} is not one of this client's" in perm
    assert outside.startswith("BadParameter") and "offset 64 is outside" in outside
    assert nobody.startswith("BadParameter") and "buffer object 999999 is not one of this client's" in nobody
    assert re.sub(r"object \d+", "object N", perm) == re.sub(r"object \d+", "object N", nobody)
    assert f"{handle} is not one of this client's" in destroy
    assert unknown == "ENOTTY"
    assert sum(dev.ops_done for dev in d.devices) == 0  # nothing reached a device
    wait_until(lambda: d.counts() == {"clients": 0, "buffers": 0, "syncs": 0})


def test_raw_errnos_for_isolation(daemon, net) -> None:
    """The errno itself, as a C client sees it: ENOENT for another's handle (as for nobody's), EINVAL
    for an offset, and
    BO_CREATE takes only a size-sealed memfd of the caller's own."""
    _, mnt = daemon
    blob, _ = net
    lines = finish(client(mnt, blob, """
import ctypes
from pydla.uapi.shm import SharedBuffer
fds = [os.open(MNT + "/dla0", os.O_RDWR) for _ in range(2)]
def call(fd, nr, args):
    buf = bytearray(bytes(args))
    try:
        fcntl.ioctl(fd, COMMANDS[nr], buf, True)
        return type(args).from_buffer_copy(buf)
    except OSError as e:
        return errno.errorcode[e.errno]
def create(fd, size, memfd):
    return call(fd, U.dla_ioctl_e.BO_CREATE, U.dla_bo_create_t(size=size, fd=memfd))
mem = SharedBuffer(64)
print(create(fds[0], 64, mem.fd))   # before the handshake
hs = U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                       layout_hash64=U.LAYOUT_HASH64)
for fd in fds:
    call(fd, U.dla_ioctl_e.HANDSHAKE, hs)
a = create(fds[0], 64, mem.fd)
for fd, h, off in ((fds[1], a.handle, 0), (fds[0], a.handle, 64)):
    arr = (U.dla_address_t * 1)(U.dla_address_t(handle=h, offset=off))
    print(call(fd, U.dla_ioctl_e.SUBMIT, U.dla_submit_t(addresses=ctypes.addressof(arr), num_addresses=1)))
print(call(fds[0], U.dla_ioctl_e.SUBMIT, U.dla_submit_t(addresses=16, num_addresses=1)))  # unmapped memory
print(call(fds[0], U.dla_ioctl_e.SUBMIT, U.dla_submit_t(num_addresses=5000)))
unsealed = os.memfd_create("x"); os.ftruncate(unsealed, 4096)
r, w = os.pipe()
print(create(fds[0], 4096, unsealed))   # its size can change under the device
print(create(fds[0], 4096, r))          # not a memfd
print(create(fds[0], 65, mem.fd))       # larger than the memfd
print(create(fds[0], 64, 987))          # not open here
print(create(fds[0], 0, mem.fd))
info = call(fds[0], U.dla_ioctl_e.BO_INFO, U.dla_bo_info_t(handle=a.handle))
print(info.size, info.iova == a.iova, a.fd)
# the memory is shared: what the daemon's device sees is what this process wrote
mem.view[:4] = b"abcd"
"""))
    assert lines[:10] == ["EPROTO", "ENOENT", "EINVAL", "EFAULT", "EINVAL",
                          "EINVAL", "EINVAL", "EINVAL", "EBADF", "EINVAL"]
    assert lines[10] == "64 True -1"


def test_quotas_per_open_file(tmp_path: Path, net) -> None:
    """Buffers, bytes and sync objects beyond a file's quota: EDQUOT (InsufficientMemory) with the
    reason; freeing makes room again; another file has its own quota. A WAIT never blocks a request
    thread longer than max_wait_ms, whatever the client asks; the client repeats it."""
    from pydla.linux.daemon import Quotas

    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    d = KmdDaemon("small", quotas=Quotas(buffers=3, bytes=10_000, syncs=2, waits=1), max_wait_ms=100)
    server = d.serve(mnt)
    blob, _ = net
    try:
        lines = finish(client(mnt, blob, """
import threading
from pydla.portability.linux import LinuxPort
from pydla.portability.interface import NvDlaFence
port = LinuxPort(MNT)
h, other = port.NvDlaOpen(0), port.NvDlaOpen(0)
print(h.param(U.dla_param_e.QUOTA_BYTES), h.param(U.dla_param_e.MAX_WAIT_MS))
a, _ = port.NvDlaGetMem(h, 6000)
for size in (6000, 1000, 1000, 1000):
    try:
        port.NvDlaGetMem(h, size); print("ok")
    except DlaError as e:
        print(e.code.name, "|", e.message)
port.NvDlaFreeMem(h, a)
port.NvDlaGetMem(h, 6000); print("room again")
port.NvDlaGetMem(other, 9000); print("other file")
s1, s2 = port.NvDlaCreateSemaphore(h), port.NvDlaCreateSemaphore(h)
try:
    port.NvDlaCreateSemaphore(h)
except DlaError as e:
    print(e.code.name, "|", e.message)
# Two waits at once on a file whose quota is one WAIT in progress, each longer than max_wait_ms:
# both are served (the second retries on EAGAIN) and both end when the fence is signalled.
done = []
def waiter(v):
    port.NvDlaWaitFence(NvDlaFence(s1, v), 5000); done.append(v)
ts = [threading.Thread(target=waiter, args=(v,)) for v in (1, 2)]
for t in ts: t.start()
time.sleep(0.5)
print("waiting", len(done))
port.NvDlaSignalFence(NvDlaFence(s1, 2))
for t in ts: t.join(10)
print(sorted(done))
t0 = time.monotonic()
try:
    port.NvDlaWaitFence(NvDlaFence(s2, 1), 350)
except DlaError as e:
    print(e.code.name, round(time.monotonic() - t0, 1))
"""))
    finally:
        server.stop(timeout=5.0)
        d.close()
        unmount(str(mnt))
    assert lines[0] == "10000 100"
    assert lines[1].startswith("InsufficientMemory") and "quota of 10000" in lines[1]  # 6000 + 6000
    assert "BO_CREATE: 6000 bytes more than the 6000 this file holds" in lines[1]
    assert lines[2] == "ok" and lines[3] == "ok"
    assert lines[4].startswith("InsufficientMemory") and "3 buffer objects" in lines[4]
    assert lines[5:7] == ["room again", "other file"]
    assert lines[7].startswith("InsufficientMemory") and "2 sync objects" in lines[7]
    assert lines[8:10] == ["waiting 0", "[1, 2]"]
    code, seconds = lines[10].split()
    assert code == "Timeout" and 0.3 <= float(seconds) <= 1.5


def test_a_client_of_another_uid_works_and_reaches_no_one_elses_memory(net) -> None:
    """A client that is not root (uid nobody) maps its own buffers and gets its numbers; it cannot
    open the daemon's descriptors or memory through /proc. (Buffers are the client's own memfds.)"""
    import shutil
    import tempfile

    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another uid")
    blob, model = net
    top = Path(tempfile.mkdtemp(prefix="pydla-public-"))  # pytest's tmp dirs are private to root
    top.chmod(0o755)
    mnt = top / "mnt"
    mnt.mkdir()
    d = KmdDaemon("full")
    server = d.serve(mnt)
    owned = d.kmds[0].open_context()
    d.kmds[0].bo_create(owned, 4096)  # something of the daemon's the client must not reach
    try:
        out = top / "out"
        out.mkdir()
        out.chmod(0o777)
        lines = finish(client(mnt, blob, f"""
import pydla.portability.linux, pydla.uapi.shm  # what a run needs, imported while files are readable
warm = pydla.createRuntime(); warm.load(BLOB); run_net(warm, 0); warm.close()
os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
x, y = run_net(rt, 7)
np.save({str(out / "x.npy")!r}, x); np.save({str(out / "y.npy")!r}, y)
denied = 0
fds = os.listdir("/proc/{os.getpid()}/fd") if os.access("/proc/{os.getpid()}/fd", os.R_OK) else []
for name in ("fd/3", "fd/4", "fd/5", "mem", "environ"):
    try:
        open("/proc/{os.getpid()}/" + name, "rb").close()
    except PermissionError:
        denied += 1
print(os.getuid(), len(fds), denied)
rt.close()
"""))
        uid, listed, denied = lines[0].split()
        assert (uid, listed, denied) == ("65534", "0", "5")
        import numpy as np

        from pydla.demo import reference

        x, y = np.load(out / "x.npy"), np.load(out / "y.npy")
        np.testing.assert_allclose(y, reference(model, {"input": x})[0], rtol=1e-5, atol=1e-6)
        wait_until(lambda: d.counts() == {"clients": 0, "buffers": 0, "syncs": 0})
    finally:
        server.stop(timeout=5.0)
        d.close()
        unmount(str(mnt))
        shutil.rmtree(top, ignore_errors=True)


def test_sync_objects_do_not_pile_up_over_many_submits(daemon, net) -> None:
    """Nonblocking submits, blocking submits and created syncs, hundreds of each: the daemon's sync
    objects stay few (each is destroyed when its ISync goes, intermediates right after use)."""
    d, mnt = daemon
    blob, _ = net
    p = client(mnt, blob, """
import gc
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
run_net(rt, 1)
for i in range(300):
    rt.submitNonBlocking()[0].wait(10_000)
    rt.submit()
    s = rt.createSync(); s.signal()
gc.collect()
print("looped", flush=True)
time.sleep(60)
""")
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "looped"
        counts = d.counts()
        assert counts["clients"] == 1 and counts["syncs"] <= 4, counts
    finally:
        p.kill()
        p.wait()
    wait_until(lambda: d.counts() == {"clients": 0, "buffers": 0, "syncs": 0})


@pytest.mark.parametrize("ring", [False, True], ids=["ioctl", "ring"])
@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_a_submit_that_completed_inside_submit_needs_no_wait(tmp_path: Path, net, mode: str,
                                                             ring: bool) -> None:
    """A deterministic daemon runs the job inside SUBMIT and says so (``completed``): a blocking
    submit then issues no WAIT. Chained submits (a pre-fence on that post-fence) still order
    correctly; a threaded daemon's jobs finish after SUBMIT returns, so its submits wait. Through
    the submission ring, neither issues a SUBMIT_PREPARED or a WAIT ioctl at all: the answers and
    the job's end come back through the ring."""
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    d = KmdDaemon("full", mode=mode, default_timeout_ms=20_000)
    server = d.serve(mnt)
    blob, model = net
    try:
        out = finish(client(mnt, blob, f"""
import collections
from pydla.portability import linux as L
calls = collections.Counter()
ioctl = L.LinuxDevice.ioctl
def counting(self, nr, args, **kw):
    calls[int(nr)] += 1
    return ioctl(self, nr, args, **kw)
L.LinuxDevice.ioctl = counting
os.environ["PYDLA_LINUX_RING"] = {"1" if ring else "0"!r}
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
x, y = run_net(rt, 3)
calls.clear()
for _ in range(5):
    rt.submit()
print(calls[int(U.dla_ioctl_e.SUBMIT)] + calls[int(U.dla_ioctl_e.SUBMIT_PREPARED)],
      calls[int(U.dla_ioctl_e.WAIT)], calls[int(U.dla_ioctl_e.SUBMIT_PREPARED)])
first = rt.submitNonBlocking()
rt.submitNonBlocking(wait_for=first)[0].wait(10_000)
np.save({str(tmp_path / "x.npy")!r}, x)
np.save({str(tmp_path / "y.npy")!r}, run_net(rt, 3)[1])
"""))
        submits, waits, prepared = (int(v) for v in out[0].split())
        if ring:
            assert submits == 0 and waits <= 1  # 1: a scheduling hiccup longer than RING_WAIT_S
        else:
            assert submits == 5 and prepared == 5  # the runner's prepared task, submitted by its handle
        if ring:
            pass
        elif mode == "deterministic":
            assert waits == 0
        else:
            assert waits >= 5
        from pydla.demo import reference

        x, y = np.load(tmp_path / "x.npy"), np.load(tmp_path / "y.npy")
        np.testing.assert_allclose(y, reference(model, {"input": x})[0], rtol=1e-5, atol=1e-6)
    finally:
        server.stop(timeout=5.0)
        d.close()
        unmount(str(mnt))


def test_version_mismatch_names_both_versions(daemon, net) -> None:
    _, mnt = daemon
    blob, _ = net
    lines = finish(client(mnt, blob, """
U.VERSION = (U.VERSION[0] + 1, 0, 0)
try:
    pydla.createRuntime("linux", path=MNT)
except DlaError as e:
    print(e.code.name); print(e.message)
"""))
    assert lines[0] == "VersionMismatch"
    from pydla.deviceapi.generated import dla_uapi as U

    here = f"{U.VERSION[0] + 1}.0.0"
    there = ".".join(map(str, U.VERSION))
    assert f"uAPI {here}" in lines[1] and f"{there} (layout" in lines[1] and "in the daemon" in lines[1]


WAITER = """
from pydla.portability.interface import NvDlaFence, NvDlaTask
from pydla.portability.linux import LinuxPort
port = LinuxPort(MNT)
h = port.NvDlaOpen(0)
rt = pydla.createRuntime(port)
rt.load(BLOB)
run_net(rt, 0)                            # binds the tensors
gate = rt.createSync()
syncs = rt.submitNonBlocking(wait_for=[gate])     # queued: waits for a signal that never comes
print("waiting", flush=True)
syncs[0].wait(60_000)
"""


@pytest.mark.headless_only("it exercises the FUSE server's handling of killed clients, which does not depend "
                           "on where the engine scheduler runs (and is the slowest of these tests)")
def test_clients_killed_mid_wait_twenty_times(daemon, net) -> None:
    d, mnt = daemon
    blob, _ = net
    baseline = d.counts()
    for _ in range(20):
        p = client(mnt, blob, WAITER)
        assert p.stdout is not None and p.stdout.readline().strip() == "waiting"
        time.sleep(0.05)  # inside the WAIT ioctl
        t0 = time.monotonic()
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        assert time.monotonic() - t0 < 5, "a killed client must die at once (FUSE_INTERRUPT)"
        wait_until(lambda: d.counts() == baseline)
    # The daemon still serves.
    lines = finish(client(mnt, blob, """
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
run_net(rt, 0)
print("served")
"""))
    assert "served" in lines
    # every killed client's job is gone
    assert all(not q for kmd in d.kmds for q in kmd.queues.by_context.values())


def test_clients_killed_mid_submit(daemon, net) -> None:
    d, mnt = daemon
    blob, _ = net
    for delay in (0.2, 0.35, 0.5, 0.65, 0.8):
        p = client(mnt, blob, """
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
print("go", flush=True)
while True:
    run_net(rt, 1)
""")
        assert p.stdout is not None and p.stdout.readline().strip() == "go"
        time.sleep(delay)
        p.kill()
        p.wait(timeout=10)
        wait_until(lambda: d.counts() == {"clients": 0, "buffers": 0, "syncs": 0})


def test_daemon_killed_under_a_waiting_client(tmp_path: Path, net) -> None:
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    blob, _ = net
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    daemon = subprocess.Popen([sys.executable, "-m", "pydla", "kmd", "--mount", str(mnt)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert daemon.stdout is not None and "serving dla0, dla1" in daemon.stdout.readline()
        p = client(mnt, blob, WAITER.replace("syncs[0].wait(60_000)", """
try:
    syncs[0].wait(60_000)
except DlaError as e:
    print(e.code.name, flush=True)
try:
    rt.submit()
except DlaError as e:
    print(e.code.name, flush=True)
"""))
        assert p.stdout is not None and p.stdout.readline().strip() == "waiting"
        time.sleep(0.1)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=10)
        out, err = p.communicate(timeout=30)
        assert out.split() == ["Disconnected", "Disconnected"], err
    finally:
        if daemon.poll() is None:
            daemon.kill()
        unmount(str(mnt))


def test_pydla_kmd_command_stops_on_sigterm_and_clears_its_own_stale_mount(tmp_path: Path,
                                                                          net: tuple[Path, object]) -> None:
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    command = [sys.executable, "-m", "pydla", "kmd", "--mount", str(mnt), "--config", "small"]
    daemon = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert daemon.stdout is not None and "serving dla0 in" in daemon.stdout.readline()
        assert sorted(os.listdir(mnt)) == ["dla0", "status"]
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=10) == 0
        assert not os.path.ismount(mnt)
        # A daemon killed with SIGKILL leaves its mount behind (stat may even still answer, from
        # cached attributes); the next daemon clears it, says so, and serves.
        killed = subprocess.Popen([sys.executable, "-m", "pydla", "kmd", "--mount", str(mnt)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert killed.stdout is not None and "serving" in killed.stdout.readline()
        killed.kill()
        killed.wait(timeout=10)
        with pytest.raises(OSError) as e:
            os.listdir(mnt)
        assert e.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
        daemon = subprocess.Popen([sys.executable, "-m", "pydla", "kmd", "--mount", str(mnt)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert daemon.stdout is not None and "serving dla0, dla1" in daemon.stdout.readline()
        p = client(mnt, net[0], """
rt = pydla.createRuntime(port="linux", path=MNT)
rt.load(BLOB)
run_net(rt, 1)
print("ran", flush=True)
""")
        out, err = p.communicate(timeout=CLIENT_TIMEOUT)
        assert out.split() == ["ran"], err
        daemon.send_signal(signal.SIGTERM)
        _, stderr = daemon.communicate(timeout=30)
        assert daemon.returncode == 0
        assert f"cleared a stale fuse.pydla mount at {mnt}" in stderr
    finally:
        if daemon.poll() is None:
            daemon.kill()
        unmount(str(mnt))


def test_the_administrator_sets_the_hang_timeout() -> None:
    """The daemon's --tdr-ms reaches every device's driver; a client's job timeout only shortens it."""
    from pydla import DlaError, NvError
    from pydla.cli import main

    d = KmdDaemon("full", tdr_ms=750)
    try:
        assert [k.watchdog.tdr_ms for k in d.kmds] == [750, 750]
    finally:
        d.close()
    with pytest.raises(DlaError) as e:
        KmdDaemon("full", tdr_ms=0)
    assert e.value.code == NvError.BadParameter and "tdr_ms 0" in e.value.message
    assert main(["kmd", "--mount", "/nonexistent", "--tdr-ms", "-5"]) == 1


@pytest.mark.parametrize("ring", ["1", "0"])
def test_a_client_gets_the_drivers_hang_diagnosis_not_a_generic_timeout(daemon, net, ring: str) -> None:
    """A job the driver declares hung fails its fence with NvError Timeout and the diagnosis; the
    client's wait reports that at once (not after its own 60 s, as "fence not reached"), and the
    client's next run works."""
    d, mnt = daemon
    blob, _ = net
    d.devices[0].inject_hang("CONV")
    lines = finish(client(mnt, blob, f"""
os.environ["PYDLA_LINUX_RING"] = "{ring}"
rt = pydla.createRuntime("linux", path=MNT, timeout_ms=60_000)
rt.load(BLOB)
t0 = time.monotonic()
try:
    run_net(rt, 1)
    print("ran")
except DlaError as e:
    print(e.code.name, round(time.monotonic() - t0, 1), "|", e.message)
x, y = run_net(rt, 2)
print("again", bool(np.isfinite(y).all()))
rt.close()
"""))
    head, message = lines[0].split(" | ", 1)
    code, elapsed = head.split()
    assert code == "Timeout" and "hung: no operation completed for 2000 ms; blocks CONV" in message, lines[0]
    assert "were reset; running and not finishing: operation 0 (CONV)" in message
    assert float(elapsed) < 10, lines[0]
    assert lines[1] == "again True"


def test_pydla_kmd_serves_headed_devices(tmp_path: Path, net: tuple[Path, object]) -> None:
    """``pydla kmd --config full-headed``: the daemon's KMDs reach each device's firmware through the
    mailbox; a client process runs the network and gets the reference's numbers."""
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    command = [sys.executable, "-m", "pydla", "kmd", "--mount", str(mnt), "--config", "full-headed"]
    daemon = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert daemon.stdout is not None and "serving dla0, dla1" in daemon.stdout.readline()
        out = mnt.parent / "out"
        out.mkdir()
        lines = finish(client(mnt, net[0], f"""
rt = pydla.createRuntime(port="linux", path=MNT, device=1)
rt.load(BLOB)
x, y = run_net(rt, 5)
np.save("{out}/x.npy", x); np.save("{out}/y.npy", y)
print("ran", flush=True)
"""))
        assert lines[0] == "ran"
        from pydla.demo import reference

        x, y = np.load(out / "x.npy"), np.load(out / "y.npy")
        np.testing.assert_allclose(y, reference(net[1], {"input": x})[0], rtol=1e-5, atol=1e-6)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
        unmount(str(mnt))
