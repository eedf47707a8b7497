"""The compiler follows the speed rules of the device configuration it compiles for (tap-major
weights: tap_major_min_channels, tap_major_max_extra), read from the configuration, not from the
virtual device's module constants."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import helper

from pydla.compiler.api import compile_model
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.loadable.container import Loadable
from pydla.loadable.taskbuilder import OP_DESC_SIZE
from tests.compiler.support import model, reference, run_loadable

RNG = np.random.default_rng(5)
CHANNELS, WIDTH = 16, 14  # the bundled rules: tap-major (16 channels, 2 extra columns on 14)


def _conv_model() -> Any:
    w = RNG.standard_normal((8, CHANNELS, 3, 3)).astype(np.float32) / np.float32(12.0)
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])]
    return model(nodes, {"x": (1, CHANNELS, 6, WIDTH)}, ["y"], {"W": w})


def _formats(blob: bytes) -> list[str]:
    formats = []
    for code in Loadable.open(blob)._ctrl.values():
        ops = bytes(code.sections[".dla.ops"])
        for i, op_type in enumerate(code.op_types()):
            if op_type == dla_block_e.CONV:
                desc = T.dla_conv_op_desc_t.from_buffer_copy(ops, i * OP_DESC_SIZE)
                formats.append(R.conv_weight_format_e(desc.weight_format).name)
    return formats


def _full_with(tmp_path: Path, **rules: Any) -> str:
    raw = json.loads(resources.files("pydla.target").joinpath("configs/full.json").read_text())
    assert raw["tap_major_min_channels"] == CHANNELS and raw["tap_major_max_extra"] == 0.15
    raw.update(rules)
    path = tmp_path / "full-rules.json"
    path.write_text(json.dumps(raw))
    return str(path)


@pytest.mark.parametrize("rules, expected", [
    ({}, "RSKC"),
    ({"tap_major_min_channels": CHANNELS + 1}, "KCRS"),
    ({"tap_major_max_extra": 0}, "KCRS"),
    ({"tap_major_min_channels": 4, "tap_major_max_extra": 0.5}, "RSKC"),
])
def test_tap_major_choice_follows_the_config(tmp_path: Path, rules: dict[str, Any], expected: str) -> None:
    m = _conv_model()
    result = compile_model(m, config=_full_with(tmp_path, **rules))
    assert _formats(result.blob) == [expected]
    x = RNG.standard_normal((1, CHANNELS, 6, WIDTH)).astype(np.float32)
    np.testing.assert_allclose(run_loadable(result.blob, {"x": x})["y"], reference(m, {"x": x})["y"],
                               rtol=1e-4, atol=1e-4)
