"""``pydla devices``: what devices this machine offers, as ``xrt-smi examine`` shows XRT's.

Two kinds: the virtual device configurations the in-process port builds (``pydla.createRuntime(
config=NAME)``), and every running KMD daemon (``pydla kmd``) this process can see: each is a FUSE
mount of type ``fuse.pydla`` in /proc/self/mountinfo, and its ``DIR/status`` file says its versions,
configuration, devices, clients and jobs. Reading a status never waits longer than ``--timeout``
(a stopped daemon cannot hang the command); a mount whose daemon died is shown as stale, with the
command that clears it.

Usage::

    pydla devices                 # configurations and daemons, as text
    pydla devices --json          # the same, one JSON document
    pydla devices /run/pydla      # one daemon (exit status 1 when none serves there)
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import threading
from typing import Any

from pydla.errors import DlaError, NvError

FSTYPE = "fuse.pydla"
STATUS_FILE = "status"  # as pydla.linux.status names it (not imported: that module is Linux only)


def configurations() -> list[dict[str, Any]]:
    """The bundled virtual device configurations and what each can do."""
    from pydla.target.config import bundled_configs, load_config

    found = []
    for name in bundled_configs():
        c = load_config(name)
        found.append({"name": c.name, "description": c.description, "instances": c.instances,
                      "hw_version": c.hw_version, "blocks": [b.name for b in c.blocks],
                      "precisions": list(c.precision_names), "memory_bytes": c.memory_bytes,
                      "contexts": c.contexts,
                      # an NVDLA configuration: its device has NVDLA's register map (None: pydla's own)
                      "register_map": c.nvdla.register_map if c.nvdla is not None else None})
    return found


def daemon_mounts() -> list[str]:
    """Where pydla daemons are mounted (running or stale), from /proc/self/mountinfo."""
    if not os.path.exists("/proc/self/mountinfo"):
        return []
    from pydla.linux.fuse_mount import list_mounts

    seen: list[str] = []
    for m in list_mounts(FSTYPE):
        if m.mount_point not in seen:
            seen.append(m.mount_point)
    return seen


def read_daemon(mount: str, timeout: float = 2.0) -> dict[str, Any]:
    """One daemon's entry: ``{"mount", "state", "status", "error"}``; ``state`` is ``running`` (with
    its status document), ``stale`` (its daemon is gone), ``not answering`` or ``unreadable``."""
    result: list[Any] = []

    def read() -> None:
        try:
            with open(os.path.join(mount, STATUS_FILE), "rb") as f:
                result.append(f.read())
        except OSError as e:
            result.append(e)

    # In a helper thread: reading a FUSE file of a stopped daemon would block; the thread is left
    # behind (a daemon thread) when it does not answer in time.
    t = threading.Thread(target=read, name="pydla-devices-read", daemon=True)
    t.start()
    t.join(timeout)
    entry: dict[str, Any] = {"mount": mount, "state": "running", "status": None, "error": None}
    if not result:
        entry.update(state="not answering", error=f"no answer within {timeout:g} s (the daemon is "
                                                    "stopped or hung)")
        return entry
    got = result[0]
    if isinstance(got, OSError):
        if got.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            entry.update(state="stale", error=f"its daemon is gone; `pydla kmd --mount {mount}` clears "
                                              f"the mount and serves again (or `umount -l {mount}`)")
        elif got.errno == errno.ENOENT:
            entry.update(state="unreadable", error=f"no {STATUS_FILE} file: a daemon of an older pydla")
        else:
            entry.update(state="unreadable", error=f"{STATUS_FILE}: {got.strerror}")
        return entry
    try:
        entry["status"] = json.loads(got)
    except ValueError as e:
        entry.update(state="unreadable", error=f"{STATUS_FILE} is not JSON: {e}")
    return entry


def examine(directory: str | None = None, timeout: float = 2.0) -> dict[str, Any]:
    """``{"configurations": [...], "daemons": [...]}``, or the one daemon serving ``directory``
    (DlaError DeviceNotFound when none does)."""
    if directory is None:
        return {"configurations": configurations(),
                "daemons": [read_daemon(m, timeout) for m in daemon_mounts()]}
    if not os.path.exists("/proc/self/mountinfo"):
        raise DlaError(NvError.NotSupported, "KMD daemons run on Linux only (no /proc/self/mountinfo)")
    from pydla.linux.fuse_mount import resolve_mountpoint

    real = resolve_mountpoint(directory)  # without asking the daemon: it may be stopped
    if real not in daemon_mounts():
        raise DlaError(NvError.DeviceNotFound, f"{directory}: no pydla daemon serves it (no {FSTYPE} "
                                               f"mount there); start one with `pydla kmd --mount "
                                               f"{directory}`")
    return read_daemon(real, timeout)


# -- text ------------------------------------------------------------------------------------------


def _size(n: int) -> str:
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f} s"
    h, rest = divmod(s, 3600)
    return f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s"


def _jobs(j: dict[str, Any]) -> str:
    return ", ".join(f"{j[k]} {k}" for k in ("queued", "running", "completed", "failed"))


def format_daemon(entry: dict[str, Any]) -> list[str]:
    if entry["state"] != "running":
        return [f"  {entry['mount']}: {entry['state']}: {entry['error']}"]
    s = entry["status"]
    lines = [f"  {entry['mount']}: pid {s['pid']}, pydla {s['package_version']}, uAPI {s['uapi']}, config "
             f"'{s['config']}' ({s['mode']}), up {_duration(s['uptime_s'])}, "
             f"{s['totals']['clients']} client(s)"]
    for d in s["devices"]:
        lines.append(f"    {d['file']}: {d['contexts']} context(s); jobs: {_jobs(d['jobs'])}")
        r = d.get("recovery")  # a daemon of an older pydla has none
        if r is not None:
            lines.append(f"      hang timeout {r['tdr_ms']} ms; {r['hangs']} hang(s), "
                         f"{r['block_resets']} block reset(s), {r['device_resets']} device reset(s), "
                         f"{d.get('banned_contexts', 0)} banned context(s)")
    for c in s["clients"]:
        j = c["jobs"]
        lines.append(f"    client pid {c['pid']} ({c['command'] or '?'}) on dla{c['device']}: "
                     f"{c['buffers']} buffer(s) ({_size(c['buffer_bytes'])}), {c['syncs']} sync(s)"
                     f"{', ring' if c['ring'] else ''}; jobs: {j['completed']} completed, {j['failed']} "
                     f"failed, {j['in_flight']} in flight")
    return lines


def format_all(found: dict[str, Any]) -> str:
    lines = ["Virtual device configurations (in-process: pydla.createRuntime(config=NAME)):"]
    for c in found["configurations"]:
        lines.append(f"  {c['name']}: {c['instances']} instance(s), hw version {c['hw_version']:#010x}, "
                     f"blocks {' '.join(c['blocks'])}, precisions {' '.join(c['precisions'])}, "
                     f"{_size(c['memory_bytes'])} memory, {c['contexts']} contexts"
                     + (f", NVDLA register map {c['register_map']}" if c.get("register_map") else ""))
        if c["description"]:
            lines.append(f"    {c['description']}")
    lines.append("KMD daemons (pydla kmd --mount DIR; clients use port linux:DIR):")
    if not found["daemons"]:
        lines.append("  none running")
    for entry in found["daemons"]:
        lines += format_daemon(entry)
    return "\n".join(lines)


# -- the command -------------------------------------------------------------------------------------


def register(commands: Any) -> None:
    p = commands.add_parser(
        "devices", help="list device configurations and running KMD daemons (versions, clients, jobs)",
        description="List the virtual device configurations of the in-process port and every "
                    "running KMD daemon (pydla kmd) with its uAPI version, configuration, devices, "
                    "open contexts and clients, jobs queued, running, completed and failed, and "
                    "uptime; read from each daemon's DIR/status file.")
    p.add_argument("directory", nargs="?", metavar="DIR", help="show only the daemon serving DIR")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS",
                   help="how long to wait for a daemon's answer (default: %(default)s)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if not args.timeout > 0:
        raise DlaError(NvError.BadParameter, f"--timeout {args.timeout}: must be positive")
    found = examine(args.directory, args.timeout)
    one = args.directory is not None
    if args.json:
        print(json.dumps(found, indent=2))
    elif not one:
        print(format_all(found))
    elif found["state"] == "running":
        print("\n".join(line[2:] for line in format_daemon(found)))
    if one and found["state"] != "running":
        raise DlaError(NvError.Disconnected, f"{args.directory}: {found['state']}: {found['error']}")
    return 0
