"""A :class:`pydla.Session`'s trace (``trace=``, onnxruntime's profiling): one capture of the device's
ring and the host's spans while the session's network runs; a model with dynamic axes runs one
network per input shapes, so the capture follows the one that runs, and the pieces are joined into
one timeline (one device, one clock) when the trace is written.

Usage (by the session)::

    trace = SessionTrace("out.json")
    trace.follow(loaded.runtime)        # before each run
    result = trace.finish()             # writes out.json; None when nothing ran
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pydla.deviceapi.trace import RingContents
from pydla.errors import file_error
from pydla.trace.capture import Capture, TraceResult
from pydla.trace.host import HostTrace
from pydla.trace.timeline import chrome_trace


class SessionTrace:
    """See the module docstring. ``start_ns`` is when it started (the monotonic clock, as the
    trace's timestamps)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.start_ns = time.monotonic_ns()
        self._capture: Capture | None = None
        self._runtime: Any = None
        self._done: list[TraceResult] = []
        self._result: TraceResult | None = None
        self._written = False

    def follow(self, runtime: Any) -> None:
        """Trace ``runtime`` from now (the capture of another one is finished first: a device has
        one trace ring at a time)."""
        if runtime is self._runtime:
            return
        self.pause()
        self._capture = Capture(runtime)
        self._runtime = runtime

    def follows(self, runtime: Any) -> bool:
        """Whether the capture in progress is of ``runtime``."""
        return self._capture is not None and runtime is self._runtime

    def pause(self) -> None:
        """Finish the capture in progress (before its runtime closes)."""
        capture, self._capture, self._runtime = self._capture, None, None
        if capture is not None:
            self._done.append(capture.finish())

    @property
    def written(self) -> bool:
        """Whether the trace file is written (the trace then records nothing more)."""
        return self._written

    def finish(self) -> TraceResult | None:
        """Stop, write the trace file, and return what it found (None, and a trace without
        events, when no network ran). Idempotent."""
        self.pause()
        if self._written:
            return self._result
        self._written = True
        if not self._done:
            try:
                Path(self.path).write_text(json.dumps(chrome_trace(None, [], [], [])))
            except OSError as e:
                raise file_error(self.path, e, writing=True) from None
            return None
        self._result = merge(self._done)
        self._result.write_chrome(self.path)
        return self._result


def merge(results: list[TraceResult]) -> TraceResult:
    """The captures of one device's networks, one after the other, as one result."""
    if len(results) == 1:
        return results[0]
    host = HostTrace()
    for r in results:
        host.spans.extend(r.host.spans)
        host.threads.update(r.host.threads)
        host.dropped += r.host.dropped
    contents = RingContents(events=[e for r in results for e in r.contents.events],
                            dropped=sum(r.contents.dropped for r in results),
                            lost_bytes=sum(r.contents.lost_bytes for r in results))
    return TraceResult(results[-1].ring, contents, host, [o for r in results for o in r.ops],
                       [u for r in results for u in r.units], [m for r in results for m in r.marks],
                       sum(r.named for r in results), results[0].unit_names, results[0].device_name)
