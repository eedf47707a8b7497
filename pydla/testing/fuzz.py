"""Fuzzing pydla's readers: seeded mutators over every format that crosses a trust boundary.

A :class:`Target` is a reader and valid inputs to start from. The campaign mutates an input (byte
and bit flips, boundary values, chunks cut, copied or inserted, a truncation; for ELF files also the
section header table), hands it to the reader and records a :class:`Finding` when the reader

- raises anything but :class:`~pydla.errors.DlaError` (an IndexError, a library's own exception...);
- takes longer than ``case_timeout_s`` (a hang);
- accepts a corrupted input and answers differently from the original (``silent``): a loadable
  that loads and runs must give the original's outputs, bit for bit.

The same seed gives the same inputs, so a finding is reproduced with its target, seed and case
number; :attr:`Finding.data` holds the input itself.

Usage::

    targets = standard_targets(loadable_blob)
    report = run_campaign(targets, cases=10_000, seed=1)
    print(report.summary()); assert not report.findings
"""

from __future__ import annotations

import json
import random
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydla.errors import DlaError, NvError

INTERESTING_32 = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF)
INTERESTING_64 = (1 << 63, (1 << 64) - 1, 1 << 40)
HOSTILE_JSON: tuple[Any, ...] = (
    None, True, -1, 0, 2**31, 2**64, -(2**63), 1e308, 3.5, "", "x" * 10_000, "../../etc/passwd", "/abs",
    [], {}, [[[]]], {"a": {"b": {}}}, "1.0.0", "7.0.0", "\u0000", "internal:")


class SilentDifference(Exception):
    """A corrupted input was accepted and gave another answer than the original."""


class DeviceUnusable(Exception):
    """After a case, the device (or the runtime the case ran on) no longer runs a valid input
    right: the case left it broken."""


class CaseTimeout(BaseException):
    """Raised in the reader by the campaign's alarm: the case ran past its time limit."""


@dataclass
class Target:
    """A reader under test: ``check(data)`` reads ``data`` (and, for a loadable, runs it and compares
    with the original); ``seeds`` are valid inputs; ``elf`` says they are ELF files."""

    name: str
    seeds: list[bytes]
    check: Callable[[bytes], None]
    elf: bool = False
    json: bool = False
    mutator: Callable[[random.Random, bytes], bytes] | None = None  # instead of mutate()


@dataclass
class Finding:
    target: str
    case: int
    kind: str  # "exception", "hang", "silent" or "unusable"
    detail: str
    data: bytes = field(repr=False)


@dataclass
class Report:
    cases: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)  # DlaError: the reader said what was wrong
    accepted: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def merge(self, other: Report) -> None:
        """Add ``other``'s counts, times and findings (another part of the same campaign)."""
        for name, n in other.cases.items():
            self.cases[name] = self.cases.get(name, 0) + n
            self.refused[name] = self.refused.get(name, 0) + other.refused[name]
            self.accepted[name] = self.accepted.get(name, 0) + other.accepted[name]
            self.seconds[name] = self.seconds.get(name, 0.0) + other.seconds[name]
        self.findings.extend(other.findings)

    def summary(self) -> str:
        """A table: per target its inputs, refused (DlaError), accepted, seconds, inputs/s and
        findings, and their total; then each kind of finding with its count."""
        heads = ("inputs", "refused", "accepted", "seconds", "inputs/s", "findings")
        width = max([16, *map(len, self.cases)])
        lines = [f"{'target':<{width}} " + " ".join(f"{h:>9}" for h in heads)]
        rows = [(name, n, self.refused[name], self.accepted[name], self.seconds[name],
                 sum(1 for f in self.findings if f.target == name)) for name, n in self.cases.items()]
        if len(rows) > 1:
            rows.append(("total", sum(r[1] for r in rows), sum(r[2] for r in rows), sum(r[3] for r in rows),
                         sum(r[4] for r in rows), sum(r[5] for r in rows)))
        for name, n, refused, accepted, seconds, found in rows:
            rate = n / seconds if seconds else 0.0
            lines.append(f"{name:<{width}} {n:>9,} {refused:>9,} {accepted:>9,} {seconds:>9.0f} {rate:>9.0f} "
                         f"{found:>9}")
        kinds: dict[tuple[str, str], int] = {}
        for f in self.findings:  # alike when they differ only in numbers (a task id, an address)
            key = (f.kind, re.sub(r"0x[0-9a-f]+|\d+", "N", f.detail.splitlines()[0])[:200])
            kinds[key] = kinds.get(key, 0) + 1
        for (kind, detail), n in sorted(kinds.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {n} x {kind}: {detail}")
        return "\n".join(lines)


# -- mutators -------------------------------------------------------------------------------------


def mutate(rng: random.Random, data: bytes, *, elf: bool = False, as_json: bool = False) -> bytes:
    """One to four random edits of ``data``."""
    if as_json and rng.random() < 0.5:
        edited = mutate_json(rng, data)
        if edited is not None:
            return edited
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 4))):
        _edit(rng, out, elf)
    return bytes(out)


def _position(rng: random.Random, out: bytearray, elf: bool) -> int:
    if elf and len(out) >= 64 and rng.random() < 0.5:
        shoff = int.from_bytes(out[0x28:0x30], "little")
        shnum = int.from_bytes(out[0x3C:0x3E], "little")
        table = shnum * 64
        if rng.random() < 0.2:
            return rng.randrange(64)  # the ELF header
        if 0 < shoff and shoff + table <= len(out) and table:
            return shoff + rng.randrange(table)  # the section header table
    return rng.randrange(len(out))


def _edit(rng: random.Random, out: bytearray, elf: bool) -> None:
    if not out:
        out.extend(rng.randbytes(rng.randint(1, 16)))
        return
    pos = _position(rng, out, elf)
    op = rng.random()
    if op < 0.3:
        out[pos] = rng.randrange(256)
    elif op < 0.5:
        out[pos] ^= 1 << rng.randrange(8)
    elif op < 0.7:
        value = rng.choice(INTERESTING_32)
        width = 4
        if rng.random() < 0.2:
            value, width = rng.choice(INTERESTING_64), 8
        out[pos:pos + width] = value.to_bytes(width, "little")[:len(out) - pos]
    elif op < 0.8:
        n = rng.randint(1, 64)
        del out[pos:pos + n]
    elif op < 0.9:
        n = rng.randint(1, 64)
        out[pos:pos] = out[pos:pos + n] if rng.random() < 0.5 else rng.randbytes(n)
    else:
        del out[pos:]


def mutate_json(rng: random.Random, data: bytes, *, own_values: bool = False) -> bytes | None:
    """Replace one value somewhere in a JSON document with a hostile one (with ``own_values``: with
    another value of the document itself, a cross-reference gone wrong), or delete or repeat one;
    None when ``data`` is not JSON."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    slots: list[tuple[Any, Any]] = []
    values: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k in node:
                slots.append((node, k))
                walk(node[k])
        elif isinstance(node, list):
            for i in range(len(node)):
                slots.append((node, i))
                walk(node[i])
        else:
            values.append(node)

    walk(doc)
    if not slots:
        return None
    parent, key = rng.choice(slots)
    pool: Any = values if own_values and values else HOSTILE_JSON
    hostile: Any = rng.choice(pool)
    if rng.random() < 0.15 and isinstance(parent, dict):
        del parent[key]
    elif rng.random() < 0.1 and isinstance(parent, list):
        parent.append(parent[key])
    else:
        parent[key] = hostile
    return json.dumps(doc).encode()


# -- the campaign ---------------------------------------------------------------------------------


def run_campaign(targets: Iterable[Target], *, cases: int, seed: int = 0, case_timeout_s: float = 10.0,
                 time_limit_s: float | None = None, progress: Callable[[str, int], None] | None = None,
                 first_case: int = 0) -> Report:
    """``cases`` mutated inputs per target (case numbers ``first_case``...), or fewer when
    ``time_limit_s`` (per target) runs out. A hang is caught with SIGALRM when this runs in the main
    thread (elsewhere it is not caught)."""
    report = Report()
    alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    previous = signal.signal(signal.SIGALRM, _on_alarm) if alarm else None
    try:
        for target in targets:
            _run_target(target, report, cases, seed, case_timeout_s, time_limit_s, alarm, progress,
                        first_case)
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    return report


def _on_alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


def _run_target(target: Target, report: Report, cases: int, seed: int, case_timeout_s: float,
                time_limit_s: float | None, alarm: bool, progress: Callable[[str, int], None] | None,
                first_case: int) -> None:
    name = target.name
    report.cases[name] = report.refused[name] = report.accepted[name] = 0
    start = time.monotonic()
    for case in range(first_case, first_case + cases):
        if time_limit_s is not None and time.monotonic() - start > time_limit_s:
            break
        rng = random.Random(f"{seed}:{name}:{case}")
        seed_data = rng.choice(target.seeds)
        data = target.mutator(rng, seed_data) if target.mutator else mutate(rng, seed_data, elf=target.elf,
                                                                             as_json=target.json)
        try:
            if alarm:
                signal.setitimer(signal.ITIMER_REAL, case_timeout_s)
            try:
                target.check(data)
            finally:
                if alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except DlaError:
            report.refused[name] += 1
        except CaseTimeout:
            report.findings.append(Finding(name, case, "hang", f"no answer within {case_timeout_s} s", data))
        except SilentDifference as e:
            report.findings.append(Finding(name, case, "silent", str(e), data))
        except DeviceUnusable as e:
            report.findings.append(Finding(name, case, "unusable", str(e), data))
        except Exception as e:  # what the campaign is looking for: anything but a DlaError
            where = traceback.extract_tb(e.__traceback__)[-1]
            detail = f"{type(e).__name__} at {where.filename.rsplit('/pydla/', 1)[-1]}:{where.lineno}: {e}"
            report.findings.append(Finding(name, case, "exception", detail, data))
        else:
            report.accepted[name] += 1
        report.cases[name] += 1
        if progress is not None and report.cases[name] % 1000 == 0:
            progress(name, report.cases[name])
    report.seconds[name] = time.monotonic() - start


# -- the standard targets -------------------------------------------------------------------------


def standard_targets(loadable: bytes, *, only: Iterable[str] | None = None) -> list[Target]:
    """Every reader of untrusted input, seeded from ``loadable`` (a valid compiled network) and
    from inputs built here: the loadable (loaded and run against the original's outputs), its
    control-code ELFs, its run recipe, a kernel ELF, every device-API message, the trace ring, a
    device configuration, the KMD daemon's ioctl arguments (Linux), the commands a headed device's
    firmware takes from its mailbox, kernels run on a SHAVE tile (pydla.testing.fuzz_shave), what a
    hostile client writes into its submission ring (Linux), NVDLA Loadables, ONNX graphs, and
    ``loadable`` mutated behind its section digests (rewritten to match) on a device in each mode
    that must stay usable (pydla.testing.fuzz_rehashed)."""
    from pydla.testing import fuzz_readers as r  # the readers' targets (they import the readers)

    makers: dict[str, Callable[[], Target]] = {
        "ioctl": r.ioctl_target,
        "loadable": lambda: r.loadable_target(loadable),
        "control-code": lambda: r.control_code_target(loadable),
        "recipe": lambda: r.recipe_target(loadable),
        "kernel-elf": r.kernel_elf_target,
        "device-api": r.device_api_target,
        "trace-ring": r.trace_ring_target,
        "device-config": r.device_config_target,
        "mailbox": _mailbox_target,
        "nvdla-loadable": _nvdla_loadable_target,
        "nvdla-run": _nvdla_run_target,
        "shave-kernel": _shave_kernel_target,
        "onnx": _onnx_target,
        "ring": _ring_target,
        "rehashed-deterministic": lambda: _rehashed_target(loadable, "deterministic"),
        "rehashed-threaded": lambda: _rehashed_target(loadable, "threaded"),
    }
    names = list(makers) if only is None else list(only)
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise DlaError(NvError.BadParameter, f"fuzz targets {unknown}: choose from {', '.join(makers)}")
    return [makers[n]() for n in names]


def _nvdla_loadable_target() -> Target:
    from pydla.testing.fuzz_nvdla import nvdla_loadable_target

    return nvdla_loadable_target()


def _nvdla_run_target() -> Target:
    from pydla.testing.fuzz_nvdla_run import nvdla_run_target  # through the NVDLA device

    return nvdla_run_target()


def _onnx_target() -> Target:
    from pydla.testing.fuzz_onnx import onnx_target  # ONNX graphs (needs the onnx extra)

    return onnx_target()


def _mailbox_target() -> Target:
    from pydla.testing.mailbox import mailbox_target

    return mailbox_target()


def _shave_kernel_target() -> Target:
    from pydla.testing.fuzz_shave import shave_kernel_target

    return shave_kernel_target()


def _rehashed_target(loadable: bytes, mode: str) -> Target:
    from pydla.testing.fuzz_rehashed import rehashed_target

    return rehashed_target(loadable, mode=mode)


def _ring_target() -> Target:
    from pydla.testing.fuzz_ring import ring_target  # the Linux daemon's submission rings

    return ring_target()
