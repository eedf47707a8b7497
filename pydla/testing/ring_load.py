"""Many client processes submitting through the Linux port at once, every submit accounted for.

A daemon in this process (:func:`ledger_daemon`: a :class:`~pydla.linux.daemon.KmdDaemon` whose job
counter also keeps each job's id and end, per client process) serves ``clients`` processes that each
run a one-Relu network with ``rt.submit()`` back to back for ``seconds``, recording the task id each
submit got (through ``NvDlaSubmitPrepared``) and every error; none retries. :func:`run_clients`
then holds the two ledgers side by side (:class:`LoadReport`):

- **lost**: a submit that returned with a task id the daemon never ran to completion;
- **duplicated**: a job the daemon queued for a client that no submit of that client returned
  (what a retry after a wrongly reported failure would run twice), or one id returned twice;
- **broken rings**: rings the daemon broke (its warnings) or a client found broken at the end;
- **shares**: each client's submits in the common window, against the mean.

Usage::

    write_relu_network(blob_path)
    daemon, ledger = ledger_daemon(clients=8)
    server = daemon.serve(mnt)
    report = run_clients(mnt, blob_path, clients=8, seconds=60)
    print(report.summary(ledger)); assert report.clean(ledger)
"""

from __future__ import annotations

import json
import logging
import select
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.kmd.job import COMPLETED
from pydla.linux.status import JobCounter

START_DELAY_S = 1.0  # between telling the clients when to start and the start

CLIENT = """
import json, os, sys, time
import numpy as np
import pydla
from pydla import DlaError
from pydla.portability.linux import LinuxPort
ids = []
real = LinuxPort.NvDlaSubmitPrepared

def recorded(self, *args, **kwargs):
    status = real(self, *args, **kwargs)
    ids.append(status.task_id)  # only a submit that returned: a raised one has no id
    return status

LinuxPort.NvDlaSubmitPrepared = recorded
mnt, blob, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
rt = pydla.createRuntime("linux", path=mnt)
rt.load(open(blob, "rb").read())
d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
a, b = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
x = np.random.default_rng(os.getpid()).standard_normal(d_in.dims).astype(np.float32)
a.array(np.float32, d_in.dims)[...] = x
rt.bindInputTensor(0, a); rt.bindOutputTensor(0, b)
rt.submit()
print("ready", flush=True)
start = float(sys.stdin.readline())
while time.time() < start:
    time.sleep(0.0005)
end, window, errors = start + seconds, 0, []
while time.time() < end:
    try:
        rt.submit()
        window += 1
    except DlaError as e:
        errors.append(str(e))
right = bool(np.array_equal(b.array(np.float32, d_out.dims), np.maximum(x, 0)))
ring = rt.handle.ring()
print(json.dumps({"pid": os.getpid(), "window": window, "ids": ids, "errors": errors, "right": right,
                  "ring": ring is not None}), flush=True)
rt.close()
"""


def write_relu_network(path: Path) -> None:
    """The network every client runs: one Relu over 1x8x4x4 float32, compiled (needs onnx)."""
    from onnx import TensorProto, helper

    from pydla.compiler.api import compile_model

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])])
    path.write_bytes(compile_model(helper.make_model(g)).blob)


class Ledger(JobCounter):
    """A daemon's job counter that also keeps, per client process, the id of every job queued and
    how each ended."""

    def __init__(self, devices: int) -> None:
        super().__init__(devices)
        self.queued: dict[int, list[int]] = {}  # pid -> job ids, in order
        self.ended: dict[int, dict[int, str]] = {}  # pid -> job id -> its end state

    def submitted(self, client: Any, job: Any) -> None:
        with self._lock:
            self.queued.setdefault(client.pid, []).append(int(job.job_id))
        super().submitted(client, job)

    def _count_end(self, client: Any, job: Any) -> None:  # under the counter's lock
        self.ended.setdefault(client.pid, {})[int(job.job_id)] = str(job.state)
        super()._count_end(client, job)


class _Breaks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "broke its submission ring" in record.getMessage():
            self.lines.append(record.getMessage())


def ledger_daemon(clients: int, *, config: str = "full", mode: str = "threaded") -> tuple[Any, Ledger]:
    """A daemon (not yet serving) whose job counter is a :class:`Ledger`, with a FUSE thread per
    client and one more (a blocking WAIT does not hold up the others)."""
    from pydla.linux.daemon import KmdDaemon

    daemon = KmdDaemon(config, mode=mode, threads=max(4, clients + 1))
    ledger = Ledger(len(daemon.kmds))
    daemon.jobs = ledger
    return daemon, ledger


@dataclass
class ClientRun:
    """What one client process reported."""

    pid: int
    window: int  # submits that returned within the common window
    ids: list[int]  # the task id of every submit that returned (warm-up included)
    errors: list[str]
    right: bool  # its last output was relu(x)
    ring: bool  # its ring was still in use at the end


@dataclass
class LoadReport:
    seconds: float
    runs: list[ClientRun]
    broken: list[str] = field(default_factory=list)  # the daemon's "broke its submission ring" lines

    @property
    def total(self) -> int:
        return sum(r.window for r in self.runs)

    @property
    def rate(self) -> float:
        return self.total / self.seconds

    def shares(self) -> list[float]:
        return [r.window / self.total if self.total else 0.0 for r in self.runs]

    def worst_share(self) -> float:
        """The largest distance of a client's submits from the mean, as a fraction of the mean."""
        mean = self.total / len(self.runs)
        return max(abs(r.window - mean) / mean for r in self.runs) if mean else 1.0

    def broken_rings(self) -> int:
        return max(len(self.broken), sum(not r.ring for r in self.runs))

    def lost(self, ledger: Ledger) -> dict[int, list[int]]:
        """Per client: ids a submit returned that the daemon did not run to completion."""
        out = {}
        for r in self.runs:
            ended = ledger.ended.get(r.pid, {})
            missing = [i for i in r.ids if ended.get(i) != COMPLETED]
            if missing:
                out[r.pid] = missing
        return out

    def duplicated(self, ledger: Ledger) -> dict[int, list[int]]:
        """Per client: jobs the daemon queued that no submit returned, and ids returned twice."""
        out = {}
        for r in self.runs:
            returned = Counter(r.ids)
            extra = [i for i in ledger.queued.get(r.pid, []) if i not in returned]
            twice = sorted(i for i, n in returned.items() if n > 1)
            if extra or twice:
                out[r.pid] = extra + twice
        return out

    def clean(self, ledger: Ledger) -> bool:
        return (not self.broken_rings() and not self.lost(ledger) and not self.duplicated(ledger)
                and all(r.right and not r.errors for r in self.runs))

    def summary(self, ledger: Ledger) -> str:
        lost, dup = self.lost(ledger), self.duplicated(ledger)
        errors = sum(len(r.errors) for r in self.runs)
        shares = ", ".join(f"{s:.1%}" for s in self.shares())
        head = f"{len(self.runs)} clients x {self.seconds:.0f} s: {self.total:,} submits, {self.rate:,.0f}/s"
        lines = [head,
                 f"broken rings {self.broken_rings()}; lost submits {sum(map(len, lost.values()))}; "
                 f"duplicated {sum(map(len, dup.values()))}; errors {errors}; "
                 f"wrong outputs {sum(not r.right for r in self.runs)}",
                 f"shares {shares} (worst {self.worst_share():.1%} from the mean)"]
        lines += [f"  broken: {line}" for line in self.broken[:3]]
        lines += [f"  error: {e}" for r in self.runs for e in r.errors[:2]][:6]
        return "\n".join(lines)


@contextmanager
def _watching_breaks() -> Iterator[_Breaks]:
    handler = _Breaks()
    logger = logging.getLogger("pydla.linux.ring")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def run_clients(mnt: Path, blob: Path, *, clients: int, seconds: float, ring: bool = True,
                timeout_s: float = 120.0) -> LoadReport:
    """``clients`` processes submit the network at ``blob`` through the daemon at ``mnt`` for
    ``seconds`` from a common start; their reports and the daemon's ring breaks. DlaError Timeout
    when a client does not get ready or end within ``timeout_s`` (plus ``seconds``)."""
    import os

    env = dict(os.environ, PYDLA_LINUX_RING="1" if ring else "0")
    with _watching_breaks() as breaks:
        procs = [subprocess.Popen([sys.executable, "-c", CLIENT, str(mnt), str(blob), str(seconds)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env) for _ in range(clients)]
        try:
            for p in procs:
                _ready(p, timeout_s)
            start = time.time() + START_DELAY_S
            for p in procs:
                assert p.stdin is not None
                p.stdin.write(f"{start}\n")
                p.stdin.flush()
            runs = []
            for p in procs:
                out, err = p.communicate(timeout=timeout_s + seconds)
                if p.returncode != 0:
                    raise DlaError(NvError.ResourceError, f"client {p.pid} failed: {err.strip()[-400:]}")
                runs.append(ClientRun(**json.loads(out.strip().splitlines()[-1])))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        return LoadReport(seconds, runs, list(breaks.lines))


def _ready(p: subprocess.Popen[str], timeout_s: float) -> None:
    assert p.stdout is not None
    ready, _, _ = select.select([p.stdout], [], [], timeout_s)
    if not ready or p.stdout.readline().strip() != "ready":
        p.kill()
        _, err = p.communicate()
        raise DlaError(NvError.Timeout, f"client {p.pid} did not get ready within {timeout_s:.0f} s: "
                                        f"{err.strip()[-400:]}")
