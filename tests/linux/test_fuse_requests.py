"""Request processing without a mount: crafted and malformed requests straight into the dispatcher.

Each request must get exactly one reply (none for FORGET, BATCH_FORGET, INTERRUPT, NOTIFY_REPLY) and
nothing from outside may crash the loop.
"""

from __future__ import annotations

import ctypes
import errno
import struct
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pydla.linux import FuseError, FuseServer, RequestContext
from pydla.linux import fuse_protocol as fp
from pydla.linux.fuse_protocol import FuseOpcode as Op

from .conftest import ECHO, NOSYS, WAIT, TestHandler


class Harness:
    """A FuseServer whose replies are collected instead of written to /dev/fuse."""

    def __init__(self, handler: object | None = None) -> None:
        self.handler = handler or TestHandler()
        self.server = FuseServer("/nonexistent", {"dla0": self.handler, "dla1": self.handler})  # type: ignore[dict-item]
        self.replies: list[tuple[int, int, bytes]] = []
        self.server._write = self._capture  # type: ignore[method-assign]
        self.unique = 100

    def _capture(self, parts: list[bytes]) -> None:
        raw = b"".join(parts)
        length, error, unique = struct.unpack_from("<IiQ", raw)
        assert length == len(raw)
        self.replies.append((unique, -error, raw[16:]))

    def send(self, opcode: int, payload: bytes = b"", nodeid: int = 1, unique: int | None = None,
             length: int | None = None, pid: int = 4242) -> int:
        if unique is None:
            self.unique += 2
            unique = self.unique
        size = fp.IN_HEADER_SIZE + len(payload)
        hdr = bytes(fp.fuse_in_header(len=size if length is None else length, opcode=opcode,
                                      unique=unique, nodeid=nodeid, uid=1000, gid=1001, pid=pid))
        self.server._process(memoryview(bytearray(hdr + payload)))
        return unique

    def call(self, opcode: int, payload: bytes = b"", nodeid: int = 1) -> tuple[int, bytes]:
        """Send; the single reply's (errno, payload)."""
        before = len(self.replies)
        unique = self.send(opcode, payload, nodeid)
        assert len(self.replies) == before + 1, "not exactly one reply"
        got_unique, err, out = self.replies[-1]
        assert got_unique == unique
        return err, out

    def init(self, minor: int = 45) -> fp.fuse_init_out:
        err, out = self.call(Op.FUSE_INIT, bytes(fp.fuse_init_in(major=7, minor=minor,
                                                                  max_readahead=1 << 17)))
        assert err == 0
        return fp.fuse_init_out.from_buffer_copy(out)

    def open(self, nodeid: int = 2) -> int:
        err, out = self.call(Op.FUSE_OPEN, bytes(fp.fuse_open_in(flags=2)), nodeid)
        assert err == 0
        return int(fp.fuse_open_out.from_buffer_copy(out).fh)

    def ioctl_payload(self, fh: int, cmd: int, data: bytes, out_size: int | None = None,
                      flags: int = 0, in_size: int | None = None) -> bytes:
        return bytes(fp.fuse_ioctl_in(fh=fh, cmd=cmd, flags=flags,
                                      in_size=len(data) if in_size is None else in_size,
                                      out_size=len(data) if out_size is None else out_size)) + data


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.init()
    return harness


def test_init_negotiates_version_and_sizes() -> None:
    h = Harness()
    assert h.call(Op.FUSE_GETATTR)[0] == errno.EIO  # nothing before INIT
    out = h.init(minor=45)
    assert (out.major, out.minor, out.max_write) == (7, 45, 1 << 16)
    assert h.server._bufsize >= max(8192, 80 + out.max_write)
    assert Harness().init(minor=50).minor == fp.FUSE_KERNEL_MINOR_VERSION  # newer kernel: ours
    old = Harness()
    assert old.call(Op.FUSE_INIT, bytes(fp.fuse_init_in(major=7, minor=12)))[0] == errno.EPROTO
    assert "older than 7.23" in (old.server._init_error or "")
    assert Harness().call(Op.FUSE_INIT, b"\x07\0\0\0")[0] == errno.EINVAL  # truncated INIT


def test_lookup_getattr_readdir(h: Harness) -> None:
    err, out = h.call(Op.FUSE_LOOKUP, b"dla1\0")
    entry = fp.fuse_entry_out.from_buffer_copy(out)
    assert err == 0 and entry.nodeid == 3 and entry.attr.mode == 0o100666
    assert h.call(Op.FUSE_LOOKUP, b"nope\0")[0] == errno.ENOENT
    assert h.call(Op.FUSE_LOOKUP, b"dla1")[0] == errno.EINVAL  # no terminating NUL
    assert h.call(Op.FUSE_LOOKUP, b"x" * 300)[0] == errno.ENAMETOOLONG
    assert h.call(Op.FUSE_LOOKUP, b"dla0\0", nodeid=2)[0] == errno.ENOTDIR
    assert h.call(Op.FUSE_GETATTR, bytes(16), nodeid=99)[0] == errno.ENOENT
    assert fp.fuse_attr_out.from_buffer_copy(h.call(Op.FUSE_GETATTR, bytes(16))[1]).attr.mode == 0o40755
    assert h.call(Op.FUSE_SETATTR, bytes(88), nodeid=2)[0] == errno.EPERM

    def names(offset: int, size: int = 4096) -> list[bytes]:
        err, out = h.call(Op.FUSE_READDIR, bytes(fp.fuse_read_in(offset=offset, size=size)))
        assert err == 0
        found, pos = [], 0
        while pos < len(out):
            d = fp.fuse_dirent.from_buffer_copy(out, pos)
            found.append(out[pos + 24:pos + 24 + d.namelen])
            pos += fp.dirent_size(d.namelen)
        return found

    assert names(0) == [b".", b"..", b"dla0", b"dla1"]
    assert names(3) == [b"dla1"] and names(4) == [] and names(1 << 60) == []
    assert names(0, size=64) == [b".", b".."]  # what fits, the rest at the next offset
    assert h.call(Op.FUSE_READDIR, b"\0" * 8)[0] == errno.EINVAL
    assert h.call(Op.FUSE_OPENDIR, bytes(8), nodeid=2)[0] == errno.ENOTDIR
    assert h.call(Op.FUSE_OPEN, bytes(8), nodeid=1)[0] == errno.EISDIR
    assert h.call(Op.FUSE_STATFS)[0] == 0 and h.call(Op.FUSE_ACCESS, bytes(8))[0] == 0


def test_ioctl_checks_everything_from_the_request(h: Harness) -> None:
    fh = h.open()
    err, out = h.call(Op.FUSE_IOCTL, h.ioctl_payload(fh, ECHO, bytes(range(64))), nodeid=2)
    assert err == 0 and struct.unpack_from("<i", out)[0] == sum(range(64))
    assert out[16:] == bytes(range(63, -1, -1))
    bad = [
        (h.ioctl_payload(fh, ECHO, b"")[:20], errno.EINVAL),  # truncated fuse_ioctl_in
        (h.ioctl_payload(fh, ECHO, bytes(64), in_size=65), errno.EINVAL),  # in_size != data sent
        (h.ioctl_payload(fh, ECHO, bytes(64), out_size=1 << 20), errno.EINVAL),
        (h.ioctl_payload(fh + 7, ECHO, bytes(64)), errno.EBADF),  # not an open handle
        (h.ioctl_payload(fh, ECHO, bytes(64), flags=fp.FUSE_IOCTL_DIR), errno.ENOTTY),
        (h.ioctl_payload(fh, NOSYS, bytes(8)), errno.ENOTTY),  # never ENOSYS for IOCTL
        (h.ioctl_payload(fh, 0x1234, b""), errno.ENOTTY),
    ]
    for payload, expected in bad:
        assert h.call(Op.FUSE_IOCTL, payload, nodeid=2)[0] == expected
    assert h.call(Op.FUSE_IOCTL, h.ioctl_payload(fh, ECHO, bytes(64)), nodeid=3)[0] == errno.EBADF


class BadResults(TestHandler):
    def ioctl(self, fh: object, ctx: RequestContext, cmd: int, data: bytes,
              out_size: int) -> tuple[int, bytes]:
        return {1: (0, bytes(out_size + 1)), 2: (-errno.EPERM, b""), 3: (-errno.ENOSYS, b""),
                4: ("x", b""), 5: (1 << 31, b"")}[cmd & 0xFF]  # type: ignore[return-value]


def test_bad_handler_results_become_errors() -> None:
    h = Harness(BadResults())
    h.init()
    fh = h.open()
    expected = {1: errno.EIO, 2: errno.EPERM, 3: errno.ENOTTY, 4: errno.EIO, 5: errno.EIO}
    for nr, err in expected.items():
        cmd = fp.IOWR(ord("d"), nr, 8)
        assert h.call(Op.FUSE_IOCTL, h.ioctl_payload(fh, cmd, bytes(8)), nodeid=2)[0] == err
    assert FuseError(0).errno == errno.EIO and FuseError(600).errno == errno.EIO


def test_release_and_no_reply_opcodes(h: Harness) -> None:
    fh = h.open()
    assert h.server.open_handles == 1
    assert h.call(Op.FUSE_FLUSH, bytes(fp.fuse_flush_in(fh=fh)), nodeid=2)[0] == 0
    assert h.call(Op.FUSE_RELEASE, bytes(fp.fuse_release_in(fh=fh)), nodeid=2)[0] == 0
    assert h.server.open_handles == 0 and h.handler.releases == [4242]  # type: ignore[attr-defined]
    assert h.call(Op.FUSE_RELEASE, bytes(fp.fuse_release_in(fh=fh)), nodeid=2)[0] == errno.EBADF
    n = len(h.replies)
    for op in (Op.FUSE_FORGET, Op.FUSE_BATCH_FORGET, Op.FUSE_INTERRUPT, Op.FUSE_NOTIFY_REPLY):
        h.send(op, bytes(16))
    h.send(Op.FUSE_INTERRUPT, b"\x01")  # too short: ignored
    assert len(h.replies) == n
    assert h.call(Op.FUSE_POLL, bytes(24), nodeid=2)[0] == errno.ENOSYS
    assert h.call(9999)[0] == errno.ENOSYS
    assert h.call(Op.FUSE_DESTROY)[0] == 0


def test_malformed_headers(h: Harness) -> None:
    n = len(h.replies)
    h.server._process(memoryview(b"\0" * 20))  # shorter than a header: nothing to reply to
    assert len(h.replies) == n
    unique = h.send(Op.FUSE_GETATTR, bytes(16), length=1000)  # length disagrees with what was read
    assert h.replies[n:] == [(unique, errno.EIO, b"")]


def test_interrupts_reach_waiting_handlers(h: Harness) -> None:
    handler: TestHandler = h.handler  # type: ignore[assignment]
    fh = h.open()
    # An interrupt read before its request (two reader threads racing): remembered, then applied.
    h.send(Op.FUSE_INTERRUPT, struct.pack("<Q", 500), unique=501)
    h.send(Op.FUSE_IOCTL, h.ioctl_payload(fh, WAIT, bytes(8)), nodeid=2, unique=500)
    assert h.replies[-1][:2] == (500, errno.EINTR) and h.server._early_interrupts == {}
    # An interrupt while the handler waits.
    t = threading.Thread(target=h.send, args=(Op.FUSE_IOCTL, h.ioctl_payload(fh, WAIT, bytes(8))),
                         kwargs={"nodeid": 2, "unique": 600})
    t.start()
    assert handler.wait_for(lambda: handler.waiting == 1)
    h.send(Op.FUSE_INTERRUPT, struct.pack("<Q", 600), unique=601)
    t.join(5)
    assert not t.is_alive() and h.replies[-1][:2] == (600, errno.EINTR)
    assert h.server._in_flight == {}
    # Interrupts for requests never seen stay bounded.
    for i in range(5000):
        h.send(Op.FUSE_INTERRUPT, struct.pack("<Q", 10_000 + 2 * i), unique=10_001 + 2 * i)
    assert len(h.server._early_interrupts) <= 4096


def test_context_interrupt_api() -> None:
    ctx = RequestContext(1, Op.FUSE_IOCTL, 2, 0, 0, 1)
    calls: list[int] = []
    ctx.on_interrupt(lambda: calls.append(1))
    ctx.raise_if_interrupted()
    assert not ctx.interrupted.is_set()
    ctx._interrupt()
    ctx._interrupt()  # once only
    assert calls == [1] and ctx.interrupted.is_set() and ctx.is_interrupted
    ctx.on_interrupt(lambda: calls.append(2))  # already interrupted: at once
    assert calls == [1, 2]
    with pytest.raises(FuseError) as e:
        ctx.raise_if_interrupted()
    assert e.value.errno == errno.EINTR


def test_constructor_checks() -> None:
    for bad in ("", ".", "..", "a/b", "x" * 256):
        with pytest.raises(ValueError, match="file name"):
            FuseServer("/x", {bad: TestHandler()})
    with pytest.raises(ValueError, match="threads"):
        FuseServer("/x", {}, threads=0)
    with pytest.raises(ValueError, match="max_write"):
        FuseServer("/x", {}, max_write=100)


def test_protocol_layouts() -> None:
    assert fp.IOWR(ord("d"), 1, 64) == 0xC0406401 == ECHO
    assert fp.ioc_decode(ECHO) == (3, ord("d"), 1, 64)
    with pytest.raises(ValueError):
        fp.IOC(3, 1, 1, 1 << 14)
    assert ctypes.sizeof(fp.fuse_init_out) == 64 and fp.dirent_size(4) == 32


@settings(max_examples=300, deadline=None)
@given(opcode=st.integers(0, 60) | st.integers(0, 2**32 - 1), body=st.binary(max_size=200),
       length_delta=st.sampled_from([0, 0, 0, -1, 1, 1000]))
def test_fuzzed_requests_get_at_most_one_reply(opcode: int, body: bytes, length_delta: int) -> None:
    h = Harness()
    h.handler.open_gate()  # type: ignore[attr-defined]  # a fuzzed WAIT must not block
    h.init()
    fh = h.open()
    if opcode == Op.FUSE_IOCTL and len(body) >= 8:
        body = struct.pack("<Q", fh) + body[8:]  # reach the handler sometimes
    before = len(h.replies)
    unique = h.send(opcode, body, nodeid=2, length=fp.IN_HEADER_SIZE + len(body) + length_delta)
    new = h.replies[before:]
    if opcode in fp.NO_REPLY_OPCODES and length_delta == 0:
        assert new == []
    else:
        assert len(new) == 1 and new[0][0] == unique and 0 <= new[0][1] < 512


def test_open_whose_reply_is_lost_is_released(h: Harness) -> None:
    def lost(parts: list[bytes]) -> None:
        raise OSError(errno.ENOENT, "request aborted")  # what /dev/fuse says for an aborted request

    h.server._write = lost  # type: ignore[method-assign]
    h.send(Op.FUSE_OPEN, bytes(fp.fuse_open_in(flags=2)), nodeid=2)
    assert h.server.open_handles == 0 and h.handler.releases == [4242]  # type: ignore[attr-defined]
