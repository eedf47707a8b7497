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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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

    @contextmanager
    def span(self, name: str, cat: str, **args: Any) -> Iterator[dict[str, Any]]:
        """Record what the ``with`` body does; the yielded dict takes more args (an error, a count)."""
        start = time.monotonic_ns()
        try:
            yield args
        except BaseException as e:
            args["error"] = f"{type(e).__name__}: {e}"
            raise
        finally:
            self._add(Span(name, cat, start, time.monotonic_ns() - start, threading.get_ident(), args))

    def instant(self, name: str, cat: str, **args: Any) -> None:
        self._add(Span(name, cat, time.monotonic_ns(), 0, threading.get_ident(), args))
