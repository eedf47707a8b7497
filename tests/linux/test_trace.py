"""The device's trace ring through the daemon (uAPI 2.8): a Session traced over the Linux port, and
the raw commands' errnos."""

from __future__ import annotations

import json
from pathlib import Path

from pydla.linux.daemon import KmdDaemon
from tests.linux.test_daemon import client, daemon, finish, shave_net  # noqa: F401 (fixtures)

BODY = """
from pydla.portability.interface import NvDlaTrace
s = pydla.Session(BLOB, port="linux", path=MNT, trace=OUT + "/t.json")
x = np.random.default_rng(0).standard_normal(s.inputs[0].shape).astype(np.float32)
for _ in range(2):
    s.run({s.inputs[0].name: x})
port, h = s.runtime.port, s.runtime.handle
other = port.NvDlaOpen(0)
try:
    port.NvDlaTraceStart(other, 1 << 16, 1)
except DlaError as e:
    print("second", e.code.name)
port.NvDlaClose(other)
s.close()
# raw commands
import ctypes
fd = os.open(MNT + "/dla0", os.O_RDWR)
def call(nr, args):
    try:
        fcntl.ioctl(fd, COMMANDS[nr], bytearray(bytes(args)), True)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
hs = U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                       layout_hash64=U.LAYOUT_HASH64)
fcntl.ioctl(fd, COMMANDS[U.dla_ioctl_e.HANDSHAKE], bytearray(bytes(hs)), True)
print("bad size", call(U.dla_ioctl_e.TRACE_START, U.dla_trace_start_t(size=100, mask=1)))
start = bytearray(bytes(U.dla_trace_start_t(size=1 << 16, mask=2)))
fcntl.ioctl(fd, COMMANDS[U.dla_ioctl_e.TRACE_START], start, True)
t = U.dla_trace_start_t.from_buffer(start).trace
small = ctypes.create_string_buffer(64)
at = ctypes.addressof(small)
print("small", call(U.dla_ioctl_e.TRACE_READ, U.dla_trace_read_t(trace=t, data=at, size=64)))
print("unknown", call(U.dla_ioctl_e.TRACE_READ, U.dla_trace_read_t(trace=t + 9, data=at, size=64)))
print("fault", call(U.dla_ioctl_e.TRACE_STOP, U.dla_trace_read_t(trace=t, data=16, size=1 << 16)))
os.close(fd)  # its trace stops with it
"""


def test_a_session_over_the_linux_port_writes_its_trace(
        daemon: tuple[KmdDaemon, Path], shave_net: tuple[Path, object], tmp_path: Path) -> None:  # noqa: F811
    d, mnt = daemon
    blob, _ = shave_net
    lines = finish(client(mnt, blob, f"OUT = {str(tmp_path)!r}\n" + BODY))
    assert lines[:5] == ["second Busy", "bad size EINVAL", "small EINVAL", "unknown ENOENT", "fault EFAULT"]
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    device = [e for e in events if e["ph"] == "X" and e["pid"] == 2 and e["cat"] == "device"]
    assert len(device) == 2 * 8 and all(e["name"].startswith("task0: operation") for e in device)
    tasks = [e for e in events if e["ph"] == "X" and e["cat"] == "task"]  # the daemon's engines record them
    assert len(tasks) == 2 * 2 and all(e["args"]["status"] == "OK" for e in tasks)
    # and the softmax's SHAVE task list: one execution of a tile's compute unit per run
    assert len([e for e in events if e["ph"] == "X" and e["pid"] == 2]) == 2 * (9 + 2)  # + its two tasks
    assert [e["name"] for e in events if e["ph"] == "X" and e["pid"] == 1].count("npu task0") == 2
    assert all(k.port.dla_reg_read(0x58) == 0 for k in d.kmds)  # GLB trace_size: every trace stopped
