"""The trace JSON is valid Chrome trace-event format (checked against a JSON schema of the format's
event kinds) and its spans nest and order as the runs did."""

from __future__ import annotations

import itertools
from typing import Any

import jsonschema
import numpy as np

import pydla
from pydla.compiler.api import compile_model
from pydla.demo import build_demo_model
from pydla.trace import Capture

# The subset of the Trace Event Format that pydla writes: complete events (X), instants (i) and
# metadata (M), in the JSON object form.
NUMBER = {"type": "number"}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"oneOf": [
            {"type": "object", "required": ["ph", "name", "pid", "tid", "ts", "dur"],
             "properties": {"ph": {"const": "X"}, "name": {"type": "string"}, "cat": {"type": "string"},
                            "pid": {"type": "integer"}, "tid": {"type": "integer"}, "ts": NUMBER,
                            "dur": {"type": "number", "minimum": 0}, "args": {"type": "object"}},
             "additionalProperties": False},
            {"type": "object", "required": ["ph", "name", "pid", "tid", "ts", "s"],
             "properties": {"ph": {"const": "i"}, "s": {"enum": ["g", "p", "t"]}, "name": {"type": "string"},
                            "cat": {"type": "string"}, "pid": {"type": "integer"}, "tid": {"type": "integer"},
                            "ts": NUMBER, "args": {"type": "object"}},
             "additionalProperties": False},
            {"type": "object", "required": ["ph", "name", "pid", "args"],
             "properties": {"ph": {"const": "M"}, "name": {"enum": ["process_name", "thread_name"]},
                            "pid": {"type": "integer"}, "tid": {"type": "integer"},
                            "args": {"type": "object", "required": ["name"],
                                     "properties": {"name": {"type": "string"}}}},
             "additionalProperties": False},
        ]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
    "additionalProperties": False,
}


def test_the_trace_is_chrome_format_and_its_spans_nest() -> None:
    sess = pydla.Session(compile_model(build_demo_model()).blob)
    capture = Capture(sess.runtime)
    x = {t.name: np.ones(t.shape, np.float32) for t in sess.inputs}
    for _ in range(3):
        sess.run(x)
    doc = capture.finish().chrome()
    sess.close()
    jsonschema.validate(doc, SCHEMA)
    host = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    steps = sorted((e for e in host if e["name"] == "npu task0"), key=lambda e: e["ts"])
    assert len(steps) == 3
    for outer in steps:  # each step holds its submit, then its fence wait, in that order
        inner = sorted((e for e in host if e["tid"] == outer["tid"] and e["name"].startswith("NvDla")
                        and outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + 1),
                       key=lambda e: e["ts"])
        assert [e["name"] for e in inner] == ["NvDlaSubmitPrepared", "NvDlaWaitFence"]
        assert inner[0]["ts"] + inner[0]["dur"] <= inner[1]["ts"] + 1
    for a, b in itertools.pairwise(steps):  # the runs follow each other
        assert a["ts"] + a["dur"] <= b["ts"] + 1
    device = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    for track in {e["tid"] for e in device}:  # a block runs one operation at a time
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in device if e["tid"] == track)
        assert all(end <= start + 1 for (_, end), (start, _) in itertools.pairwise(spans))
