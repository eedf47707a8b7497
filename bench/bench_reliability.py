"""Reliability under faults and churn: the fault campaign and the soak.

``fault``: for each functional block and each fault (a hang, a device error), one context runs a
task on that block with the fault injected, twice, then once cleanly; meanwhile 1 and 4 other
contexts run a task on another block in a loop, checking every output. The goal: the other contexts
see 0 errors and a worst-case latency within the driver's hang timeout (TDR) plus one job; the faulty
context gets the driver's diagnosis and recovers on its next submit. ``--port inprocess`` runs every
context in this process; ``--port linux`` starts a KMD daemon here and runs each context as a client
process talking ioctls to it.

``soak``: client processes submit to a daemon, each checking every output, while clients are
killed at random and replaced; the daemon's open file descriptors and resident memory are sampled
and printed as a trend. The goal: 0 wrong outputs and flat fds and RSS.

Anchors: the fault campaign compares each worst-case latency with its bound (TDR + one job); the
soak compares the last sample of fds and RSS with the first after warm-up.

Usage::

    python bench/bench_reliability.py fault --port inprocess
    python bench/bench_reliability.py fault --port linux --others 1 4
    python bench/bench_reliability.py soak --clients 8 --submits 10000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pydla.errors import DlaError
from pydla.loadable.taskbuilder import LoadedTask, TaskBuilder
from pydla.portability.interface import NvDlaFence, NvDlaPort, NvDlaTask

BLOCKS = ("BDMA", "CONV", "SDP", "PDP", "CDP", "RUBIK")
F32 = 4


def build_task(block: str) -> tuple[Any, str, str]:
    """A small task whose work is on ``block`` (CONV needs SDP for its output): (built task, input
    buffer, output buffer)."""
    tb = TaskBuilder()
    shape = (4, 8, 8)
    x = tb.cube("x", shape)
    if block == "BDMA":
        y = tb.cube("y", shape)
        tb.bdma(x.ref, y.ref, line_size=int(np.prod(shape)) * F32)
    elif block == "CONV":
        y = tb.cube("y", (4, 8, 8))
        conv = tb.conv(x, tb.weights("w", (4, 4, 3, 3)), weight_shape=(4, 4, 3, 3), pads=(1, 1, 1, 1))
        tb.sdp(conv, y, act="relu")
    elif block == "SDP":
        y = tb.cube("y", shape)
        tb.sdp(x, y, act="relu")
    elif block == "PDP":
        y = tb.cube("y", (4, 4, 4))
        tb.pdp(x, y, kernel=(2, 2), stride=(2, 2))
    elif block == "CDP":
        y = tb.cube("y", shape)
        tb.cdp(x, y, size=3, alpha=0.5, beta=0.75, bias=1.0)
    elif block == "RUBIK":
        y = tb.cube("y", (4, 8, 8))
        tb.rubik(x, y, mode="transpose", perm=(0, 2, 1))
    else:
        raise ValueError(block)
    return tb.build(), "x", "y"


def innocent_block(faulty: str) -> str:
    """A block the faulty task does not use."""
    return "CDP" if faulty in ("PDP", "CONV") else "PDP"


class PortClient:
    """One context on a port, driving TaskBuilder tasks through the NvDla interface (the buffer
    allocator a built task loads itself with)."""

    def __init__(self, port: NvDlaPort, device: int = 0) -> None:
        self.port = port
        self.h = port.NvDlaOpen(device)
        self.mems: list[Any] = []

    def bo_create(self, ctx: int, size: int) -> int:
        mem, _ = self.port.NvDlaGetMem(self.h, size)
        self.mems.append(mem)
        return len(self.mems) - 1

    def bo_array(self, ctx: int, handle: int) -> Any:
        return self.mems[handle].bytes_view()

    def load(self, block: str, seed: int) -> tuple[LoadedTask, Any]:
        """Task on ``block`` in this context, its input (and weights) random: (task, output bytes)."""
        built, x, y = build_task(block)
        loaded = built.load(self, 0)
        rng = np.random.default_rng(seed)
        for name in (x, "w"):
            if name in loaded.handles:
                data = self.bo_array(0, loaded.handles[name]).view(np.float32)
                data[...] = rng.standard_normal(data.shape).astype(np.float32)
        return loaded, self.bo_array(0, loaded.handles[y])

    def run(self, loaded: LoadedTask, timeout_ms: int = 30_000) -> None:
        sem = self.port.NvDlaCreateSemaphore(self.h, 0)
        try:
            task = NvDlaTask([(self.mems[a.handle], a.offset) for a in loaded.addresses],
                             post_fences=[NvDlaFence(sem, 1)], timeout_ms=timeout_ms)
            self.port.NvDlaSubmit(self.h, [task])
            self.port.NvDlaWaitFence(NvDlaFence(sem, 1), timeout_ms)
        finally:
            self.port.NvDlaDestroySemaphore(sem)

    def close(self) -> None:
        for mem in self.mems:
            self.port.NvDlaFreeMem(self.h, mem)
        self.port.NvDlaClose(self.h)


# -- an innocent client's loop (a thread in-process, or a process through the daemon) ---------------


@dataclass
class LoopResult:
    jobs: int = 0
    errors: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)


def innocent_loop(port: NvDlaPort, block: str, seed: int, stop: threading.Event | None,
                  seconds: float | None = None, limit: int | None = None) -> LoopResult:
    result = LoopResult()
    client = PortClient(port)
    try:
        loaded, out = client.load(block, seed)
        client.run(loaded)
        expected = out.copy()
        end = None if seconds is None else time.monotonic() + seconds
        while not (stop is not None and stop.is_set()) and (end is None or time.monotonic() < end) \
                and (limit is None or result.jobs < limit):
            out[...] = 0xFF  # NaN: an output the device did not write shows
            t0 = time.perf_counter()
            try:
                client.run(loaded)
            except DlaError as e:
                result.errors.append(str(e))
                break
            result.latencies_ms.append((time.perf_counter() - t0) * 1e3)
            if not np.array_equal(out, expected):
                result.errors.append(f"job {result.jobs}: wrong output")
                break
            result.jobs += 1
    finally:
        client.close()
    return result


# -- the fault campaign -----------------------------------------------------------------------------


@dataclass
class FaultRow:
    block: str
    fault: str
    others: int
    faulty_errors: list[str]
    recovered: bool
    other_jobs: int
    other_errors: list[str]
    worst_ms: float
    bound_ms: float


def fault_campaign(port_kind: str, others_list: list[int], tdr_ms: int, blocks: list[str]) -> list[FaultRow]:
    rows = []
    with Harness(port_kind, tdr_ms) as harness:
        for block in blocks:
            one_job_ms = harness.one_job_ms(innocent_block(block))
            for fault in ("hang", "error"):
                for others in others_list:
                    rows.append(harness.fault_round(block, fault, others, one_job_ms))
                    r = rows[-1]
                    print(f"{block:<6} {fault:<6} others {others}: faulty saw {len(r.faulty_errors)} "
                          f"error(s), recovered {r.recovered}; others {r.other_jobs} jobs, "
                          f"{len(r.other_errors)} errors, worst {r.worst_ms:.0f} ms (bound {r.bound_ms:.0f})",
                          file=sys.stderr, flush=True)
    return rows


class Harness:
    """The device side of a campaign: an in-process platform, or a daemon serving a directory."""

    def __init__(self, port_kind: str, tdr_ms: int) -> None:
        from pydla.platform import Platform

        self.kind, self.tdr_ms = port_kind, tdr_ms
        self._one_job: dict[str, float] = {}
        self.tmp = tempfile.TemporaryDirectory()
        self.server: Any = None
        if port_kind == "inprocess":
            from pydla.portability.inprocess import InProcessPort

            self.platform = Platform("full", mode="threaded", tdr_ms=tdr_ms)
            self.port: NvDlaPort = InProcessPort(platform=self.platform)
            self.devices = [self.platform.probe(0).device]
        else:
            from pydla.linux.daemon import KmdDaemon

            self.mnt = Path(self.tmp.name) / "mnt"
            self.mnt.mkdir()
            self.daemon = KmdDaemon("full", tdr_ms=tdr_ms)
            self.server = self.daemon.serve(self.mnt)
            self.devices = self.daemon.devices

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.kind == "inprocess":
            self.port.close()  # type: ignore[attr-defined]
            self.platform.close()
        else:
            from pydla.linux import unmount

            self.server.stop(timeout=5.0)
            self.daemon.close()
            unmount(str(self.mnt))
        self.tmp.cleanup()

    def one_job_ms(self, block: str) -> float:
        """How long one job of ``block``'s task takes here without faults (the p90 of a second's
        worth, alone on the device: a loaded 2-core machine makes single jobs vary)."""
        if block not in self._one_job:
            lat = sorted(self._innocents(block, 1, seconds=1.0)[0].latencies_ms)
            self._one_job[block] = lat[int(0.9 * (len(lat) - 1))]
        return self._one_job[block]

    def _innocents(self, block: str, n: int, seconds: float | None = None,
                   stop: threading.Event | None = None) -> list[LoopResult]:
        if self.kind == "inprocess":
            results: list[LoopResult] = [LoopResult() for _ in range(n)]

            def work(i: int) -> None:
                results[i] = innocent_loop(self.port, block, i, stop, seconds)

            threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            self._threads = threads
            if seconds is not None:
                for t in threads:
                    t.join()
            self._results = results
            return results
        procs = [subprocess.Popen([sys.executable, __file__, "_client", "--mount", str(self.mnt),
                                   "--block", block, "--seed", str(i)] +
                                  (["--seconds", str(seconds)] if seconds is not None else []),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for i in range(n)]
        self._procs = procs
        if seconds is not None:
            return [self._collect(p) for p in procs]
        for p in procs:  # each says when it is running
            assert p.stdout is not None and p.stdout.readline().strip() == "running"
        return []

    @staticmethod
    def _collect(p: subprocess.Popen[str]) -> LoopResult:
        out, _ = p.communicate("stop\n", timeout=300)
        data = json.loads(out.strip().splitlines()[-1])
        return LoopResult(data["jobs"], data["errors"], data["latencies_ms"])

    def _stop_innocents(self, stop: threading.Event) -> list[LoopResult]:
        stop.set()
        if self.kind == "inprocess":
            for t in self._threads:
                t.join(timeout=60)
            return self._results
        return [self._collect(p) for p in self._procs]

    def fault_round(self, block: str, fault: str, others: int, one_job_ms: float) -> FaultRow:
        stop = threading.Event()
        self._innocents(innocent_block(block), others, stop=stop)
        time.sleep(0.2)
        faulty = PortClient(self.port) if self.kind == "inprocess" else None
        errors: list[str] = []
        recovered = False
        try:
            if faulty is not None:
                loaded, _ = faulty.load(block, 99)
                for _ in range(2):
                    self._inject(block, fault)
                    try:
                        faulty.run(loaded)
                    except DlaError as e:
                        errors.append(str(e))
                faulty.run(loaded)
                recovered = True
            else:
                errors, recovered = self._faulty_process(block, fault)
        finally:
            if faulty is not None:
                faulty.close()
            time.sleep(0.2)
            results = self._stop_innocents(stop)
        lat = [x for r in results for x in r.latencies_ms]
        return FaultRow(block, fault, others, errors, recovered, sum(r.jobs for r in results),
                        [e for r in results for e in r.errors], max(lat) if lat else float("nan"),
                        self.tdr_ms + one_job_ms)

    def _inject(self, block: str, fault: str) -> None:
        device = self.devices[0]
        if fault == "hang":
            device.inject_hang(block)
        else:
            device.inject_error(block)

    def _faulty_process(self, block: str, fault: str) -> tuple[list[str], bool]:
        p = subprocess.Popen([sys.executable, __file__, "_faulty", "--mount", str(self.mnt),
                              "--block", block], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdin is not None and p.stdout is not None
        errors = []
        assert p.stdout.readline().strip() == "ready"
        for _ in range(2):
            self._inject(block, fault)
            p.stdin.write("run\n")
            p.stdin.flush()
            line = p.stdout.readline().strip()
            if line != "ok":
                errors.append(line)
        p.stdin.write("run\n")
        p.stdin.flush()
        recovered = p.stdout.readline().strip() == "ok"
        p.communicate("quit\n", timeout=60)
        return errors, recovered


# -- the soak -----------------------------------------------------------------------------------------


def soak(clients: int, submits: int, kill_every_s: float, seed: int, chunk: int = 1000) -> int:
    from pydla.linux import unmount
    from pydla.linux.daemon import KmdDaemon

    rng = random.Random(seed)
    tmp = tempfile.TemporaryDirectory()
    mnt = Path(tmp.name) / "mnt"
    mnt.mkdir()
    daemon = KmdDaemon("full")
    server = daemon.serve(mnt)
    samples: list[tuple[float, int, int, int]] = []
    done = wrong = killed = 0
    start = time.monotonic()
    try:
        def spawn(i: int, left: int) -> subprocess.Popen[str]:
            # A client process runs a chunk of its slot's jobs and exits; the next one goes on. A
            # kill loses the chunk in flight (it is run again), so each slot finishes in time.
            return subprocess.Popen([sys.executable, __file__, "_client", "--mount", str(mnt),
                                     "--block", "PDP", "--seed", str(i), "--limit", str(min(left, chunk))],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        left = [submits] * clients
        procs = {i: spawn(i, left[i]) for i in range(clients)}
        next_kill = time.monotonic() + kill_every_s
        while procs:
            time.sleep(0.25)
            samples.append((time.monotonic() - start, _fd_count(), _rss_kib(), done))
            for i, p in list(procs.items()):
                if p.poll() is not None:
                    out = p.stdout.read() if p.stdout else ""
                    lines = out.strip().splitlines()
                    if p.returncode == 0 and lines and lines[-1].startswith("{"):
                        data = json.loads(lines[-1])
                        done += data["jobs"]
                        left[i] -= data["jobs"]
                        wrong += sum("wrong output" in e for e in data["errors"])
                    del procs[i]
                    if left[i] > 0:
                        procs[i] = spawn(i, left[i])
            if time.monotonic() >= next_kill and procs:
                victim = rng.choice(list(procs))
                p = procs.pop(victim)
                p.kill()  # mid-submit or mid-wait, as it comes
                p.wait()
                killed += 1
                # what it finished before it died is unknown: it starts over (its remaining count)
                procs[victim] = spawn(victim, left[victim])
                next_kill = time.monotonic() + kill_every_s
    finally:
        server.stop(timeout=5.0)
        daemon.close()
        unmount(str(mnt))
        tmp.cleanup()
    elapsed = time.monotonic() - start
    print(f"soak: {clients} clients x {submits} submits: {done} checked jobs in {elapsed:.0f} s "
          f"({done / elapsed:.0f}/s), {wrong} wrong outputs, {killed} clients killed")
    print(f"{'time s':>8} {'jobs':>8} {'fds':>6} {'RSS MiB':>8}")
    step = max(1, len(samples) // 12)
    for t, fds, rss, n in samples[::step] + samples[-1:]:
        print(f"{t:>8.1f} {n:>8} {fds:>6} {rss / 1024:>8.1f}")
    warm = samples[len(samples) // 10]
    last = samples[-1]
    print(f"after warm-up -> end: fds {warm[1]} -> {last[1]}, RSS {warm[2] / 1024:.1f} -> "
          f"{last[2] / 1024:.1f} MiB ({(last[2] - warm[2]) / max(warm[2], 1) * 100:+.1f}%)")
    return 1 if wrong else 0


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# -- client processes ---------------------------------------------------------------------------------


def _client_main(args: argparse.Namespace) -> int:
    from pydla.portability.linux import LinuxPort

    port = LinuxPort(args.mount)
    stop = threading.Event()
    if args.seconds is None and args.limit is None:
        print("running", flush=True)
        threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    result = innocent_loop(port, args.block, args.seed, stop, args.seconds, args.limit)
    port.close()
    print(json.dumps({"jobs": result.jobs, "errors": result.errors, "latencies_ms": result.latencies_ms}))
    return 0


def _faulty_main(args: argparse.Namespace) -> int:
    from pydla.portability.linux import LinuxPort

    port = LinuxPort(args.mount)
    client = PortClient(port)
    loaded, _ = client.load(args.block, 99)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        try:
            client.run(loaded)
            print("ok", flush=True)
        except DlaError as e:
            print(str(e).replace("\n", " "), flush=True)
    client.close()
    port.close()
    return 0


def tdr_ms(args: argparse.Namespace) -> int:
    return int(args.tdr_ms)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="what", required=True)
    f = sub.add_parser("fault", help="the fault campaign")
    f.add_argument("--port", choices=("inprocess", "linux"), default="inprocess")
    f.add_argument("--others", type=int, nargs="+", default=[1, 4])
    f.add_argument("--tdr-ms", type=int, default=500)
    f.add_argument("--blocks", nargs="+", default=list(BLOCKS), choices=BLOCKS)
    s = sub.add_parser("soak", help="clients killed and replaced while submitting")
    s.add_argument("--clients", type=int, default=8)
    s.add_argument("--submits", type=int, default=10_000, help="checked jobs per client slot")
    s.add_argument("--kill-every", type=float, default=2.0, metavar="SECONDS")
    s.add_argument("--seed", type=int, default=1)
    for name in ("_client", "_faulty"):
        c = sub.add_parser(name)
        c.add_argument("--mount", required=True)
        c.add_argument("--block", required=True)
        c.add_argument("--seed", type=int, default=0)
        c.add_argument("--seconds", type=float, default=None)
        c.add_argument("--limit", type=int, default=None)
    args = p.parse_args()
    if args.what == "_client":
        return _client_main(args)
    if args.what == "_faulty":
        return _faulty_main(args)
    if args.what == "soak":
        return soak(args.clients, args.submits, args.kill_every, args.seed)
    rows = fault_campaign(args.port, args.others, args.tdr_ms, args.blocks)
    print(f"fault campaign, port {args.port}, TDR {args.tdr_ms} ms")
    # The goal's bound is TDR + one job. With N other contexts each holding a queued job, round-robin
    # serves up to N - 1 of them first: TDR + N jobs is the fair queue's own bound, printed beside it.
    print(f"{'block':<6} {'fault':<6} {'others':>6} {'faulty errors':>13} {'recovered':>9} "
          f"{'other jobs':>10} {'other errors':>12} {'worst ms':>9} {'TDR+1 job':>9} {'worst/it':>8} "
          f"{'TDR+N jobs':>10}")
    bad = 0
    for r in rows:
        ok = not r.other_errors and r.recovered and len(r.faulty_errors) == 2 and r.worst_ms <= r.bound_ms
        job = r.bound_ms - tdr_ms(args)
        bad += not ok
        print(f"{r.block:<6} {r.fault:<6} {r.others:>6} {len(r.faulty_errors):>13} {r.recovered!s:>9} "
              f"{r.other_jobs:>10} {len(r.other_errors):>12} {r.worst_ms:>9.0f} {r.bound_ms:>9.0f} "
              f"{r.worst_ms / r.bound_ms:>8.2f} {tdr_ms(args) + r.others * job:>10.0f}"
              f"{'' if ok else '  <-- short of the goal'}")
    for r in rows:
        for e in r.other_errors[:2]:
            print(f"  {r.block} {r.fault} other: {e}")
    print(f"example diagnosis: {next((r.faulty_errors[0] for r in rows if r.faulty_errors), '-')}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
