"""Fuzzing what lies behind a loadable's section digests: mutated loadables whose digests are
rewritten to match, so that each mutation passes the integrity check and reaches the deeper readers
(the recipe, the memory list and tensor descriptors, the control code and its relocations, the
KMD's validation of the descriptors, the SHAVE task lists and kernels, the device itself).

A case takes a valid loadable apart, edits its pieces with some knowledge of their layout (a field
of a descriptor, a tensor or a memory entry set to a boundary value or to another entry's; a JSON
value of the recipe; a weight; a note; a section dropped, swapped or renamed; raw bytes too) and
builds it again with fresh digests: :mod:`pydla.testing.fuzz_loadable_parts`. The oracle
(:class:`RehashBench`) is one in-process device per mode (deterministic or threaded) that lives
across every case:

- the case is loaded and run on a runtime that holds the original loadable: it must end as a
  :class:`~pydla.errors.DlaError` or run (its outputs may differ: a weight may have changed);
- then the device must still be usable: that runtime runs the original again (loaded again when the
  case had replaced it), and a second runtime on the same device, which has held the original since
  the start, runs it too; both must give the reference outputs bit for bit (computed before, on a
  device of its own). Anything else is a :class:`~pydla.testing.fuzz.DeviceUnusable` finding, and
  the next case gets a new device.

The device's memory is capped (:data:`MEMORY_BYTES`) so that a buffer size set to a boundary value is
refused rather than allocated on a shared machine.

Usage::

    target = rehashed_target(blob, mode="threaded")      # a pydla.testing.fuzz Target
    report = run_campaign([target], cases=20_000, seed=1)
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.testing.fuzz import DeviceUnusable, Target, mutate
from pydla.testing.fuzz_loadable_parts import Layouts, build_loadable, mutate_parts, split_loadable

MEMORY_BYTES = 256 << 20
# The driver's default hang detection: a case that hangs is rare (none in 1,000 deterministic cases),
# and with 500 ms a device thread of a niced campaign starved on a loaded machine (load 15) once
# looked hung (not reproduced alone).
TDR_MS = 2_000
MODES = ("deterministic", "threaded")


# -- the oracle ----------------------------------------------------------------------------------------

class RehashBench:
    """One in-process device in ``mode`` with its memory capped; a runtime that loads each case while
    holding the original loadable, and a witness runtime on the same device that holds the original
    throughout. Close it (or use ``with``)."""

    def __init__(self, original: bytes, *, mode: str = "deterministic", tdr_ms: int = TDR_MS,
                 memory_bytes: int = MEMORY_BYTES) -> None:
        from pydla import createRuntime  # (the public name: the composition root moves it)
        from pydla.platform import Platform
        from pydla.portability.inprocess import InProcessPort
        from pydla.session import Session
        from pydla.target.config import load_config

        self.original = original
        self.mode = mode
        self.timeout_ms = 4 * tdr_ms
        with Session(original) as reference:  # a device of its own
            rng = np.random.default_rng(0)
            self.feeds = [rng.standard_normal(t.sizes).astype(t.dtype) for t in reference.inputs]
            self.expected = [v.tobytes() for v in reference.run(
                dict(zip((t.name for t in reference.inputs), self.feeds, strict=True))).values()]
        config = dataclasses.replace(load_config("full"), memory_bytes=memory_bytes)
        self.port = InProcessPort(platform=Platform(config, mode=mode, default_timeout_ms=self.timeout_ms,
                                                    tdr_ms=tdr_ms))
        self.runtime = createRuntime(self.port, timeout_ms=self.timeout_ms)
        self.witness = createRuntime(self.port, timeout_ms=self.timeout_ms)
        self._mems: dict[int, list[Any]] = {}
        for rt in (self.witness, self.runtime):
            self._load_original(rt)
        self.check_usable("nothing")

    def _load_original(self, rt: Any) -> None:
        """Load the original on ``rt`` and bind it to the runtime's own memory, with the feeds."""
        rt.load(self.original, name="the original loadable")
        if id(rt) not in self._mems:
            sizes = [rt.getInputTensorDesc(i).size for i in range(rt.getNumInputTensors())]
            sizes += [rt.getOutputTensorDesc(i).size for i in range(rt.getNumOutputTensors())]
            self._mems[id(rt)] = [rt.allocateSystemMemory(size) for size in sizes]
        mems = self._mems[id(rt)]
        for i, feed in enumerate(self.feeds):
            rt.bindInputTensor(i, mems[i])
            mems[i].array(np.uint8)[:feed.nbytes] = feed.view(np.uint8).reshape(-1)
        for i in range(len(self.expected)):
            rt.bindOutputTensor(i, mems[len(self.feeds) + i])
        if rt is self.runtime:
            self._held = rt.loadable  # a refused load leaves it loaded; a case that loads replaces it

    def run_case(self, data: bytes) -> None:
        """Load and run ``data`` on the case's runtime: a DlaError when it is refused or fails. The
        case is then unloaded and its memory freed (DeviceUnusable when that fails)."""
        rt = self.runtime
        rt.load(data, name="fuzzed loadable")  # refused: the original stays loaded
        mems: list[Any] = []
        try:
            for i in range(rt.getNumInputTensors()):
                mems.append(rt.allocateSystemMemory(rt.getInputTensorDesc(i).size))
                rt.bindInputTensor(i, mems[-1])
                feed = self.feeds[i % len(self.feeds)].view(np.uint8).reshape(-1)
                view = mems[-1].array(np.uint8)
                n = min(len(view), len(feed))
                view[:n] = feed[:n]
            for i in range(rt.getNumOutputTensors()):
                mems.append(rt.allocateSystemMemory(rt.getOutputTensorDesc(i).size))
                rt.bindOutputTensor(i, mems[-1])
            rt.submit()
        finally:
            self._settle(mems)

    def _settle(self, mems: list[Any]) -> None:
        """Unload the case and free its memory, waiting while a job still uses it (Busy) up to the
        runtime's timeout: a device that keeps it longer is not usable."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        pending = [self.runtime.unload, *(lambda m=m: self.runtime.freeSystemMemory(m) for m in mems)]
        while pending:
            try:
                pending[0]()
                pending.pop(0)
            except DlaError as e:
                if e.code != NvError.Busy or time.monotonic() > deadline:
                    what = "unloading" if len(pending) > len(mems) else "freeing its memory"
                    raise DeviceUnusable(f"after the case, {what} failed: {e.message}") from None
                time.sleep(0.005)

    def check_usable(self, after: str = "the case") -> None:
        """The original loadable on both runtimes, bit for bit: DeviceUnusable otherwise."""
        for rt, who in ((self.runtime, "the case's runtime"), (self.witness, "another context")):
            try:
                if rt is self.runtime and rt.loadable is not self._held:
                    self._load_original(rt)
                rt.submit()
            except DlaError as e:
                raise DeviceUnusable(f"after {after}, the original loadable fails on {who}: "
                                     f"{e.message} (load average {os.getloadavg()[0]:.1f})") from None
            mems = self._mems[id(rt)][len(self.feeds):]
            for i, (mem, want) in enumerate(zip(mems, self.expected, strict=True)):
                if bytes(mem.array(np.uint8)[:len(want)]) != want:
                    raise DeviceUnusable(f"after {after}, the original loadable's output {i} differs from "
                                         f"the reference on {who}")

    def close(self) -> None:
        for rt in (self.runtime, self.witness):
            rt.close(cancel=True)
        self.port.close()

    def __enter__(self) -> RehashBench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rehashed_target(blob: bytes, *, mode: str = "deterministic") -> Target:
    """The fuzz target ``rehashed-<mode>``: ``blob`` (a valid loadable) mutated and rehashed; each
    case is refused with a DlaError or runs, and then the device must run ``blob`` right
    (DeviceUnusable otherwise, and the next case gets a new device)."""
    if mode not in MODES:
        raise DlaError(NvError.BadParameter,
                       f"rehashed target: mode {mode!r}: choose from {', '.join(MODES)}")
    parts = split_loadable(blob)
    layouts = Layouts.of(parts)
    held: dict[str, RehashBench] = {}

    def bench() -> RehashBench:
        if "bench" not in held:
            held["bench"] = RehashBench(blob, mode=mode)
        return held["bench"]

    def mutator(rng: random.Random, seed: bytes) -> bytes:
        try:
            return build_loadable(mutate_parts(rng, parts, layouts))
        except DlaError:  # the ELF writer refused the pieces (an alignment, a name): a byte edit instead
            return mutate(rng, seed)

    def check(data: bytes) -> None:
        current = bench()
        try:
            try:
                current.run_case(data)
            except DlaError as e:
                current.check_usable(f"a case refused with '{e.message[:200]}'")
                raise
            current.check_usable("a case that ran")
        except DlaError:
            raise
        except BaseException:  # a finding, or a hang (the device may be wedged): a new device next
            held.pop("bench", None)
            raise

    return Target(f"rehashed-{mode}", [blob], check, mutator=mutator)


__all__ = ["MEMORY_BYTES", "RehashBench", "rehashed_target"]
