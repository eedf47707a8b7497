"""RUBIK contract, split and merge against per-element references, and NVIDIA's RBK_L0_0."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import rubik
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.rubik import RubikParams
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL
from tests.hw.nvdla.nvdla_run import Run, rubik_params


def params(mode: int, prec: Precision, w: int, h: int, cin: int, cout: int, **kw: int) -> RubikParams:
    base = dict(rubik_mode=mode, in_precision=int(prec), datain_width=w - 1, datain_height=h - 1,
                datain_channel=cin - 1, dain_addr=0, dain_line_stride=0, dain_surf_stride=0,
                dain_planar_stride=0, dataout_channel=cout - 1, daout_addr=0, daout_line_stride=0,
                daout_surf_stride=0, daout_planar_stride=0, contract_stride_0=0, contract_stride_1=0,
                deconv_x_stride=0, deconv_y_stride=0)
    base.update(kw)
    return RubikParams(**base)


def random_memory(size: int, seed: int) -> ByteMemory:
    mem = ByteMemory(size)
    mem.data[:] = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    return mem


@pytest.mark.parametrize(("prec", "w", "h", "cout", "sx", "sy"), [
    (Precision.INT8, 3, 2, 40, 2, 3),
    (Precision.INT16, 2, 3, 16, 3, 1),
    (Precision.FP16, 1, 1, 5, 1, 2),
    (Precision.INT8, 2, 1, 7, 10, 1),   # stride_x > 8: the hardware's other write path
])
def test_contract_moves_each_atom_where_the_formula_says(prec, w, h, cout, sx, sy) -> None:
    epa = 32 // prec.bpe
    so = -(-cout // epa)
    sls, sss = (w + 1) * 32, (h * (w + 1) + 1) * 32
    dls = (w * sx + 2) * 32
    cs1 = sy * dls + 64
    dss = h * cs1 + 32
    src, dst = 0x100, 0x100 + sx * sy * so * sss + 256
    p = params(0, prec, w, h, sx * sy * cout, cout, dain_addr=src, dain_line_stride=sls,
               dain_surf_stride=sss, daout_addr=dst, daout_line_stride=dls, daout_surf_stride=dss,
               contract_stride_1=cs1, deconv_x_stride=sx - 1, deconv_y_stride=sy - 1)
    mem = random_memory(dst + so * dss + 256, w + cout)
    ref = mem.data.copy()
    for s in range(so):
        for y in range(h):
            for j in range(sy):
                for x in range(w):
                    for i in range(sx):
                        a_in = src + ((j * sx + i) * so + s) * sss + y * sls + x * 32
                        a_out = dst + s * dss + y * cs1 + j * dls + (x * sx + i) * 32
                        ref[a_out:a_out + 32] = mem.data[a_in:a_in + 32]
    rubik.execute(p, mem, NV_FULL)
    assert np.array_equal(mem.data, ref)


@pytest.mark.parametrize(("prec", "w", "h", "c"), [(Precision.INT8, 5, 2, 35), (Precision.INT16, 70, 2, 3),
                                                   (Precision.FP16, 17, 1, 16), (Precision.INT8, 33, 3, 1)])
def test_split_and_merge_against_the_planar_layout(prec, w, h, c) -> None:
    bpe, epa = prec.bpe, 32 // prec.bpe
    surfs = -(-c // epa)
    fls, fss = w * 32 + 32, (h * (w + 1)) * 32 + 64
    lb = -(-w * bpe // 32) * 32
    pls, pps = lb + 32, h * (lb + 32) + 32
    feat, planes, back = 0x40, 0x40 + surfs * fss + 64, 0x40 + surfs * fss + 64 + c * pps + 64
    mem = random_memory(back + surfs * fss + 64, c)
    before = mem.data.copy()

    def el(addr: int) -> bytes:
        return bytes(before[addr:addr + bpe])

    rubik.execute(params(1, prec, w, h, c, c, dain_addr=feat, dain_line_stride=fls, dain_surf_stride=fss,
                         daout_addr=planes, daout_line_stride=pls, daout_planar_stride=pps), mem, NV_FULL)
    ref = before.copy()
    for ch in range(c):
        for y in range(h):
            line = planes + ch * pps + y * pls
            for x in range(w):
                src = feat + (ch // epa) * fss + y * fls + x * 32 + (ch % epa) * bpe
                ref[line + x * bpe:line + (x + 1) * bpe] = np.frombuffer(el(src), np.uint8)
            ref[line + w * bpe:line + lb] = 0  # the line is written up to its last 32-byte atom
    assert np.array_equal(mem.data, ref)

    rubik.execute(params(2, prec, w, h, c, c, dain_addr=planes, dain_line_stride=pls, dain_planar_stride=pps,
                         daout_addr=back, daout_line_stride=fls, daout_surf_stride=fss), mem, NV_FULL)
    for ch in range(surfs * epa):
        for y in range(h):
            for x in range(w):
                a_back = back + (ch // epa) * fss + y * fls + x * 32 + (ch % epa) * bpe
                want = el(feat + (ch // epa) * fss + y * fls + x * 32 + (ch % epa) * bpe) if ch < c \
                    else bytes(bpe)  # merge writes the unused lanes as 0
                assert bytes(mem.data[a_back:a_back + bpe]) == want


def test_refusals_name_the_field() -> None:
    good = params(0, Precision.INT8, 1, 1, 32, 32, dain_line_stride=32, dain_surf_stride=32,
                  daout_addr=64, daout_line_stride=32, daout_surf_stride=32, contract_stride_1=32)
    mem = ByteMemory(4096)
    rubik.execute(good, mem, NV_FULL)
    cases = [
        (dict(rubik_mode=3), "rubik_mode 3"),
        (dict(in_precision=3), "IN_PRECISION: precision code 3"),
        (dict(daout_addr=65), "daout_addr 0x41"),
        (dict(deconv_x_stride=32), "deconv_x_stride 32"),
        (dict(rubik_mode=1, dataout_channel=30), "split of 32 channels into 31 planes"),
        (dict(deconv_y_stride=1, daout_line_stride=0), "daout_line_stride 0 is less than the 32 bytes"),
        (dict(daout_addr=4096), "RUBIK dst: "),
    ]
    for change, words in cases:
        with pytest.raises(DlaError) as e:
            rubik.execute(dataclasses.replace(good, **change), mem, NV_FULL)
        assert words in str(e.value), (change, str(e.value))
    with pytest.raises(DlaError) as e:
        rubik.execute(good, mem, NV_SMALL)
    assert e.value.code == NvError.NotSupported


def test_nvidia_rbk_l0_0_golden_image() -> None:
    run = Run("RBK_L0_0")
    p = rubik_params(run, run.op(0))
    assert (p.rubik_mode, p.in_precision, p.deconv_x_stride, p.deconv_y_stride) == (0, 1, 9, 3)
    rubik.execute(p, run.memory, NV_FULL)
    assert run.image() == run.golden()
