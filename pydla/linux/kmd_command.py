"""``pydla kmd``: run the KMD daemon (:class:`pydla.linux.daemon.KmdDaemon`) from a shell, serving
``DIR/dla0``, ``DIR/dla1``... and ``DIR/status`` until SIGTERM or SIGINT.

Usage: ``pydla kmd --mount /run/pydla --config small``
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.kmd.recovery import DEFAULT_TDR_MS
from pydla.linux.clients import Quotas
from pydla.linux.daemon import KmdDaemon
from pydla.linux.fuse_mount import FuseMountError
from pydla.linux.status import STATUS_FILE

log = logging.getLogger("pydla.linux.daemon")


def register(commands: Any) -> None:
    p = commands.add_parser(
        "kmd", help="run the KMD daemon: device files served through FUSE, reached with ioctl(2)",
        description="Run the KMD and the virtual devices of a configuration in this process, serving "
                    "DIR/dla0, DIR/dla1, ... through FUSE (needs root and /dev/fuse), and DIR/status, the "
                    "daemon's state as JSON (`pydla devices DIR` shows it). Clients use "
                    "createRuntime(port='linux', path='DIR'), Session(..., port='linux:DIR'), or "
                    "PYDLA_PORT=linux:DIR. Stops (and unmounts) on SIGTERM or SIGINT.")
    p.add_argument("--mount", required=True, metavar="DIR",
                   help="an empty directory to serve the device files in; a stale mount that a killed "
                        "daemon left there is cleared first")
    # The bundled names as a literal: this layer does not read the device configurations' module
    # (tests/test_composition.py); tests/test_project.py checks the list against the bundled files.
    p.add_argument("--config", default="full",
                   help="device configuration: full, full-headed, small, NVDLA's nv_full, nv_large, "
                        "nv_medium_1024_full, nv_medium_512, nv_small, nv_small_256, nv_small_256_full, "
                        "and headed nv_full-headed, nv_large-headed, nv_small-headed, or a JSON file")
    p.add_argument("--mode", choices=("threaded", "deterministic"), default="threaded",
                   help="how the virtual devices run (default: threaded, beside the daemon)")
    p.add_argument("--threads", type=int, default=4,
                   help="request threads to start with; the pool grows to 64 while WAITs block some")
    p.add_argument("--timeout-ms", type=int, default=10_000, help="default job timeout")
    p.add_argument("--tdr-ms", type=int, default=DEFAULT_TDR_MS, metavar="MS",
                   help="hang timeout: a job none of whose operations completes within MS is declared "
                        "hung and the recovery ladder runs; clients can only shorten it "
                        f"(default {DEFAULT_TDR_MS})")
    p.add_argument("--client-memory", type=int, metavar="BYTES",
                   help="bytes of buffer objects one open device file may hold (default: half the "
                        "device memory)")
    p.add_argument("--client-buffers", type=int, default=Quotas.buffers, metavar="N",
                   help="buffer objects one open device file may hold (default: %(default)s)")
    p.add_argument("--client-syncs", type=int, default=Quotas.syncs, metavar="N",
                   help="sync objects one open device file may hold (default: %(default)s)")
    p.add_argument("--client-waits", type=int, default=Quotas.waits, metavar="N",
                   help="WAITs of one open device file in progress at once (default: %(default)s)")
    p.set_defaults(func=_main)


def _positive(name: str, value: int | None) -> None:
    if value is not None and value <= 0:
        raise DlaError(NvError.BadParameter, f"{name} {value}: must be positive")


def _main(args: argparse.Namespace) -> int:
    for name in ("threads", "timeout_ms", "tdr_ms", "client_memory", "client_buffers", "client_syncs",
                 "client_waits"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    if not may_mount():
        raise DlaError(NvError.ResourceError, _needs_root(args.mount, os.geteuid()))
    quotas = Quotas(args.client_buffers, args.client_memory, args.client_syncs, args.client_waits)
    daemon = KmdDaemon(args.config, mode=args.mode, default_timeout_ms=args.timeout_ms, quotas=quotas,
                       threads=args.threads, tdr_ms=args.tdr_ms)
    # Not dumpable: a process of another uid can then neither ptrace the daemon nor open anything
    # under /proc/<pid>/ (its memory, its descriptors).
    _set_dumpable(False)
    server = daemon.server(args.mount)
    # Handlers first: a SIGTERM that arrives while mounting must still stop (and unmount) cleanly.
    previous = {sig: signal.signal(sig, lambda *_: server.request_stop())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            server.start()
        except FuseMountError as e:  # a stale mount, no /dev/fuse, no privilege: say so in one line
            raise DlaError(NvError.ResourceError, str(e)) from e
        names = ", ".join(sorted(n for n in daemon.files() if n != STATUS_FILE))
        print(f"pydla kmd: serving {names} in {server.mountpoint} (pid {os.getpid()}, config "
              f"'{daemon.platform.name}'; state: `pydla devices {args.mount}`); SIGTERM or Ctrl-C "
              "stops", flush=True)
        server.run(install_signal_handlers=False)
    finally:
        server.stop()
        daemon.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("pydla kmd: stopped", file=sys.stderr, flush=True)
    return 0


_PR_SET_DUMPABLE = 4
_CAP_SYS_ADMIN = 21


def _needs_root(mount: str, uid: int) -> str:
    why = f"it mounts {mount} through /dev/fuse with mount(2), which takes CAP_SYS_ADMIN"
    if uid != 0:
        return (f"pydla kmd needs root: {why} (uid {uid} lacks it; fusermount is not used): run it as "
                "root, e.g. with sudo")
    return (f"pydla kmd needs CAP_SYS_ADMIN: {why}, which this root process lacks (a container's, or "
            "dropped): run it with CAP_SYS_ADMIN")


def may_mount(status: str = "/proc/self/status") -> bool:
    """Whether this process may mount(2) a FUSE file system: CAP_SYS_ADMIN in its effective set
    (root has it; so may a container's process that is not uid 0). Without /proc: whether it is root.

    Usage: ``if not may_mount(): ...``
    """
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        pass
    return os.geteuid() == 0


def _set_dumpable(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, int(on), 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_DUMPABLE): %s", os.strerror(ctypes.get_errno()))
