"""Decode + dispatch rate of generated device-API messages against plain ``struct.unpack_from``.

Both sides receive the same bytes (a mix of every command of device_api), find the message by id and
call a handler with the decoded fields. pydla checks the header (size, type, id) and returns a typed
record; the anchor unpacks a tuple with a precompiled ``struct.Struct`` and checks nothing.

Run: python bench/bench_deviceapi.py [--n 20000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time

from pydla.deviceapi.generated import device_api as api
from pydla.deviceapi.runtime import Dispatcher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="messages per timed run")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs; the median is reported")
    args = parser.parse_args()

    commands = [cls for cls in api.API.messages.values() if cls.MSG_TYPE.name == "COMMAND"]
    wires = [bytes(cls.new(tag=i)) for i, cls in enumerate(commands)]
    stream = [wires[i % len(wires)] for i in range(args.n)]

    sink: list[object] = []
    dispatcher = Dispatcher(api.API)
    for cls in commands:
        dispatcher.register(cls, sink.append)

    # The anchor: one precompiled struct per id, the header unpacked to find it, no checks.
    formats = {cls.MSG_ID: struct.Struct("<" + "x" * 0 + _format(cls)) for cls in commands}
    header = struct.Struct("<IH")
    handlers = {cls.MSG_ID: sink.append for cls in commands}

    def run_pydla() -> None:
        for wire in stream:
            dispatcher.dispatch(wire)

    def run_struct() -> None:
        for wire in stream:
            _, msg_id = header.unpack_from(wire)
            handlers[msg_id](formats[msg_id].unpack_from(wire))

    results = {}
    for name, fn in (("pydla decode+dispatch", run_pydla), ("struct.unpack_from", run_struct)):
        times = []
        for _ in range(args.repeats):
            sink.clear()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        results[name] = statistics.median(times)
        rate = args.n / results[name]
        print(f"{name:24} {rate / 1e3:9.1f} k msg/s   {results[name] / args.n * 1e6:7.2f} us/msg (median)")
    ratio = results["pydla decode+dispatch"] / results["struct.unpack_from"]
    print(f"ratio pydla / struct: {ratio:.2f}x the time per message")


def _format(cls: type) -> str:
    """A struct format for the message's bytes: the ctypes layout flattened to scalars."""
    import ctypes

    codes = {1: "B", 2: "H", 4: "I", 8: "Q"}

    def flatten(c: type) -> str:
        out = ""
        for entry in c._fields_:  # type: ignore[attr-defined]
            t = entry[1]
            if hasattr(t, "_fields_"):
                out += flatten(t)
            else:
                out += codes[ctypes.sizeof(t)]
        return out

    return flatten(cls)


if __name__ == "__main__":
    main()
