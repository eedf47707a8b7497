"""The daemon's state for people and tools: ``DIR/status``, a read-only JSON document made when the file
is opened (``cat DIR/status``; ``pydla devices DIR`` shows it), and the job counts behind it.

The document (``format`` 1)::

    {"format": 1, "pid": 4242, "package_version": "0.1.0", "uapi": "2.4.0",
     "uapi_layout_hash": "e8e206f68c2dd281", "config": "full", "mode": "threaded",
     "mount": "/run/pydla", "started": "2026-11-25T15:54:00Z", "uptime_s": 12.5,
     "quotas": {"buffers": 4096, "bytes": ..., "syncs": 4096, "waits": 8, "max_wait_ms": 1000},
     "devices": [{"file": "dla0", "instance": 0, "config": "full", "hw_version": 65537,
                  "blocks": ["BDMA", "CONV", ...], "precisions": ["FP32", ...],
                  "memory_bytes": ..., "contexts": 1,
                  "jobs": {"queued": 0, "running": 0, "submitted": 3, "completed": 3, "failed": 0}}],
     "clients": [{"pid": 4300, "command": "python3", "device": 0, "buffers": 2,
                  "buffer_bytes": 8192, "syncs": 1, "waits": 0, "ring": true,
                  "jobs": {"submitted": 3, "completed": 3, "failed": 0, "in_flight": 0}}],
     "totals": {"clients": 1, "jobs_queued": 0, "jobs_running": 0, "jobs_submitted": 3,
                "jobs_completed": 3, "jobs_failed": 0}}

Job counts cover the daemon's life (device totals keep the jobs of clients that have gone); a job
is counted completed or failed as soon as the KMD has ended it, before its fences wake anyone, so a
client that saw its job finish finds it counted.

Usage::

    counter = JobCounter(devices=2)
    job = kmd.submit(...); counter.watch(client, job)
    files["status"] = StatusFile(daemon.status)
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydla._version import __version__
from pydla.deviceapi.generated import dla_uapi as U
from pydla.kmd.job import COMPLETED
from pydla.linux.fuse_context import FuseError, RequestContext

if TYPE_CHECKING:
    from pydla.linux.daemon import KmdDaemon

STATUS_FILE = "status"
FORMAT = 1


class _Job(Protocol):
    """What the counter needs of a KMD job."""

    state: str
    on_done: Callable[[Any], None] | None

    @property
    def done(self) -> bool: ...


@dataclass
class JobTally:
    """Jobs of one client or one device."""

    submitted: int = 0
    completed: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"submitted": self.submitted, "completed": self.completed, "failed": self.failed}


class JobCounter:
    """Counts jobs per device and per client (any hashable key with a ``device`` index).

    Its lock is a leaf: the KMD ends jobs under its own lock and calls the hook from there, so
    nothing is ever called while this lock is held."""

    def __init__(self, devices: int) -> None:
        self._lock = threading.Lock()
        self._devices = [JobTally() for _ in range(devices)]
        self._clients: dict[Any, JobTally] = {}
        self._pending: dict[Any, Any] = {}  # job -> its client, until counted as ended

    def hook(self, then: Callable[[Any], None] | None = None) -> Callable[[Any], None]:
        """An ``on_done`` for the KMD: counts the job's end, then calls ``then(job)`` if given (the
        ring's answer), so that a client told its job ended finds it counted."""
        def on_done(job: Any) -> None:
            self._ended(job)
            if then is not None:
                then(job)
        return on_done

    def submitted(self, client: Any, job: _Job) -> None:
        """Count ``job``, which ``client`` has just had queued with this counter's hook as its
        ``on_done``. The hook may have run already (a job can end before its submit returns): the
        job's ``done`` flag, set before the KMD calls the hook, says so."""
        with self._lock:
            self._devices[client.device].submitted += 1
            self._tally(client).submitted += 1
            if job.done:
                self._count_end(client, job)
            else:
                self._pending[job] = client

    def watch(self, client: Any, job: _Job) -> None:
        """Count a job queued without a hook (the SUBMIT ioctl's): the hook is set now."""
        job.on_done = self.hook()
        self.submitted(client, job)

    def forget(self, client: Any) -> None:
        """``client`` has gone: its own tally goes (its jobs stay in its device's)."""
        with self._lock:
            self._clients.pop(client, None)

    def snapshot(self) -> tuple[list[dict[str, int]], dict[Any, dict[str, int]]]:
        """(per device, per client) counts; jobs that ended but whose hook has not run yet are
        counted now."""
        with self._lock:
            for job, client in list(self._pending.items()):
                if job.done:
                    del self._pending[job]
                    self._count_end(client, job)
            in_flight: dict[Any, int] = {}
            for client in self._pending.values():
                in_flight[client] = in_flight.get(client, 0) + 1
            devices = [t.as_dict() for t in self._devices]
            clients = {c: {**t.as_dict(), "in_flight": in_flight.get(c, 0)} for c, t in self._clients.items()}
        return devices, clients

    def _ended(self, job: _Job) -> None:
        with self._lock:
            client = self._pending.pop(job, None)
            if client is not None:
                self._count_end(client, job)

    def _tally(self, client: Any) -> JobTally:
        tally = self._clients.get(client)
        if tally is None:
            tally = self._clients[client] = JobTally()
        return tally

    def _count_end(self, client: Any, job: _Job) -> None:
        ok = job.state == COMPLETED
        for tally in (self._devices[client.device], self._clients.get(client)):
            if tally is not None:
                if ok:
                    tally.completed += 1
                else:
                    tally.failed += 1


class StatusFile:
    """The FileHandler of ``DIR/status``: each open takes a snapshot (``make()``, a JSON-able dict),
    which reads of that open return; it takes no ioctls and cannot be written."""

    file_mode = 0o444

    def __init__(self, make: Callable[[], dict[str, Any]]) -> None:
        self.make = make

    def open(self, ctx: RequestContext) -> object:
        if ctx.flags & os.O_ACCMODE != os.O_RDONLY:
            raise FuseError(errno.EACCES, f"{STATUS_FILE} is read-only")
        return (json.dumps(self.make(), indent=2) + "\n").encode()

    def read(self, fh: object, ctx: RequestContext, offset: int, size: int) -> bytes:
        assert isinstance(fh, bytes)
        return fh[offset:offset + size]

    def ioctl(self, fh: object, ctx: RequestContext, cmd: int, data: bytes,
              out_size: int) -> tuple[int, bytes]:
        raise FuseError(errno.ENOTTY, f"{STATUS_FILE} takes no ioctls: read it")

    def release(self, fh: object, ctx: RequestContext) -> None:
        pass


def process_name(pid: int) -> str:
    """The command name of process ``pid`` (its ``comm``), or "" when it is gone."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def status_document(daemon: KmdDaemon) -> dict[str, Any]:
    """The document of ``DIR/status`` (see the module docstring). The daemon's clients are taken
    under its lock, then the job counts, then each KMD's statistics under its own lock: never two
    at once, because a KMD calls into the job counter under its lock."""
    rows = daemon.client_rows()
    device_jobs, client_jobs = daemon.jobs.snapshot()
    devices: list[dict[str, Any]] = []
    for i, kmd in enumerate(daemon.kmds):
        info, stats = kmd.info, kmd.stats()
        devices.append({"file": f"dla{i}", "instance": i, "config": info.name,
                        "hw_version": info.hw_version, "blocks": [b.name for b in info.blocks],
                        "precisions": [p.name for p in info.precisions],
                        "memory_bytes": info.memory_bytes, "contexts": stats["contexts"],
                        "jobs": {"queued": stats["queued"], "running": int(stats["running"] is not None),
                                 **device_jobs[i]},
                        "banned_contexts": len(stats["banned_contexts"]),
                        "recovery": stats["recovery"]})
    empty = {"submitted": 0, "completed": 0, "failed": 0, "in_flight": 0}
    clients = []
    for row in rows:
        client = row.pop("client")
        clients.append({"pid": row["pid"], "command": process_name(row["pid"]), **row,
                        "jobs": client_jobs.get(client, empty)})
    clients.sort(key=lambda c: (c["device"], c["pid"]))
    totals = {"clients": len(clients)}
    for key in ("queued", "running", "submitted", "completed", "failed"):
        totals["jobs_" + key] = sum(d["jobs"][key] for d in devices)
    q = daemon.quotas
    return {"format": FORMAT, "pid": os.getpid(), "package_version": __version__,
            "uapi": ".".join(map(str, U.VERSION)), "uapi_layout_hash": f"{U.LAYOUT_HASH64:016x}",
            "config": daemon.platform.name, "mode": daemon.kmds[0].info.mode, "mount": daemon.mountpoint,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(daemon.started)),
            "uptime_s": round(daemon.uptime, 3),
            "quotas": {"buffers": q.buffers, "bytes": q.bytes, "syncs": q.syncs, "waits": q.waits,
                       "max_wait_ms": daemon.max_wait_ms},
            "devices": devices, "clients": clients, "totals": totals}
