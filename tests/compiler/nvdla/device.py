"""Running an INT8 NVDLA program on pydla's NVDLA device through the whole stack (pydla.Session)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import pydla
from pydla.compiler.nvdla.emit import emit_loadable
from pydla.compiler.nvdla.layout import Facts
from pydla.compiler.nvdla.plan import Plan
from pydla.loadable.nvdla.writer import write_nvdla_loadable
from pydla.target.config import load_config


def run_on_device(plan: Plan, inputs: dict[str, np.ndarray], config: str = "nv_small") -> dict[str, Any]:
    facts = Facts.of(load_config(config).nvdla)
    blob = write_nvdla_loadable(emit_loadable(plan, facts, b"{}"))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "plan.nvdla"
        path.write_bytes(blob)
        s = pydla.Session(str(path), config=config)
        names = [i.name for i in s.get_inputs()]
        outs = s.run(None, {n: inputs[n][None] for n in names})
        out_names = [o.name for o in s.get_outputs()]
    return {n: o[0] for n, o in zip(out_names, outs, strict=True)}
