"""The SDP LUT (integer processing) against a per-element reference in Python integers: both LE
methods, the LO table, every priority, interpolation and extrapolation, through sdp.execute."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pydla.errors import DlaError
from pydla.hw.nvdla import sdp
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.sdp_params import SdpLut, SdpParams, SdpY
from pydla.hw.nvdla.surface import Cube, gather, scatter
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL
from tests.hw.nvdla.test_sdp import rhaz, sat, sx


def lookup(x: int, start: int, sel: int | None, offset: int, last: int) -> tuple[str, int, int]:
    """(kind, index, 35-bit fraction); ``sel`` None means the exponent method."""
    if x <= start:
        return "u", 0, 0
    u = x - start
    if sel is None:
        e = u.bit_length() - 1
        if e < offset:
            return "u", 0, 0
        if e - offset >= last:
            return "o", last, 0
        return "h", e - offset, (u - (1 << e)) << (35 - e)
    idx = u >> sel if sel >= 0 else min(u << -sel, 511)
    if idx >= last:
        return "o", last, 0
    frac = (u & ((1 << sel) - 1)) << (35 - sel) if sel > 0 else 0
    return "h", idx, frac


def reference(x: int, lut: SdpLut) -> int:
    offset = sx(lut.le_index_offset, 8)
    exponent = lut.le_function == 0
    le = lookup(x, sx(lut.le_start, 32), None if exponent else sx(lut.le_index_select, 8), offset, 64)
    lo = lookup(x, sx(lut.lo_start, 32), sx(lut.lo_index_select, 8), 0, 256)
    if le[0] == "u" and lo[0] == "u":
        use_lo = lut.uflow_priority
    elif le[0] == "o" and lo[0] == "o":
        use_lo = lut.oflow_priority
    elif (le[0] == "h") == (lo[0] == "h"):
        use_lo = lut.hybrid_priority
    else:
        use_lo = lo[0] == "h"
    kind, idx, frac = lo if use_lo else le
    table = [sx(v, 16) for v in (lut.lo_table if use_lo else lut.le_table)]
    if kind == "h":
        return sat(rhaz(table[idx] * ((1 << 35) - frac) + table[idx + 1] * frac, 35), 32)
    name = ("lo" if use_lo else "le") + ("_slope_oflow" if kind == "o" else "_slope_uflow")
    scale, shift = sx(getattr(lut, name + "_scale"), 16), sx(getattr(lut, name + "_shift"), 5)
    base = sx(getattr(lut, ("lo" if use_lo else "le") + ("_end" if kind == "o" else "_start")), 32)
    if exponent and not use_lo and kind == "u" and offset > 0:
        base += 1 << offset
    c = (x - base) * scale
    c = sat(rhaz(c, shift) if shift >= 0 else c << -shift, 32)
    return sat(table[idx] + c, 32)


def random_lut(r: random.Random) -> SdpLut:
    start = r.randint(-3000, 3000)
    sel = r.randint(0, 7)
    return SdpLut(
        le_function=r.randint(0, 1),
        uflow_priority=r.randint(0, 1),
        oflow_priority=r.randint(0, 1),
        hybrid_priority=r.randint(0, 1),
        le_index_offset=r.randint(-3, 6) & 0xFF,
        le_index_select=sel,
        lo_index_select=r.randint(-2, 5) & 0xFF,
        le_start=start & 0xFFFFFFFF,
        le_end=(start + (64 << sel)) & 0xFFFFFFFF,
        lo_start=(start + r.randint(-50, 50)) & 0xFFFFFFFF,
        lo_end=(start + 2000) & 0xFFFFFFFF,
        **{
            f"{t}_slope_{f}_{k}": (r.randint(-300, 300) if k == "scale" else r.randint(0, 31)) & 0xFFFF
            for t in ("le", "lo")
            for f in ("uflow", "oflow")
            for k in ("scale", "shift")
        },
        le_table=tuple(r.randint(-32768, 32767) & 0xFFFF for _ in range(65)),
        lo_table=tuple(r.randint(-32768, 32767) & 0xFFFF for _ in range(257)),
    )


def run(lut: SdpLut, values: np.ndarray) -> np.ndarray:
    """INT16 in, the LUT's 32-bit result through the converter with shift 0 into INT16."""
    n = values.size
    src = Cube(0, n, 1, 16, n * 32, n * 32, Precision.INT16)
    dst = Cube(n * 32, n, 1, 16, n * 32, n * 32, Precision.INT16)
    mem = ByteMemory(2 * n * 32)
    scatter(mem, src, NV_FULL, np.broadcast_to(values.reshape(1, 1, n), (16, 1, n)).astype(np.int16), "t")
    p = SdpParams(
        width=n - 1,
        height=0,
        channel=15,
        in_precision=1,
        proc_precision=1,
        out_precision=1,
        src_line_stride=n * 32,
        src_surface_stride=n * 32,
        dst_base_addr=n * 32,
        dst_line_stride=n * 32,
        dst_surface_stride=n * 32,
        ew=SdpY(bypass=0, lut_bypass=0),
        lut=lut,
    )
    sdp.execute(p, mem, NV_FULL)
    return np.asarray(gather(mem, dst, NV_FULL, "t")[0, 0])


@pytest.mark.parametrize("seed", range(16))
def test_lut_matches_the_reference(seed: int) -> None:
    r = random.Random(seed)
    lut = random_lut(r)
    start = sx(lut.le_start, 32)
    values = np.array(
        sorted(
            {max(-32768, min(32767, start + r.randint(-4000, 9000))) for _ in range(300)}
            | {start, start + 1, 32767, -32768}
        )
    )
    got = run(lut, values)
    for v, g in zip(values.tolist(), got.tolist(), strict=True):
        assert g == sat(reference(v, lut), 16), (seed, v)


def test_lut_refusals() -> None:
    lut = SdpLut(le_table=(0,) * 64)
    with pytest.raises(DlaError, match="le_table has 64 entries"):
        run(lut, np.zeros(2, np.int64))
    with pytest.raises(DlaError, match="le_start 4294967296 does not fit"):
        run(SdpLut(le_start=1 << 32), np.zeros(2, np.int64))
    p = SdpParams(
        width=0,
        height=0,
        channel=0,
        in_precision=0,
        proc_precision=0,
        out_precision=0,
        ew=SdpY(bypass=0, lut_bypass=0),
    )
    with pytest.raises(DlaError, match="nv_small has no Y"):
        sdp.execute(p, ByteMemory(64), NV_SMALL)
