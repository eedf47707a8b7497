"""What the host did, as spans on its threads: the UMD's calls, CPU runs, fence waits.

A :class:`HostTrace` is handed to whatever records (the runner, a Session); recording a span is a
clock read and a list append, and code that has no trace pays one ``is None`` test. Times are the
monotonic clock in ns, the clock the virtual device stamps its trace ring with, so host and device
events fall on one timeline.

Usage::

    host = HostTrace()
    with host.span("submit", "umd", step="k1"):
        ...
    host.spans[0].name                     # "submit"
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

MAX_SPANS = 1_000_000  # beyond this the oldest half is dropped (and counted): a trace stays bounded


@dataclass
class Span:
    """One thing the host did: ``name`` in category ``cat`` on thread ``tid``, from ``start_ns`` for
    ``duration_ns`` (0: an instant), with ``args``."""

    name: str
    cat: str
    start_ns: int
    duration_ns: int
    tid: int
    args: dict[str, Any] = field(default_factory=dict)


class HostTrace:
    """The host's spans (see the module docstring)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.threads: dict[int, str] = {}
        self.dropped = 0
        self._lock = threading.Lock()

    def _add(self, span: Span) -> None:
        with self._lock:
            if len(self.spans) >= MAX_SPANS:
                half = len(self.spans) // 2
                del self.spans[:half]
                self.dropped += half
            self.spans.append(span)
            if span.tid not in self.threads:
                self.threads[span.tid] = threading.current_thread().name

    def span(self, name: str, cat: str, **args: Any) -> _Recording:
        """Record what the ``with`` body does; the dict ``as`` gives takes more args (an error, a count)."""
        return _Recording(self, name, cat, args)

    def instant(self, name: str, cat: str, **args: Any) -> None:
        self._add(Span(name, cat, time.monotonic_ns(), 0, threading.get_ident(), args))


class _Recording:
    """A span being recorded: a plain context manager (a generator-based one costs some 3 us more per
    span, and a traced run records several per step)."""

    __slots__ = ("args", "cat", "name", "start", "trace")

    def __init__(self, trace: HostTrace, name: str, cat: str, args: dict[str, Any]) -> None:
        self.trace, self.name, self.cat, self.args = trace, name, cat, args
        self.start = 0

    def __enter__(self) -> dict[str, Any]:
        self.start = time.monotonic_ns()
        return self.args

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        end = time.monotonic_ns()
        if error is not None:
            self.args["error"] = f"{type(error).__name__}: {error}"
        self.trace._add(Span(self.name, self.cat, self.start, end - self.start, threading.get_ident(),
                             self.args))
