"""A run recipe executed as an execution profile says (XRT's runner with a profile): the profile's
bindings create the external buffers, fill them (random bytes, a file wrapping around, or a strided
value), bind them by name (implicit binding: the application binds nothing), and its executions run
the recipe, re-bind and re-fill between iterations, validate buffers against files or other buffers,
and report elapsed time, latency and throughput.

pydla's runner executes one recipe execution at a time: an iteration that does not ``wait`` is still
waited for before the next one starts; ``throughput`` mode keeps ``depth`` runners of the recipe in
flight (each submitted ``iterations`` times), which is how XRT clones its runlist.

Usage::

    with pydla.createRuntime(config="full") as rt:
        with ProfileRun(rt, "recipe.json", "profile.json") as run:
            reports = run.run()                 # one ExecutionReport per execution
            assert all(r.ok for r in reports)
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.loadable.recipe_file import resolve_file
from pydla.umd.profile_spec import Binding, Execution, Init, Profile, Validate, load_profile
from pydla.umd.runner import RecipeSource, Runner, open_recipe


@dataclass
class ExecutionReport:
    """What one execution of the profile did: its figures and every validation that failed."""

    name: str
    runs: int
    elapsed_s: float
    mode: str
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def latency_us(self) -> float:
        return 1e6 * self.elapsed_s / self.runs

    @property
    def throughput(self) -> float:
        return self.runs / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    def line(self) -> str:
        verdict = "validated" if self.ok else f"{len(self.failures)} validation failure(s)"
        return (f"execution '{self.name}' ({self.mode}): {self.runs} run(s) in "
                f"{1e3 * self.elapsed_s:.3f} ms, latency {self.latency_us:.1f} us, "
                f"throughput {self.throughput:.1f}/s; {verdict}")


class ProfileRun:
    """See the module docstring. ``profile`` is a path (its files are found next to it) or a dict
    (files next to the recipe)."""

    def __init__(self, rt: Any, recipe: RecipeSource | str | Path,
                 profile: Profile | str | Path | dict[str, Any], *, allow_unsafe_paths: bool = False,
                 out: Callable[[str], None] = print) -> None:
        self.rt = rt
        self.out = out
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        self.allow_unsafe_paths = allow_unsafe_paths
        self.source = open_recipe(recipe, allow_unsafe_paths=allow_unsafe_paths)
        if isinstance(profile, (str, Path)):
            self.base = Path(profile)
        else:
            self.base = Path(recipe) if isinstance(recipe, (str, Path)) else Path.cwd() / "profile.json"
        self.runners: list[Runner] = []
        self.memory: dict[str, Any] = {}
        self._file_at: dict[str, int] = {}  # where a file-initialised buffer's next fill starts
        self._files: dict[str, bytes] = {}
        try:
            self._check_names()
            self.runners.append(Runner(rt, self.source, allow_unsafe_paths=allow_unsafe_paths))
            for b in self.profile.bindings:
                self.memory[b.name] = self._create(b)
                self._fill(b)
            self._bind_all(self.runners[0], everything=True)
        except BaseException:
            self.close()
            raise

    def _check_names(self) -> None:
        buffers = self.source.recipe.buffers
        for i, b in enumerate(self.profile.bindings):
            buf = buffers.get(b.name)
            if buf is None or buf.type == "internal":
                what = "no buffer of the recipe" if buf is None else "an internal buffer (the runner's own)"
                raise DlaError(NvError.BadParameter,
                               f"{self.profile.source}: /bindings/{i}/name: '{b.name}' is {what}; "
                               f"bindable: {', '.join(self._bindable())}")
            if b.validate is not None and b.validate.name is not None and b.validate.name not in buffers:
                raise DlaError(NvError.BadParameter, f"{self.profile.source}: /bindings/{i}/validate/name: "
                                                     f"'{b.validate.name}' is no buffer of the recipe")

    def _bindable(self) -> list[str]:
        return [n for n, b in self.source.recipe.buffers.items() if b.type != "internal"]

    def _file(self, name: str, what: str) -> bytes:
        """A file the profile names, read once (a reinit or a validation in every iteration reuses it)."""
        data = self._files.get(name)
        if data is None:
            path = resolve_file(self.base, name, what, allow_unsafe_paths=self.allow_unsafe_paths)
            data = self._files[name] = path.read_bytes()
        return data

    def _create(self, b: Binding) -> Any:
        size = b.size
        if size is None:
            assert b.init is not None and b.init.file is not None
            size = len(self._file(b.init.file, f"binding '{b.name}' init file")) - b.init.skip
            if size <= 0:
                raise DlaError(NvError.BadValue, f"{self.profile.source}: binding '{b.name}': its init "
                                                 f"file has no bytes after skip {b.init.skip}: give a size")
        return self.rt.allocateSystemMemory(size)

    def _span(self, b: Binding, part: Init | Validate, size: int) -> tuple[int, int]:
        end = size if part.end is None else part.end
        if end > size:
            raise DlaError(NvError.InvalidSize, f"{self.profile.source}: binding '{b.name}': end {end} is "
                                                f"past the buffer's {size} bytes")
        return part.begin, end

    def _fill(self, b: Binding) -> None:
        init = b.init
        if init is None:
            return
        view = self.memory[b.name].bytes_view()
        begin, end = self._span(b, init, view.size)
        n = end - begin
        if init.kind == "random":
            view[begin:end] = np.frombuffer(os.urandom(n), np.uint8)
        elif init.kind == "stride":
            pattern = np.frombuffer(init.value.to_bytes(init.stride, "little"), np.uint8)
            view[begin:end] = np.resize(pattern, n)
        else:
            assert init.file is not None
            data = np.frombuffer(self._file(init.file, f"binding '{b.name}' init file"), np.uint8)[init.skip:]
            if data.size == 0:
                raise DlaError(NvError.BadValue, f"{self.profile.source}: binding '{b.name}': init file "
                                                 f"'{init.file}' has no bytes after skip {init.skip}")
            start = self._file_at.get(b.name, 0) % data.size  # a reinit continues where the last stopped
            view[begin:end] = np.resize(np.roll(data, -start), n)
            self._file_at[b.name] = start + n

    def _bind_all(self, runner: Runner, everything: bool) -> None:
        for b in self.profile.bindings:
            if everything or b.rebind:
                output = self.source.recipe.buffers[b.name].type == "output"
                (runner.bind_output if output else runner.bind_input)(b.name, self.memory[b.name])

    def _validate(self) -> list[str]:
        failures = []
        for b in self.profile.bindings:
            v = b.validate
            if v is None:
                continue
            got = self.runners[0].memory(b.name).bytes_view()
            begin, end = self._span(b, v, got.size)
            if v.file is not None:
                golden = self._file(v.file, f"binding '{b.name}' validate file")
                want = np.frombuffer(golden, np.uint8)[v.skip:]
                what = f"file '{v.file}'"
            else:
                assert v.name is not None
                want = self.runners[0].memory(v.name).bytes_view()[v.skip:]
                what = f"buffer '{v.name}'"
            want = want[:end - begin]
            mine = got[begin:end]
            if want.size < mine.size:
                failures.append(f"buffer '{b.name}' [{begin}, {end}): {what} has only {want.size} bytes "
                                "to compare")
                continue
            diff = np.flatnonzero(mine != want)
            if diff.size:
                at = int(diff[0])
                failures.append(f"buffer '{b.name}' differs from {what} at byte {begin + at}: "
                                f"{int(mine[at]):#04x} != {int(want[at]):#04x} ({diff.size} of {mine.size} "
                                "bytes differ)")
        return failures

    def run(self) -> list[ExecutionReport]:
        """Every execution of the profile, in order; each verbose one prints its report line."""
        reports = []
        for execution in self.profile.executions:
            throughput = execution.mode == "throughput"
            report = self._throughput(execution) if throughput else self._iterate(execution)
            if execution.validate:
                report.failures += self._validate()
            if execution.verbose:
                self.out(report.line())
            reports.append(report)
        return reports

    def _iterate(self, e: Execution) -> ExecutionReport:
        runner, step = self.runners[0], e.iteration if e.mode is None else None
        failures: list[str] = []
        t0 = time.perf_counter()
        for i in range(e.iterations):
            if step is not None and i:
                if step.bind:
                    self._bind_all(runner, everything=False)
                if step.init:
                    for b in self.profile.bindings:
                        if b.reinit:
                            self._fill(b)
            runner.execute()
            runner.wait()  # also when the iteration does not ask: one execution at a time
            if step is not None and step.sleep_ms:
                time.sleep(step.sleep_ms / 1000)
            if step is not None and step.validate:
                failures += [f"iteration {i}: {f}" for f in self._validate()]
        elapsed = time.perf_counter() - t0
        return ExecutionReport(e.name, e.iterations, elapsed, e.mode or "iterations", failures)

    def _throughput(self, e: Execution) -> ExecutionReport:
        while len(self.runners) < e.depth:
            runner = Runner(self.rt, self.source, allow_unsafe_paths=self.allow_unsafe_paths)
            self.runners.append(runner)
            self._bind_all(runner, everything=True)
        in_flight: collections.deque[Runner] = collections.deque()
        left = {id(r): e.iterations for r in self.runners[:e.depth]}
        t0 = time.perf_counter()
        for r in self.runners[:e.depth]:
            r.execute()
            left[id(r)] -= 1
            in_flight.append(r)
        done = 0
        while in_flight:  # the oldest first; a runner that finished is submitted again at once
            r = in_flight.popleft()
            r.wait()
            done += 1
            if left[id(r)]:
                r.execute()
                left[id(r)] -= 1
                in_flight.append(r)
        return ExecutionReport(e.name, done, time.perf_counter() - t0, "throughput")

    def close(self) -> None:
        """Free the runners and the buffers the profile made."""
        for runner in self.runners:
            runner.close()
        self.runners.clear()
        for mem in self.memory.values():
            self.rt.freeSystemMemory(mem)
        self.memory.clear()

    def __enter__(self) -> ProfileRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
