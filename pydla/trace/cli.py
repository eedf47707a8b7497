"""``pydla trace RING``: a trace ring's events as text, JSON lines, or a Perfetto / Chrome trace.

A ring file is what ``pydla run --trace-ring FILE`` (or ``TraceResult.write_ring``) saved: the bytes
of the device's ring as the driver read them. Malformed rings are refused with the field at fault.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydla.errors import file_error
from pydla.files import check_output


def register(commands: Any) -> None:
    p = commands.add_parser(
        "trace", help="show a device trace ring: text, JSON lines, or a Perfetto timeline",
        description="Decode a trace ring the device wrote (saved by 'pydla run --trace-ring FILE'): every "
                    "event with its time, or a Perfetto / Chrome trace JSON with a track per block and "
                    "compute unit (open it at https://ui.perfetto.dev). Dropped events are counted.")
    p.add_argument("ring", type=Path, metavar="RING", help="a trace ring file")
    p.add_argument("--format", choices=("text", "jsonl", "chrome"), default="text",
                   help="text (default), jsonl (one JSON object per event), or chrome (the trace JSON)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write here instead of stdout")
    p.set_defaults(func=_trace)


def _trace(args: argparse.Namespace) -> int:
    from pydla.deviceapi.generated import trace
    from pydla.deviceapi.trace import decode_ring_file, write_jsonl, write_text
    from pydla.trace.timeline import chrome_trace, device_work

    if args.output is not None:  # before reading: never onto the ring itself
        check_output(args.output, "-o", {"the ring being read": args.ring})
    result = decode_ring_file(args.ring, trace.API)
    if args.format == "chrome":
        ops, units, marks = device_work(result.events)
        out = json.dumps(chrome_trace(None, ops, units, marks, dropped=result.dropped))
    else:
        out = write_jsonl(result.events) if args.format == "jsonl" else write_text(result.events)
    if args.output is not None:
        try:
            args.output.write_text(out)
        except OSError as e:
            raise file_error(args.output, e, flag="-o", writing=True) from None
    else:
        sys.stdout.write(out)
    dropped = f", {result.dropped} older ones dropped (the ring was full)" if result.dropped else ""
    print(f"{len(result.events)} events{dropped}", file=sys.stderr)
    return 0
