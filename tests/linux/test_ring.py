"""Submission rings (uAPI 2.4): what RING_SETUP refuses, how the daemon answers entries it refuses,
and that a client breaking the ring's rules loses its ring, not its file, and nobody else's work."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pydla.linux.daemon import KmdDaemon
from tests.linux.test_daemon import client, daemon, finish, net, wait_until  # noqa: F401 (fixtures)

RAW = """
import select
from pydla.uapi.ring import CQ_HEAD, CQ_TAIL, CQE, ENTRIES, FLAGS, SQ_HEAD, SQ_TAIL, RingLayout, header_words
from pydla.uapi.shm import SharedBuffer
E = U.dla_ioctl_e
fd = os.open(MNT + "/dla0", os.O_RDWR)

def call(nr, args):
    buf = bytearray(bytes(args))
    try:
        fcntl.ioctl(fd, COMMANDS[nr], buf, True)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]

call(E.HANDSHAKE, U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                                    layout_hash64=U.LAYOUT_HASH64))
layout = RingLayout(8)
shm = SharedBuffer(layout.size)
s_efd, c_efd = os.eventfd(0, os.EFD_NONBLOCK), os.eventfd(0, os.EFD_NONBLOCK)
unsealed = os.memfd_create("plain")
os.ftruncate(unsealed, layout.size)
pipe_r, pipe_w = os.pipe()

def setup(**kw):
    a = dict(ring_fd=shm.fd, submit_efd=s_efd, complete_efd=c_efd, entries=8, ring_bytes=layout.size)
    a.update(kw)
    return call(E.RING_SETUP, U.dla_ring_setup_t(**a))

print(setup(entries=12), setup(entries=512), setup(ring_bytes=layout.size - 1), setup(ring_fd=unsealed),
      setup(submit_efd=pipe_r), setup(complete_efd=9999))
print(setup(), setup())
m = shm.mapping
w = header_words(m)
print("entries", w[ENTRIES])
tail = 0
seen = 0

def submit(**fields):
    global tail
    sqe = U.dla_ring_sqe_t(**fields)
    off = layout.sqe_offset(tail)
    m[off:off + len(bytes(sqe))] = bytes(sqe)
    tail += 1
    w[SQ_TAIL] = tail & 0xFFFFFFFF
    os.eventfd_write(s_efd, 1)

def answer():
    global seen
    p = select.poll(); p.register(c_efd, select.POLLIN)
    end = time.monotonic() + 10
    while w[CQ_TAIL] == seen and time.monotonic() < end:
        p.poll(100)
    cqe = CQE.unpack_from(m, layout.cqe_offset(seen))
    seen += 1
    w[CQ_HEAD] = seen
    return cqe

def last_error():
    a = U.dla_get_param_t(param=U.dla_param_e.LAST_ERROR)
    buf = bytearray(bytes(a)); fcntl.ioctl(fd, COMMANDS[E.GET_PARAM], buf, True)
    return bytes(U.dla_get_param_t.from_buffer_copy(buf).text).split(b"\\0")[0].decode()

submit(user_data=7, prepared=12345)
ud, task, kind, status, done = answer()
print("unknown", ud, kind == U.dla_ring_cqe_kind_e.ACCEPTED, errno.errorcode[status], "12345" in last_error())
submit(user_data=8, prepared=1, num_pre_fences=9)
ud, task, kind, status, done = answer()
print("fences", ud, errno.errorcode[status], "at most 4" in last_error())
submit(user_data=9, prepared=1, num_post_fences=1, post_fences=(U.dla_fence_t(sync=424242, value=1),))
ud, task, kind, status, done = answer()
print("sync", ud, errno.errorcode[status])
# a completion queue nobody empties: 16 answers fit, the 17th breaks the ring
w[CQ_HEAD] = seen
for i in range(17):
    submit(user_data=100 + i, prepared=12345)
    end = time.monotonic() + 10
    while w[SQ_HEAD] != tail & 0xFFFFFFFF and time.monotonic() < end:
        time.sleep(0.002)
end = time.monotonic() + 10
while not w[FLAGS] and time.monotonic() < end:
    time.sleep(0.002)
print("cq overflow broken", w[FLAGS] == U.dla_ring_flags_e.BROKEN)
print("file still works", call(E.GET_PARAM, U.dla_get_param_t(param=U.dla_param_e.NUM_DEVICES)))
print("no second ring", setup())

# another file: an index far past the ring breaks it at once
fd = os.open(MNT + "/dla0", os.O_RDWR)
call(E.HANDSHAKE, U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                                    layout_hash64=U.LAYOUT_HASH64))
shm2 = SharedBuffer(layout.size)
e2 = os.eventfd(0)
print("second file", setup(ring_fd=shm2.fd, submit_efd=e2, complete_efd=os.eventfd(0)))
m2 = shm2.mapping
w2 = header_words(m2)
w2[SQ_TAIL] = 1000
os.eventfd_write(e2, 1)
end = time.monotonic() + 10
while not w2[FLAGS] and time.monotonic() < end:
    time.sleep(0.002)
print("tail past the ring broken", w2[FLAGS] == U.dla_ring_flags_e.BROKEN)
"""


def test_ring_setup_refusals_and_rule_breakers(daemon: tuple[KmdDaemon, Path],  # noqa: F811 (fixture)
                                               net: tuple[Path, object]) -> None:  # noqa: F811
    d, mnt = daemon
    blob, model = net
    lines = finish(client(mnt, blob, RAW))
    assert lines[0] == "EINVAL EINVAL EINVAL EINVAL EINVAL EBADF"
    assert lines[1] == "ok EBUSY"
    assert lines[2] == "entries 8"
    assert lines[3] == "unknown 7 True ENOENT True"
    assert lines[4] == "fences 8 EINVAL True"
    assert lines[5] == "sync 9 ENOENT"  # another client's sync: as if it did not exist
    assert lines[6] == "cq overflow broken True"
    assert lines[7] == "file still works ok"
    assert lines[8] == "no second ring EBUSY"
    assert lines[9] == "second file ok"
    assert lines[10] == "tail past the ring broken True"
    wait_until(lambda: d.counts() == {"clients": 0, "buffers": 0, "syncs": 0})

    # The daemon serves others as before: a network through the port (and its ring) is right.
    out = finish(client(mnt, blob, f"""
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
x, y = run_net(rt, 4)
print(rt.handle.ring() is not None)
np.save({str(mnt.parent / 'x.npy')!r}, x); np.save({str(mnt.parent / 'y.npy')!r}, y)
"""))
    assert out[0] == "True"
    from pydla.demo import reference

    x, y = np.load(mnt.parent / "x.npy"), np.load(mnt.parent / "y.npy")
    np.testing.assert_allclose(y, reference(model, {"input": x})[0], rtol=1e-5, atol=1e-6)


def test_a_client_that_exits_with_ring_jobs_in_flight_is_cleaned_up(daemon: tuple[KmdDaemon, Path],  # noqa: F811
                                                                    net: tuple[Path, object]) -> None:  # noqa: F811
    d, mnt = daemon
    blob, _ = net
    finish(client(mnt, blob, """
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
run_net(rt, 1)
for _ in range(20):
    rt.submitNonBlocking()
os._exit(0)  # no close: the daemon sees the file released with jobs queued
"""))
    wait_until(lambda: d.counts() == {"clients": 0, "buffers": 0, "syncs": 0})
    out = finish(client(mnt, blob, """
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
run_net(rt, 2)
print("ok")
"""))
    assert out[0] == "ok"
