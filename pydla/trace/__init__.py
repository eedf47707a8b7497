"""Tracing: what the device did (its trace ring) and what the host did (spans), as one timeline.

- :mod:`pydla.trace.host`: the host's spans (UMD calls, CPU runs, fence waits);
- :mod:`pydla.trace.timeline`: device events paired and named, and the Perfetto / Chrome trace JSON;
- :mod:`pydla.trace.profile`: the per-operation profile table;
- :mod:`pydla.trace.capture`: all of it for one runtime (what ``Session(trace=...)`` and
  ``pydla run --trace / --profile`` use).

Usage::

    with pydla.Session("model.dla", trace="out.json") as s:   # written when the session closes
        s.run({"x": x})
"""

from pydla.trace.capture import Capture, TraceResult

__all__ = ["Capture", "TraceResult"]
