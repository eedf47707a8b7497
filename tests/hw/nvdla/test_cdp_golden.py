"""NVIDIA's CDP_L0_0 (INT16) and CDP_L0_0_small (INT8) through the CDP, byte for byte."""

from __future__ import annotations

import pytest

from pydla.hw.nvdla import cdp
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL, NvdlaTarget
from tests.hw.nvdla.nvdla_run import Run, cdp_params


@pytest.mark.parametrize(("name", "target", "prec"),
                         [("CDP_L0_0", NV_FULL, 1), ("CDP_L0_0_small", NV_SMALL, 0)])
def test_nvidia_cdp_golden_images(name: str, target: NvdlaTarget, prec: int) -> None:
    run = Run(name)
    p = cdp_params(run, run.op(0))
    assert (p.input_data, p.normalz_len, p.datout_scale) == (prec, 0, 2)
    result = cdp.execute(p, run.memory, target)
    stats = result.lut
    # start = end = 0 in both tables: nearly every window overflows; the image tests the over/underflow
    # paths, the priorities and the saturation (docs/development/nvdla/overview.md)
    assert stats.oflow > 0 and result.saturations > 0
    assert stats.uflow + stats.oflow + stats.hybrid + stats.le_hit + stats.lo_hit == 8 * 8 * 32
    assert run.image() == run.golden()
