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
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError

INTERESTING_32 = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF)
INTERESTING_64 = (1 << 63, (1 << 64) - 1, 1 << 40)
HOSTILE_JSON: tuple[Any, ...] = (
    None, True, -1, 0, 2**31, 2**64, -(2**63), 1e308, 3.5, "", "x" * 10_000, "../../etc/passwd", "/abs",
    [], {}, [[[]]], {"a": {"b": {}}}, "1.0.0", "7.0.0", "\u0000", "internal:")


class SilentDifference(Exception):
    """A corrupted input was accepted and gave another answer than the original."""


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
    kind: str  # "exception", "hang" or "silent"
    detail: str
    data: bytes = field(repr=False)


@dataclass
class Report:
    cases: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)  # DlaError: the reader said what was wrong
    accepted: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def summary(self) -> str:
        heads = ("inputs", "inputs/s", "refused", "accepted", "findings")
        lines = [f"{'target':<16} " + " ".join(f"{h:>9}" for h in heads)]
        for name, n in self.cases.items():
            found = sum(1 for f in self.findings if f.target == name)
            rate = n / self.seconds[name] if self.seconds[name] else 0.0
            lines.append(f"{name:<16} {n:>9} {rate:>9.0f} {self.refused[name]:>9} {self.accepted[name]:>9} "
                         f"{found:>9}")
        kinds: dict[tuple[str, str], int] = {}
        for f in self.findings:
            key = (f.kind, f.detail.splitlines()[0][:160])
            kinds[key] = kinds.get(key, 0) + 1
        for (kind, detail), n in sorted(kinds.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {n} x {kind}: {detail}")
        return "\n".join(lines)


# -- mutators -------------------------------------------------------------------------------------


def mutate(rng: random.Random, data: bytes, *, elf: bool = False, as_json: bool = False) -> bytes:
    """One to four random edits of ``data``."""
    if as_json and rng.random() < 0.5:
        edited = _mutate_json(rng, data)
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


def _mutate_json(rng: random.Random, data: bytes) -> bytes | None:
    """Replace one value somewhere in a JSON document with a hostile one."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    slots: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k in node:
                slots.append((node, k))
                walk(node[k])
        elif isinstance(node, list):
            for i in range(len(node)):
                slots.append((node, i))
                walk(node[i])

    walk(doc)
    if not slots:
        return None
    parent, key = rng.choice(slots)
    hostile: Any = rng.choice(HOSTILE_JSON)
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
    hostile client writes into its submission ring (Linux), NVDLA Loadables and ONNX graphs."""
    makers: dict[str, Callable[[], Target]] = {
        "ioctl": ioctl_target,
        "loadable": lambda: loadable_target(loadable),
        "control-code": lambda: control_code_target(loadable),
        "recipe": lambda: recipe_target(loadable),
        "kernel-elf": kernel_elf_target,
        "device-api": device_api_target,
        "trace-ring": trace_ring_target,
        "device-config": device_config_target,
        "mailbox": _mailbox_target,
        "nvdla-loadable": _nvdla_loadable_target,
        "shave-kernel": _shave_kernel_target,
        "onnx": _onnx_target,
        "ring": _ring_target,
    }
    names = list(makers) if only is None else list(only)
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise DlaError(NvError.BadParameter, f"fuzz targets {unknown}: choose from {', '.join(makers)}")
    return [makers[n]() for n in names]


def _nvdla_loadable_target() -> Target:
    from pydla.testing.fuzz_nvdla import nvdla_loadable_target

    return nvdla_loadable_target()


def _onnx_target() -> Target:
    from pydla.testing.fuzz_onnx import onnx_target  # ONNX graphs (needs the onnx extra)

    return onnx_target()


def _mailbox_target() -> Target:
    from pydla.testing.mailbox import mailbox_target

    return mailbox_target()


def _shave_kernel_target() -> Target:
    from pydla.testing.fuzz_shave import shave_kernel_target

    return shave_kernel_target()


def _ring_target() -> Target:
    from pydla.testing.fuzz_ring import ring_target  # the Linux daemon's submission rings

    return ring_target()


def loadable_target(blob: bytes) -> Target:
    """A loadable is parsed; when that passes it is loaded and run in-process, and its outputs must
    equal the original's bit for bit."""
    from pydla.loadable.container import Loadable
    from pydla.session import Session

    with Session(blob) as sess:
        rng = np.random.default_rng(0)
        feeds = {t.name: _sample(rng, t.sizes, t.dtype) for t in sess.inputs}
        expected = sess.run(feeds)

    def check(data: bytes) -> None:
        Loadable(data)  # cheap: most corruptions end here
        with Session(data) as s:
            got = s.run(feeds)
        for name, want in expected.items():
            value = got.get(name)
            if value is None or value.shape != want.shape or value.dtype != want.dtype \
                    or value.tobytes() != want.tobytes():
                raise SilentDifference(f"output {name!r} differs from the original loadable's")

    return Target("loadable", [blob], check, elf=True)


def _sample(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    if np.dtype(dtype).kind in "iub":
        return rng.integers(0, 2 if np.dtype(dtype).kind == "b" else 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def control_code_target(blob: bytes) -> Target:
    from pydla.elf.controlcode import ControlCode
    from pydla.elf.reader import ElfReader
    from pydla.loadable.container import CTRL

    elf = ElfReader(blob)
    seeds = [bytes(elf.section(n)) for n in elf.section_names if n.startswith(CTRL)]
    return Target("control-code", seeds, lambda data: _touch(ControlCode(data)), elf=True)


def _touch(obj: Any) -> None:
    """Read what a consumer would read of a parsed object (lazy readers fail late)."""
    for name in ("patches", "arguments", "sections"):
        getattr(obj, name, None)


def recipe_target(blob: bytes) -> Target:
    from pydla.elf.reader import ElfReader
    from pydla.loadable.container import RECIPE
    from pydla.loadable.recipe import loads, parse_recipe

    seed = bytes(ElfReader(blob).section(RECIPE))
    return Target("recipe", [seed], lambda data: _touch(parse_recipe(loads(data, "recipe"))), json=True)


def kernel_elf_target() -> Target:
    from pydla.elf.kernel import KernelElf
    from pydla.elf.writer import STT_FUNC, ElfWriter

    w = ElfWriter()
    w.add_section(".text", bytes(range(64)), align=4)
    w.add_section(".rodata", b"\x01\x02\x03\x04" * 8, align=4)
    w.add_symbol("entry", ".text", value=0, size=64, sym_type=STT_FUNC)
    return Target("kernel-elf", [w.build()], lambda data: _touch(KernelElf(data)), elf=True)


def device_api_target() -> Target:
    from pydla.deviceapi.generated import device_api
    from pydla.deviceapi.runtime import decode

    seeds = [bytes(cls.new()) for cls in device_api.API.messages.values()]

    def check(data: bytes) -> None:
        msg = decode(device_api.API, bytearray(data))
        msg.to_dict()

    return Target("device-api", seeds, check)


def trace_ring_target() -> Target:
    from pydla.deviceapi.generated import trace
    from pydla.deviceapi.trace import TraceRing, read_ring

    ring = TraceRing.create(1024, trace.API)
    for i, cls in enumerate(trace.API.trace_events.values()):
        ring.emit(cls(), timestamp_ns=100 + i)
    seed = bytes(ring.buffer)

    def check(data: bytes) -> None:
        contents = read_ring(bytearray(data), trace.API)
        for event in contents.events:
            str(event)

    return Target("trace-ring", [seed], check)


def device_config_target() -> Target:
    from importlib import resources

    from pydla.target.config import parse_config

    folder = resources.files("pydla.target").joinpath("configs")
    seeds = [folder.joinpath(f"{n}.json").read_bytes() for n in ("full", "small")]

    def check(data: bytes) -> None:
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise DlaError(NvError.BadValue, f"device config: not JSON: {e}") from None
        parse_config(raw, "fuzzed config")

    return Target("device-config", seeds, check, json=True)




def ioctl_target() -> Target:
    """The KMD daemon's ioctl handler (what a client process sends through its device file), called
    in this process with mutated arguments of every command: its answer is an errno (FuseError), or
    success. An input is the command number (4 bytes) and the argument struct's bytes; the seeds are
    valid calls on a client that holds a buffer, a sync object and a prepared task, named in the
    seeds by marker values that each case replaces with the real handles (a mutated marker is then
    a handle nobody holds). Linux only."""
    import ctypes
    import os

    from pydla.deviceapi.generated import dla_uapi as U
    from pydla.linux.daemon import KmdDaemon
    from pydla.linux.fuse_context import FuseError, RequestContext
    from pydla.uapi.ioctl import COMMANDS
    from pydla.uapi.shm import SharedBuffer

    bo_mark, sync_mark = 0x5A5A0001, 0x5A5A0002
    daemon = KmdDaemon("full", mode="deterministic", max_wait_ms=5)
    state: dict[str, Any] = {}
    shm = SharedBuffer(4096)
    addresses = (U.dla_address_t * 2)()
    fences = (U.dla_fence_t * 1)()
    handshake = U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                                  layout_hash64=U.LAYOUT_HASH64)

    def call(nr: int, args: Any) -> Any:
        _, out = daemon.ioctl(state["client"], RequestContext(1, 0, 2, 0, 0, os.getpid()), COMMANDS[nr],
                              bytes(args))
        return type(args).from_buffer_copy(out)

    def fresh_client() -> None:
        if "client" in state:
            daemon.release(state["client"])
        state["client"] = daemon.open_client(0, os.getpid())
        call(U.dla_ioctl_e.HANDSHAKE, handshake)
        bo = call(U.dla_ioctl_e.BO_CREATE, U.dla_bo_create_t(size=4096, fd=shm.fd)).handle
        sync = call(U.dla_ioctl_e.SYNC_CREATE, U.dla_sync_create_t(initial=0)).sync
        # the memory SUBMIT and PREPARE read through the caller's pid names the real handles
        addresses[0], addresses[1] = U.dla_address_t(handle=bo), U.dla_address_t(handle=bo, offset=64)
        fences[0] = U.dla_fence_t(sync=sync, value=1)
        state["bo"], state["sync"] = bo, sync
        state["marks"] = {bo_mark.to_bytes(4, "little"): bo.to_bytes(4, "little"),
                          sync_mark.to_bytes(4, "little"): sync.to_bytes(4, "little")}
        state["age"] = 0

    fresh_client()
    fence = U.dla_fence_t(sync=sync_mark, value=1)
    calls: list[tuple[int, Any]] = [
        (U.dla_ioctl_e.HANDSHAKE, handshake),
        (U.dla_ioctl_e.GET_PARAM, U.dla_get_param_t(param=int(U.dla_param_e.NUM_DEVICES))),
        (U.dla_ioctl_e.BO_INFO, U.dla_bo_info_t(handle=bo_mark)),
        (U.dla_ioctl_e.BO_DESTROY, U.dla_bo_destroy_t(handle=bo_mark)),
        (U.dla_ioctl_e.SUBMIT, U.dla_submit_t(addresses=ctypes.addressof(addresses), num_addresses=2,
                                              post_fences=ctypes.addressof(fences), num_post_fences=1,
                                              timeout_ms=50)),
        (U.dla_ioctl_e.WAIT, U.dla_wait_t(fence=fence, timeout_ms=1)),
        (U.dla_ioctl_e.SYNC_SIGNAL, U.dla_sync_signal_t(fence=fence)),
        (U.dla_ioctl_e.SYNC_QUERY, U.dla_sync_query_t(sync=sync_mark)),
        (U.dla_ioctl_e.SYNC_DESTROY, U.dla_sync_destroy_t(sync=sync_mark)),
        (U.dla_ioctl_e.PREPARE, U.dla_prepare_t(addresses=ctypes.addressof(addresses), num_addresses=2)),
        (U.dla_ioctl_e.SUBMIT_PREPARED, U.dla_submit_prepared_t(prepared=1, timeout_ms=50)),
        (U.dla_ioctl_e.RELEASE_PREPARED, U.dla_release_prepared_t(prepared=1)),
        (U.dla_ioctl_e.RING_SETUP, U.dla_ring_setup_t()),
    ]
    seeds = [int(nr).to_bytes(4, "little") + bytes(args) for nr, args in calls]

    def check(data: bytes) -> None:
        state["age"] += 1
        if state["age"] >= 100 or not state["client"].compatible:
            fresh_client()  # what mutated calls made or broke goes with the old client
        nr = int.from_bytes(data[:4].ljust(4, b"\0"), "little")
        payload = data[4:]
        for mark, real in state["marks"].items():
            payload = payload.replace(mark, real)
        try:
            daemon.ioctl(state["client"], RequestContext(1, 0, 2, 0, 0, os.getpid()), COMMANDS.get(nr, nr),
                         payload)
        except FuseError as e:  # the daemon's answer: an errno, with the reason in LAST_ERROR
            if nr in (U.dla_ioctl_e.BO_DESTROY, U.dla_ioctl_e.SYNC_DESTROY):
                state["age"] = 100
            raise DlaError(NvError.BadParameter, f"errno {e.errno}: {e.message}") from None
        if nr in (U.dla_ioctl_e.BO_DESTROY, U.dla_ioctl_e.SYNC_DESTROY):
            state["age"] = 100  # the next case starts with a buffer and a sync again

    return Target("ioctl", seeds, check)
