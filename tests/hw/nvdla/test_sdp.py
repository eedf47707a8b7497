"""SDP in INT8/INT16 processing against a per-element reference in Python integers, operands from
registers and from memory (per channel, per element, one or two bytes, ALU and MUL interleaved),
and the refusals."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import sdp
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.sdp_params import SdpOperandDma, SdpParams, SdpX, SdpY
from pydla.hw.nvdla.surface import Cube, gather, scatter
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL, NvdlaTarget


def rhaz(x: int, s: int) -> int:
    """Round half away from zero of x / 2^s."""
    if s == 0:
        return x
    q = (abs(x) + (1 << (s - 1))) >> s
    return q if x >= 0 else -q


def sat(x: int, bits: int) -> int:
    return max(-(1 << (bits - 1)), min((1 << (bits - 1)) - 1, x))


def sx(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def ref_x(v: int, alu_op: int, mul_op: int, x: SdpX) -> int:
    if x.bypass:
        return v
    a = v
    if not x.alu_bypass:
        op = sat(alu_op << (x.alu_shift_value & 63), 32)
        a = max(a, op) if x.alu_algo == 0 else min(a, op) if x.alu_algo == 1 else a + op
    shift = x.mul_shift_value & 63
    if x.mul_bypass:
        out = sat(rhaz(a, shift), 32)
    elif x.mul_prelu and a >= 0:
        out = sx(a, 32)
    else:
        out = sat(rhaz(a * mul_op, shift), 32)
    return out if x.relu_bypass else max(out, 0)


def ref_y(v: int, alu_op: int, mul_op: int, y: SdpY) -> int:
    if y.bypass:
        return v
    m = v
    if not y.mul_bypass and not (y.mul_prelu and v >= 0):
        m = sat(rhaz(v * mul_op, y.truncate), 32)
    if y.alu_bypass:
        return m
    return sat(
        max(m, alu_op)
        if y.alu_algo == 0
        else min(m, alu_op)
        if y.alu_algo == 1
        else int(m != alu_op)
        if y.alu_algo == 3
        else m + alu_op,
        32,
    )


def ref_y_operand(op16: int, bypass: int, offset: int, scale: int, truncate: int) -> int:
    return op16 if bypass else sat(rhaz((op16 - sx(offset, 32)) * sx(scale, 16), truncate), 32)


def reference(v: int, p: SdpParams, ops: dict[str, tuple[int, int]]) -> int:
    for stage in (p.bs, p.bn):
        mem = ops.get("bs" if stage is p.bs else "bn", (0, 0))
        a = mem[0] if stage.alu_src else sx(stage.alu_operand, 16)
        m = mem[1] if stage.mul_src else sx(stage.mul_operand, 16)
        v = ref_x(v, a, m, stage)
    y = p.ew
    if "ew" in ops:
        a16, m16 = ops["ew"]
        ya = (
            ref_y_operand(a16, y.alu_cvt_bypass, y.alu_cvt_offset, y.alu_cvt_scale, y.alu_cvt_truncate)
            if y.alu_src
            else sx(y.alu_operand, 32)
        )
        ym = (
            ref_y_operand(m16, y.mul_cvt_bypass, y.mul_cvt_offset, y.mul_cvt_scale, y.mul_cvt_truncate)
            if y.mul_src
            else sx(y.mul_operand, 32)
        )
    else:
        ya, ym = sx(y.alu_operand, 32), sx(y.mul_operand, 32)
    v = ref_y(v, ya, ym, y)
    t = sat(rhaz((v - sx(p.cvt_offset, 32)) * sx(p.cvt_scale, 16), p.cvt_shift & 63), 17)
    return sat(t, 8 if p.out_precision == 0 else 16)


def random_x(r: random.Random, mem_alu: bool, mem_mul: bool) -> SdpX:
    return SdpX(
        bypass=0,
        alu_bypass=int(not mem_alu and r.random() < 0.3),
        alu_algo=r.randint(0, 2),
        alu_src=int(mem_alu),
        alu_shift_value=r.choice([0, 1, 7, 20, 40]),
        alu_operand=r.randint(0, 0xFFFF),
        mul_bypass=int(not mem_mul and r.random() < 0.3),
        mul_prelu=r.randint(0, 1),
        mul_src=int(mem_mul),
        mul_shift_value=r.choice([0, 1, 2, 9, 17, 33, 63]),
        mul_operand=r.randint(0, 0xFFFF),
        relu_bypass=r.randint(0, 1),
    )


def layout_operands(
    mem: ByteMemory, base: int, vals: np.ndarray, dma: SdpOperandDma, epg: int, c: int, h: int, w: int
) -> None:
    """Operands (comps, C, H, W) as SDP_RDMA reads them, element by element."""
    comps = vals.shape[0]
    size = 2 if dma.data_size else 1
    per = comps * size
    for k in range(comps):
        for ch in range(c):
            for y in range(h):
                for x in range(w):
                    if dma.data_mode == 0:
                        if y or x:
                            continue
                        a = base + ch * per + k * size
                    else:
                        a = (
                            base
                            + (ch // epg) * dma.surface_stride
                            + y * dma.line_stride
                            + x * epg * per
                            + (ch % epg) * per
                            + k * size
                        )
                    v = int(vals[k, ch, y, x]) & ((1 << (8 * size)) - 1)
                    mem.data[a - mem.base : a - mem.base + size] = list(v.to_bytes(size, "little"))


def run_case(seed: int, target: NvdlaTarget, prec: Precision, out: Precision) -> None:
    r = random.Random(seed)
    rng = np.random.default_rng(seed)
    c, h, w = r.choice([5, 20, 33]), 2, 3
    atom = target.atom
    epa_in = target.epa(prec)
    surfs = -(-c // epa_in)
    src = Cube(0x100, w, h, c, w * atom + atom, (h * (w + 1) + 1) * atom, prec)
    info = np.iinfo(prec.dtype)
    data = rng.integers(info.min, info.max, (c, h, w), endpoint=True)
    data.flat[:2] = [info.min, info.max]
    mem = ByteMemory(1 << 16)
    scatter(mem, src, target, data.astype(prec.dtype), "t")
    base = 0x100 + surfs * src.surf_stride + 256
    stages: dict[str, object] = {}
    dmas: dict[str, SdpOperandDma] = {}
    ops: dict[str, np.ndarray] = {}
    epg = target.epa(prec)
    for stage, dma_name in (("bs", "brdma"), ("bn", "nrdma"), ("ew", "erdma")):
        if stage == "ew" and not target.sdp_has_y:
            continue
        mem_alu, mem_mul = r.random() < 0.5, r.random() < 0.5
        if stage == "ew":
            stages[stage] = SdpY(
                bypass=int(r.random() < 0.2),
                alu_bypass=int(not mem_alu and r.random() < 0.3),
                alu_algo=r.randint(0, 2),
                alu_src=int(mem_alu),
                alu_cvt_bypass=r.randint(0, 1),
                alu_operand=r.randint(0, 0xFFFFFFFF),
                alu_cvt_offset=r.randint(0, 0xFFFFFFFF),
                alu_cvt_scale=r.randint(0, 0xFFFF),
                alu_cvt_truncate=r.randint(0, 40),
                mul_bypass=int(not mem_mul and r.random() < 0.3),
                mul_prelu=r.randint(0, 1),
                mul_src=int(mem_mul),
                mul_cvt_bypass=r.randint(0, 1),
                mul_operand=r.choice([r.randint(0, 0xFFFFFFFF), r.randint(0, 300)]),
                mul_cvt_offset=r.randint(-100, 100) & 0xFFFFFFFF,
                mul_cvt_scale=r.randint(0, 0xFFFF),
                mul_cvt_truncate=r.randint(0, 30),
                truncate=r.choice([0, 3, 16, 40, 700]),
            )
            if stages[stage].bypass:  # type: ignore[attr-defined]
                mem_alu = mem_mul = False
                stages[stage] = SdpY()
        else:
            stages[stage] = random_x(r, mem_alu, mem_mul)
        if mem_alu or mem_mul:
            comps = 2 if mem_alu and mem_mul else 1
            size = r.randint(0, 1)
            mode = r.randint(0, 1)
            per = comps * (size + 1)
            ls = w * epg * per + r.choice([0, atom])
            ls = -(-ls // atom) * atom
            ss = -(-(h * ls + atom) // atom) * atom
            dma = SdpOperandDma(
                disable=0,
                data_use=2 if comps == 2 else (1 if mem_alu else 0),
                data_size=size,
                data_mode=mode,
                base_addr=base,
                line_stride=ls,
                surface_stride=ss,
            )
            bits = 8 * (size + 1)
            vals = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), (comps, c, h, w))
            if mode == 0:
                vals[:] = vals[:, :, :1, :1]
            layout_operands(mem, base, vals, dma, epg, c, h, w)
            base += -(-c // epg) * ss + 256
            dmas[dma_name] = dma
            alu = vals[0] if mem_alu else np.zeros_like(vals[0])
            mul = vals[comps - 1] if mem_mul else np.zeros_like(vals[0])
            ops[stage] = np.stack([alu, mul])
    epa_out = target.epa(out)
    dst = Cube(base, w, h, c, w * atom, h * w * atom + atom, out)
    p = SdpParams(
        width=w - 1,
        height=h - 1,
        channel=c - 1,
        in_precision=int(prec),
        proc_precision=int(prec),
        out_precision=int(out),
        src_base_addr=src.address,
        src_line_stride=src.line_stride,
        src_surface_stride=src.surf_stride,
        dst_base_addr=dst.address,
        dst_line_stride=dst.line_stride,
        dst_surface_stride=dst.surf_stride,
        cvt_offset=r.choice([0, r.randint(0, 0xFFFFFFFF)]),
        cvt_scale=r.choice([1, r.randint(0, 0xFFFF)]),
        cvt_shift=r.choice([0, 1, 5, 20]),
        **stages,
        **dmas,
    )  # type: ignore[arg-type]
    assert epa_out
    sdp.execute(p, mem, target)
    got = gather(mem, dst, target, "t")
    for ch in range(c):
        for y in range(h):
            for x in range(w):
                el_ops = {k: (int(v[0, ch, y, x]), int(v[1, ch, y, x])) for k, v in ops.items()}
                want = reference(int(data[ch, y, x]), p, el_ops)
                assert int(got[ch, y, x]) == want, (seed, ch, y, x, p)


@pytest.mark.parametrize("seed", range(12))
def test_int16_processing_matches_the_reference(seed: int) -> None:
    run_case(seed, NV_FULL, Precision.INT16, Precision.INT16 if seed % 3 else Precision.INT8)


@pytest.mark.parametrize("seed", range(100, 108))
def test_int8_processing_matches_the_reference(seed: int) -> None:
    run_case(seed, NV_FULL if seed % 2 else NV_SMALL, Precision.INT8, Precision.INT8)


def simple(c: int = 32, **kw: object) -> tuple[SdpParams, ByteMemory, Cube, Cube]:
    src = Cube(0, 2, 1, c, 64, 64, Precision.INT8)
    dst = Cube(1024, 2, 1, c, 64, 64, Precision.INT8)
    base = dict(
        width=1,
        height=0,
        channel=c - 1,
        in_precision=0,
        proc_precision=0,
        out_precision=0,
        src_line_stride=64,
        src_surface_stride=64,
        dst_base_addr=1024,
        dst_line_stride=64,
        dst_surface_stride=64,
    )
    base.update(kw)
    return SdpParams(**base), ByteMemory(4096), src, dst  # type: ignore[arg-type]


def test_rounding_ties_and_saturation_edges() -> None:
    p, mem, src, dst = simple(bs=SdpX(bypass=0, alu_bypass=1, mul_bypass=0, mul_operand=3, mul_shift_value=1))
    x = np.array([1, -1, 3, -3, 127, -128, 5, -5] * 4, dtype=np.int8).reshape(32, 1, 1).repeat(2, axis=2)
    scatter(mem, src, NV_FULL, x, "t")
    sdp.execute(p, mem, NV_FULL)
    got = gather(mem, dst, NV_FULL, "t")[:8, 0, 0].tolist()
    # x*3/2 rounded half away from zero: 1.5->2, -1.5->-2, 4.5->5, -4.5->-5, 190.5->191->127, -192->-128
    assert got == [2, -2, 5, -5, 127, -128, 8, -8]


def test_unused_lanes_are_computed_and_written() -> None:
    p, mem, _, _ = simple(c=3, bs=SdpX(bypass=0, alu_bypass=0, alu_algo=2, alu_operand=1, mul_bypass=1))
    mem.data[:64] = np.arange(64)  # lanes 3..31 hold data too
    sdp.execute(p, mem, NV_FULL)
    assert mem.data[1024:1088].tolist() == list(range(1, 65))


def test_equal_mode_writes_nothing_and_reports() -> None:
    y = SdpY(bypass=0, alu_bypass=0, alu_algo=3, alu_operand=7)
    p, mem, _, _ = simple(ew=y)
    mem.data[:64] = 7
    mem.data[1024:1088] = 0xEE
    assert sdp.execute(p, mem, NV_FULL).unequal is False
    mem.data[40] = 6
    assert sdp.execute(p, mem, NV_FULL).unequal is True
    assert np.all(mem.data[1024:1088] == 0xEE)


def test_on_the_fly_input_and_output_to_the_pdp() -> None:
    acc = np.array([[[1 << 40 >> 12, -(1 << 31)]]] * 32, dtype=np.int64)  # 2^28, -2^31
    p, mem, _, _ = simple(flying_mode=1, output_dst=1, cvt_shift=20)
    res = sdp.execute(p, mem, NV_FULL, flying_input=acc.astype(np.int32))
    assert res.to_pdp is not None and res.to_pdp.shape == (32, 1, 2) and res.to_pdp.dtype == np.int8
    assert res.to_pdp[0, 0].tolist() == [127, -128]  # 2^28 >> 20 = 256 -> 127; -2048 -> -128
    assert np.all(mem.data == 0)


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        (dict(brdma=SdpOperandDma(disable=0)), NvError.BadValue, "brdma is enabled but bs takes no operand"),
        (
            dict(bs=SdpX(bypass=0, alu_bypass=0, alu_src=1)),
            NvError.BadValue,
            "bs reads an operand from memory but",
        ),
        (
            dict(bs=SdpX(bypass=0, alu_bypass=0, alu_src=1), brdma=SdpOperandDma(disable=0, data_use=0)),
            NvError.BadValue,
            "brdma_data_use 0 does not match",
        ),
        (dict(ew=SdpY(bypass=0)), NvError.NotSupported, "nv_small has no Y"),
        (dict(proc_precision=1), NvError.NotSupported, "INT16 is not supported by nv_small"),
        (dict(winograd=1), NvError.NotSupported, "Winograd"),
        (dict(batch_number=1), NvError.BadValue, "batch_number 1 with input from memory"),
        (dict(flying_mode=1), NvError.BadParameter, "no input was given"),
        (dict(channel=8192), NvError.BadValue, "channel 8192 is outside"),
    ],
)
def test_refusals(change: dict[str, object], code: NvError, words: str) -> None:
    p, mem, _, _ = simple()
    with pytest.raises(DlaError) as e:
        sdp.execute(dataclasses.replace(p, **change), mem, NV_SMALL)  # type: ignore[arg-type]
    assert e.value.code == code and words in str(e.value)


def test_operand_reads_are_bounds_checked() -> None:
    x = SdpX(bypass=0, alu_bypass=0, alu_src=1, mul_bypass=1)
    dma = SdpOperandDma(disable=0, data_use=1, data_size=1, data_mode=0, base_addr=4096 - 32)
    p, mem, _, _ = simple(bs=x, brdma=dma)
    with pytest.raises(DlaError) as e:
        sdp.execute(p, mem, NV_FULL)
    assert e.value.code == NvError.InvalidAddress and str(e.value).startswith("SDP brdma: read of 64 bytes")


def test_sdp_output_feeds_the_pdp_on_the_fly() -> None:
    from pydla.hw.nvdla import pdp
    from tests.hw.nvdla.test_pdp import make

    acc = np.arange(32 * 2 * 4, dtype=np.int32).reshape(32, 2, 4) - 100
    p, mem, _, _ = simple(width=3, height=1, flying_mode=1, output_dst=1, bs=SdpX(bypass=0, relu_bypass=0))
    res = sdp.execute(p, mem, NV_FULL, flying_input=acc)
    assert res.to_pdp is not None
    pool = dataclasses.replace(
        make(Precision.INT8, 32, 2, 4, 1, 2, 2, 2, 2, (0, 0, 0, 0)),
        flying_mode=0,
        dst_base_addr=2048,
        dst_line_stride=64,
        dst_surface_stride=64,
    )
    pdp.execute(pool, mem, NV_FULL, flying_input=res.to_pdp)
    got = gather(mem, Cube(2048, 2, 1, 32, 64, 64, Precision.INT8), NV_FULL, "t")
    relu = np.clip(np.maximum(acc, 0), -128, 127)
    assert np.array_equal(got[:, 0, :], relu.reshape(32, 2, 2, 2).max(axis=(1, 3)))
