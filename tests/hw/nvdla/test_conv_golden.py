"""NVIDIA's CONV_D_L0_0 and CONV_D_L0_0_small through CDMA/CSC/CMAC/CACC and the SDP, byte for byte; and
NN_L0_0 (LeNet, FP16) through the convolutions, SDPs and PDPs of its DLA task and the emulator's softmax."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.hw.nvdla import conv, pdp, sdp
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL, NvdlaTarget
from tests.hw.nvdla.nvdla_run import Run, conv_params, pdp_params, sdp_params


@pytest.mark.parametrize(("name", "target", "prec"),
                         [("CONV_D_L0_0", NV_FULL, 1), ("CONV_D_L0_0_small", NV_SMALL, 0)])
def test_nvidia_conv_golden_images(name: str, target: NvdlaTarget, prec: int) -> None:
    run = Run(name)
    c, s = run.op(0), run.op(1)
    assert (c.block.name, s.block.name) == ("CONV", "SDP")
    p = conv_params(run, c, target)
    assert (p.cdma.proc_precision, p.csc.weight_width_ext, p.csc.weight_channel_ext) == (prec, 2, 127)
    assert p.csc.pad_left == 1
    result = conv.execute(p, run.memory, target)
    assert result.to_sdp.shape == (1, 32, 8, 8) and result.to_sdp.dtype == np.int32
    if prec == 1:  # INT16 sums beyond 32 bits: CACC saturates
        assert result.saturations > 0
    sdp.execute(sdp_params(run, s), run.memory, target, flying_input=result.to_sdp)
    assert run.image() == run.golden()


def _half_ties_away(x: np.ndarray) -> np.ndarray:
    """float32 -> FP16 bits, rounding to nearest with ties away from zero (nvdla/sw half.h, the runtime's
    emulator). Normal FP16 results only (what a softmax produces)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.int64)
    exp = ((bits >> 23) & 0xFF) - 127 + 15
    mant = (bits & 0x7FFFFF) | 0x800000
    assert ((exp > 0) & (exp < 31)).all()
    h = (exp << 10) + ((mant + (1 << 12)) >> 13) - (1 << 10)  # a carry out of the mantissa bumps the exponent
    return (h | ((bits >> 31) << 15)).astype(np.uint16)


def test_nvidia_nn_l0_0_lenet_fp16() -> None:
    """LeNet in FP16 with NVIDIA's zero input: conv 5x5 1->20, 5x5 20->50, 4x4 50->500 (to 1x1), 1x1
    500->10, each fused to an SDP bias, max pools, an offline ReLU; then the emulator's softmax. Partial
    kernel and channel groups, 1x1 cubes; the result equals NVIDIA's golden image."""
    run = Run("NN_L0_0")
    ops = run.net.operations
    assert [o.block.name for o in ops] == ["CONV", "SDP", "PDP", "CONV", "SDP", "PDP", "CONV", "SDP", "SDP",
                                           "CONV", "SDP"]
    pending = None
    for op in ops:
        if op.block.name == "CONV":
            pending = conv.execute(conv_params(run, op, NV_FULL), run.memory, NV_FULL)
            assert pending.to_sdp.dtype == np.uint32
        elif op.block.name == "SDP":
            flying = op.surface_desc.src_data.type == 2
            sdp.execute(sdp_params(run, op), run.memory, NV_FULL,
                        flying_input=pending.to_sdp if flying else None)
        else:
            pdp.execute(pdp_params(run, op), run.memory, NV_FULL)
    last = ops[-1].surface_desc.dst_data
    logits = run.memory.read(run.address(last.address), 20).view("<u2")
    x = logits.view(np.float16).astype(np.float32)
    e = np.exp((x - x.max()).astype(np.float64)).astype(np.float32)  # expf, correctly rounded
    total = np.float32(0)
    for v in e:
        total = np.float32(total + v)
    probs = _half_ties_away(e / total)
    out = run.lo.memory_list[run.output_mem]
    run.memory.write(run.base[out.id], probs.view(np.uint8))
    assert run.image() == run.golden()
