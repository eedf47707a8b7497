"""NVIDIA's SDP_X1_L0_0 and SDP_X1_L0_0_small through the SDP, byte for byte."""

from __future__ import annotations

import pytest

from pydla.hw.nvdla import sdp
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL, NvdlaTarget
from tests.hw.nvdla.nvdla_run import Run, sdp_params


@pytest.mark.parametrize(("name", "target", "prec"),
                         [("SDP_X1_L0_0", NV_FULL, 1), ("SDP_X1_L0_0_small", NV_SMALL, 0)])
def test_nvidia_sdp_x1_golden_images(name: str, target: NvdlaTarget, prec: int) -> None:
    run = Run(name)
    p = sdp_params(run, run.op(0))
    assert (p.in_precision, p.out_precision, p.bs.bypass, p.bs.relu_bypass) == (prec, prec, 0, 0)
    assert p.bs.alu_bypass and p.bs.mul_bypass and p.brdma.disable  # op type NONE: the x1 cube is not read
    result = sdp.execute(p, run.memory, target)
    assert result.to_pdp is None and not result.unequal
    assert run.image() == run.golden()
