"""Compute units through the KMD daemon (uAPI 2.5): XRT's xclOpenContext / xclRegRead / xclRegWrite
from two client processes (EBUSY / EPERM, a context released by close and by death), the raw errnos a
C client sees, streams of the AP_CTRL_NONE unit in pieces, and the IP_LAYOUT as the in-process KMD
has it."""

from __future__ import annotations

import errno
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.linux import unmount
from pydla.linux.daemon import KmdDaemon
from tests.linux.conftest import fuse_unavailable
from tests.linux.test_daemon import PRELUDE as PRELUDE_OF_DAEMON_TESTS
from tests.linux.test_daemon import client, finish, wait_until

SCALE_ARG = 0x10
THREE = struct.unpack("<I", struct.pack("<f", 3.0))[0]

HOLDER = """
port = LinuxPort(MNT)
h = port.NvDlaOpen(0)
port.NvDlaOpenCuContext(h, "scale", exclusive=True)
port.NvDlaRegWrite(h, "scale", 0x10, {value})
print("held", port.NvDlaRegRead(h, "scale", 0x10), flush=True)
if sys.stdin.readline().strip() == "close":
    port.NvDlaCloseCuContext(h, "scale")
    print("closed", flush=True)
sys.stdin.readline()
"""

OTHER = """
port = LinuxPort(MNT)
h = port.NvDlaOpen(0)
def code(call, *args):
    try:
        call(*args)
        return "ok"
    except DlaError as e:
        return e.code.name
print(code(port.NvDlaOpenCuContext, h, "scale", True))
print(code(port.NvDlaOpenCuContext, h, "scale", False))
print(code(port.NvDlaRegRead, h, "scale", 0x10))
print(code(port.NvDlaRegWrite, h, "scale", 0x10, 0))
"""

AFTER = """
port = LinuxPort(MNT)
h = port.NvDlaOpen(0)
port.NvDlaOpenCuContext(h, "scale", exclusive=True)
print("value", port.NvDlaRegRead(h, "scale", 0x10))
"""

PRELUDE = "from pydla.portability.linux import LinuxPort\n"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[KmdDaemon, Path]]:
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    d = KmdDaemon("full")
    server = d.serve(mnt)
    try:
        yield d, mnt
    finally:
        server.stop(timeout=5.0)
        d.close()
        unmount(str(mnt))


def _holder(mnt: Path, blob: Path) -> subprocess.Popen[str]:
    """A client process holding 'scale' exclusively (scale factor 3.0) until its stdin says "close"
    (it closes its CU context, keeping its file) or ends."""
    code = PRELUDE_OF_DAEMON_TESTS.format(mnt=str(mnt), blob=str(blob)) + PRELUDE + HOLDER.format(value=THREE)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().split() == ["held", str(THREE)], p.stderr
    return p


@pytest.mark.parametrize("how", ["close", "kill", "exit"])
def test_two_processes_exclusive_register_access(daemon, tmp_path: Path, how: str) -> None:
    """A holds 'scale' exclusively and uses its registers; B is refused (EBUSY for an open, EPERM for
    register access without a context); once A closes its context (its file stays open), is killed,
    or exits, B opens it and sees A's register value."""
    d, mnt = daemon
    blob = tmp_path / "unused.dla"
    blob.write_bytes(b"")
    a = _holder(mnt, blob)
    try:
        assert a.stdin is not None and a.stdout is not None
        assert finish(client(mnt, blob, PRELUDE + OTHER))[:4] == ["Busy", "Busy", "InvalidState",
                                                                   "InvalidState"]
        if how == "close":
            a.stdin.write("close\n")
            a.stdin.flush()
            assert a.stdout.readline().strip() == "closed"
            # A's file is still open (B's release reaches the daemon after B has exited: wait for it)
            wait_until(lambda: d.counts()["clients"] == 1)
        elif how == "kill":
            a.send_signal(signal.SIGKILL)
            a.wait(timeout=30)
        else:
            a.stdin.close()
            a.wait(timeout=30)
        assert finish(client(mnt, blob, PRELUDE + AFTER))[0] == f"value {THREE}"
    finally:
        a.kill()
        a.wait(timeout=30)


RAW = """
import ctypes
fds = [os.open(MNT + "/dla0", os.O_RDWR) for _ in range(2)]
def call(fd, nr, args):
    buf = bytearray(bytes(args))
    try:
        fcntl.ioctl(fd, COMMANDS[nr], buf, True)
        return type(args).from_buffer_copy(buf)
    except OSError as e:
        return errno.errorcode[e.errno]
hs = U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                       layout_hash64=U.LAYOUT_HASH64)
for fd in fds:
    call(fd, U.dla_ioctl_e.HANDSHAKE, hs)
E = U.dla_ioctl_e
ctx = lambda name, **kw: U.dla_cu_context_t(name=name, **kw)
reg = lambda name, **kw: U.dla_cu_reg_t(name=name, **kw)
def show(r):
    print(r if isinstance(r, str) else "ok")
show(call(fds[0], E.CU_REG_READ, reg(b"scale", offset=0x10)))        # no context: EPERM
show(call(fds[0], E.CU_OPEN, ctx(b"scale", flags=1)))
show(call(fds[1], E.CU_OPEN, ctx(b"scale", flags=1)))                # held: EBUSY
show(call(fds[1], E.CU_OPEN, ctx(b"scale")))                         # shared: EBUSY too
show(call(fds[1], E.CU_REG_WRITE, reg(b"scale", offset=0x10)))       # not the holder: EPERM
show(call(fds[0], E.CU_OPEN, ctx(b"scale", flags=1)))                # a second one: EPERM
show(call(fds[0], E.CU_REG_READ, reg(b"scale", offset=0x12)))        # misaligned: EINVAL
show(call(fds[0], E.CU_REG_READ, reg(b"scale", offset=0x10000)))     # outside the window: EINVAL
show(call(fds[0], E.CU_REG_READ, reg(b"scale", offset=0x10, reserved=1)))
show(call(fds[0], E.CU_OPEN, ctx(b"nope", flags=1)))                 # ENOENT
show(call(fds[0], E.CU_OPEN, ctx(b"", index=99)))                    # ENOENT
show(call(fds[0], E.CU_OPEN, ctx(b"noop_hs", flags=6)))              # unknown flags: EINVAL
show(call(fds[0], E.CU_OPEN, ctx(b"dla", flags=1)))                  # the DLA engine's unit opens
show(call(fds[0], E.CU_REG_READ, reg(b"dla", offset=0)))             # and reads (CTRL)
show(call(fds[0], E.CU_REG_WRITE, reg(b"dla", offset=0x10)))         # but never writes: EOPNOTSUPP
raw = bytearray(bytes(ctx(b"")))
raw[:64] = b"x" * 64                                                 # no NUL: EINVAL
show(call(fds[0], E.CU_OPEN, U.dla_cu_context_t.from_buffer_copy(bytes(raw))))
st = lambda name, **kw: U.dla_cu_stream_t(name=name, **kw)
show(call(fds[0], E.CU_STREAM_WRITE, st(b"noop_hs", timeout_ms=10, data=16, size=2)))  # EOPNOTSUPP
show(call(fds[0], E.CU_STREAM_WRITE, st(b"scale", timeout_ms=10, data=16, size=2)))    # EFAULT
show(call(fds[0], E.CU_STREAM_READ, st(b"scale", timeout_ms=10, data=16, size=2)))     # EFAULT
show(call(fds[0], E.CU_STREAM_READ, st(b"scale", timeout_ms=10, data=16, size=1 << 21)))  # EINVAL
show(call(fds[0], E.CU_STREAM_READ, st(b"scale", timeout_ms=0, data=16, size=2)))      # EINVAL
out = ctypes.create_string_buffer(2)
show(call(fds[0], E.CU_STREAM_READ, st(b"scale", timeout_ms=20, data=ctypes.addressof(out), size=2)))
show(call(fds[0], E.CU_CLOSE, ctx(b"scale", flags=1)))               # flags on a close: EINVAL
show(call(fds[0], E.CU_CLOSE, ctx(b"scale")))
show(call(fds[0], E.CU_CLOSE, ctx(b"scale")))                        # none left: EPERM
show(call(fds[1], E.CU_OPEN, ctx(b"", index=4, flags=1)))            # by index: scale
show(call(fds[0], E.CU_ARGS, U.dla_cu_args_t(index=99)))              # ENOENT
show(call(fds[0], E.CU_ARGS, U.dla_cu_args_t(index=3, reserved=1)))   # EINVAL
a = call(fds[0], E.CU_ARGS, U.dla_cu_args_t(index=3))                # vadd: a, b, out, n
print(a.declared, a.count, ctypes.string_at(ctypes.addressof(a) + 16, 16))
a = call(fds[0], E.CU_ARGS, U.dla_cu_args_t(index=1))                # noop_hs declares none
print(a.declared, a.count, ctypes.string_at(ctypes.addressof(a) + 16, 4))
"""


def test_raw_errnos(daemon, tmp_path: Path) -> None:
    """The errnos themselves, as a C client sees them."""
    _, mnt = daemon
    blob = tmp_path / "unused.dla"
    blob.write_bytes(b"")
    lines = finish(client(mnt, blob, RAW))
    nosup = errno.errorcode[errno.EOPNOTSUPP]  # ENOTSUP on Linux: the same number
    assert lines[:-1] == ["EPERM", "ok", "EBUSY", "EBUSY", "EPERM", "EPERM", "EINVAL", "EINVAL", "EINVAL",
                          "ENOENT", "ENOENT", "EINVAL", "ok", "ok", nosup, "EINVAL", nosup, "EFAULT",
                          "EFAULT", "EINVAL", "EINVAL", "ETIMEDOUT", "EINVAL", "ok", "EPERM", "ok",
                          "ENOENT", "EINVAL",
                          "1 4 b'a\\x00b\\x00out\\x00n\\x00\\x00\\x00\\x00\\x00\\x00\\x00'",
                          "0 0 b'\\x00\\x00\\x00\\x00'"]


def test_compute_units_mirror_the_kmds_ip_layout(daemon) -> None:
    d, mnt = daemon
    from pydla.portability.linux import LinuxPort

    with LinuxPort(mnt) as port:
        assert port.compute_units(0) == d.kmds[0].compute_units
        assert [u.control for u in port.compute_units(0) if u.instance == "scale"] == ["NONE"]
        with pytest.raises(DlaError) as err:
            port.compute_units(5)
        assert err.value.code == NvError.DeviceNotFound


def test_stream_round_trip_in_pieces(daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transfer larger than one call's MAX_STREAM_BYTES goes in pieces, writer and reader at once."""
    import pydla.linux.cu_handlers as handlers
    import pydla.linux.daemon as daemon_module

    monkeypatch.setattr(handlers, "MAX_STREAM_BYTES", 1000)
    monkeypatch.setattr(daemon_module, "MAX_STREAM_BYTES", 1000)
    _, mnt = daemon
    from pydla.portability.linux import LinuxPort

    with LinuxPort(mnt) as port:
        h, writer = port.NvDlaOpen(0), port.NvDlaOpen(0)
        port.NvDlaOpenCuContext(h, "scale", exclusive=True)
        port.NvDlaRegWrite(h, "scale", SCALE_ARG, THREE)
        x = (np.arange(20_000) % 2000 - 1000).astype("<i2")
        failed: list[BaseException] = []

        def write() -> None:
            try:
                port.NvDlaStreamWrite(writer, "scale", x.tobytes(), 20_000)
            except BaseException as e:  # reported by the test
                failed.append(e)

        t = threading.Thread(target=write)
        t.start()
        y = np.frombuffer(port.NvDlaStreamRead(h, "scale", x.nbytes, 20_000), dtype="<i2")
        t.join(timeout=30)
        assert not failed and not t.is_alive()
        np.testing.assert_array_equal(y, x * 3)
        assert port.NvDlaStreamRead(h, "scale", 0, 10) == b""
        with pytest.raises(DlaError) as err:
            port.NvDlaStreamWrite(h, "scale", b"abc", 0)
        assert err.value.code == NvError.BadParameter and "timeout_ms" in err.value.message
        with pytest.raises(DlaError) as err:
            port.NvDlaRegRead(h, "x" * 64, 0)
        assert err.value.code == NvError.BadParameter and "name" in err.value.message


def test_a_dead_holder_frees_the_unit_and_the_daemon_counts_nothing_left(daemon, tmp_path: Path) -> None:
    d, mnt = daemon
    blob = tmp_path / "unused.dla"
    blob.write_bytes(b"")
    baseline = d.counts()
    for _ in range(3):
        a = _holder(mnt, blob)
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
        wait_until(lambda: d.counts() == baseline)
    unit = d.kmds[0].cus.unit("scale")
    assert unit.exclusive is None and not unit.shared
