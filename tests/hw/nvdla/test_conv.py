"""The integer convolution pipeline against a per-output Python reference, the weight format, CACC's
rounding and saturation, and every refusal.

The reference is written from docs/development/nvdla/arithmetic.md and formats.md, independently of
the kernels: Python integers, one output at a time, atoms added in CSC's order with CACC's 48-bit
saturation, ``round half away from zero`` by integer arithmetic."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import cacc, conv, conv_compressed, conv_int, conv_params, conv_weights, surface
from pydla.hw.nvdla.conv_atoms import DirectAtoms
from pydla.hw.nvdla.conv_taps import Geometry, Taps
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL, NvdlaTarget

DATA, WEIGHTS = 0x1000, 0x200000


def round_half_away(v: Fraction) -> int:
    q = int(abs(v) + Fraction(1, 2))
    return q if v >= 0 else -q


def reference(x: npt.NDArray[np.int64], w: npt.NDArray[np.int64], stride: tuple[int, int],
              dilation: tuple[int, int], pad: tuple[int, int, int,
                                                    int], pad_value: int, cf: int, out_hw: tuple[int, int],
              truncate: int) -> npt.NDArray[np.int64]:
    n_b, c_n, h, w_n = x.shape
    k_n, _, r_n, s_n = w.shape
    oh, ow = out_hw
    out = np.zeros((n_b, k_n, oh, ow), dtype=np.int64)
    for n in range(n_b):
        for k in range(k_n):
            for oy in range(oh):
                for ox in range(ow):
                    acc = 0
                    for c0 in range(0, c_n, cf):
                        for r in range(r_n):
                            for s in range(s_n):
                                iy = oy * stride[1] + r * dilation[1] - pad[2]
                                ix = ox * stride[0] + s * dilation[0] - pad[0]
                                part = 0
                                for c in range(c0, min(c_n, c0 + cf)):
                                    v = int(x[n, c, iy, ix]) if 0 <= iy < h and 0 <= ix < w_n else pad_value
                                    part += v * int(w[k, c, r, s])
                                acc = max(-(1 << 47), min((1 << 47) - 1, acc + part))
                    t = round_half_away(Fraction(acc, 1 << truncate))
                    out[n, k, oy, ox] = max(-(1 << 31), min((1 << 31) - 1, t))
    return out


def setup(target: NvdlaTarget, prec: Precision, x: npt.NDArray[np.int64], w: npt.NDArray[np.int64],
          **kw: object) -> tuple[conv_params.ConvParams, ByteMemory]:
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    batch_stride = 0
    if n > 1:
        batch_stride = -(-c // target.epa(prec)) * h * wd * target.atom
    p = conv_params.direct(target=target, precision=prec, width=wd, height=h, channel=c, kernels=k,
                           kernel_width=s,
                           kernel_height=r, data_addr=DATA, weight_addr=WEIGHTS, batches=n,
                           batch_stride=batch_stride, **kw)  # type: ignore[arg-type]
    mem = ByteMemory(1 << 23)
    cube = surface.Cube(DATA, wd, h, c, p.cdma.line_stride, p.cdma.surf_stride, prec, batch=n,
                        batch_stride=batch_stride)
    surface.scatter_batches(mem, cube, target, x.astype(prec.dtype), "x")
    mem.write(WEIGHTS, conv_weights.pack(w, target, prec))
    return p, mem


CASES = [  # target, precision, (N, C, H, W), (K, R, S), stride, dilation, pad (l, r, t, b)
    (NV_FULL, Precision.INT8, (1, 70, 5, 6), (33, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (NV_FULL, Precision.INT8, (2, 130, 4, 4), (5, 2, 3), (2, 1), (1, 2), (2, 0, 1, 2)),
    (NV_FULL, Precision.INT16, (1, 64, 6, 5), (17, 3, 2), (1, 2), (2, 1), (0, 2, 2, 0)),
    (NV_FULL, Precision.INT16, (1, 1, 7, 7), (16, 5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    (NV_SMALL, Precision.INT8, (1, 13, 6, 7), (11, 3, 3), (2, 2), (1, 1), (1, 0, 0, 1)),
    (NV_SMALL, Precision.INT8, (1, 9, 1, 1), (9, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
]


@pytest.mark.parametrize(("target", "prec", "shape", "kernel", "stride", "dilation", "pad"), CASES)
def test_integer_convolution_against_reference(target: NvdlaTarget, prec: Precision, shape: tuple[int, ...],
                                               kernel: tuple[int, int, int], stride: tuple[int, int],
                                               dilation: tuple[int, int], pad: tuple[int, int, int,
                                                                                     int]) -> None:
    rng = np.random.default_rng(hash((target.name, prec, shape)) % 2**32)
    lim = 128 if prec is Precision.INT8 else 32768
    x = rng.integers(-lim, lim, shape)
    k, r, s = kernel
    w = rng.integers(-lim, lim, (k, shape[1], r, s))
    pad_value = int(rng.integers(-lim, lim))
    truncate = int(rng.integers(0, 17))
    p, mem = setup(target, prec, x, w, stride=stride, dilation=dilation, pad=pad, pad_value=pad_value,
                   clip_truncate=truncate)
    result = conv.execute(p, mem, target)
    _, cf = conv_weights.groups(target, prec)
    out_hw = (p.cacc.dataout_height + 1, p.cacc.dataout_width + 1)
    ref = reference(x, w, stride, dilation, pad, pad_value, cf, out_hw, truncate)
    assert result.to_sdp.dtype == np.int32
    assert (result.to_sdp == ref).all()
    assert result.saturations == int(((ref == 2**31 - 1) | (ref == -2**31)).sum())


def test_int8_padding_value_is_its_low_byte() -> None:
    x = np.zeros((1, 3, 2, 2), dtype=np.int64)
    w = np.ones((1, 3, 3, 3), dtype=np.int64)
    p, mem = setup(NV_FULL, Precision.INT8, x, w, pad=(1, 1, 1, 1), pad_value=0x7F05)
    out = conv.execute(p, mem, NV_FULL).to_sdp
    assert out[0, 0, 0, 0] == 5 * 3 * 5  # 5 padded positions of the 3x3 window, 3 channels, value 5


def test_truncation_rounds_half_away_and_saturates() -> None:
    sums = np.array([5, -5, 6, -6, 7, -7, 2**47 - 1, -2**47, 2**33, -2**33 - 1, 3 << 15, -(3 << 15)])
    out, n = cacc.deliver_int(sums, 1)
    assert out.tolist()[:6] == [3, -3, 3, -3, 4, -4]
    assert out.tolist()[6:10] == [2**31 - 1, -2**31, 2**31 - 1, -2**31]
    assert n == 4
    out, n = cacc.deliver_int(sums, 16)
    assert out.tolist()[-2:] == [2, -2]  # 1.5 -> 2, -1.5 -> -2
    assert out.tolist()[6:8] == [2**31 - 1, -2**31] and n == 1  # -2^47 / 2^16 = -2^31 fits
    assert cacc.accumulate_int(np.array([2**47 - 5]), [10]).tolist() == [2**47 - 1]
    assert cacc.accumulate_int(np.array([-2**47 + 5]), [-10]).tolist() == [-2**47]


def test_the_input_converter() -> None:
    """CDMA's converter on feature data: (x - offset) * scale / 2^truncate, half away from zero, saturated."""
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 8, 3, 3))
    w = np.zeros((1, 8, 1, 1), dtype=np.int64)
    w[0, 0, 0, 0] = 1  # the output is the converted channel 0
    p, mem = setup(NV_FULL, Precision.INT8, x, w, cvt=(-20, 3, 2))
    out = conv.execute(p, mem, NV_FULL).to_sdp[0, 0]
    ref = [[max(-128, min(127, round_half_away(Fraction((int(v) + 20) * 3,
                                                        4)))) for v in row] for row in x[0, 0]]
    assert out.tolist() == ref


def test_one_by_one_packed_input_is_read_as_consecutive_atoms() -> None:
    """A 1x1 cube with packed lines and surfaces: CDMA reads its atoms one after the other whatever the
    surface stride says (nvdla/hw cmod/cdma, the 1x1 path); unpacked, it follows the stride."""
    rng = np.random.default_rng(4)
    x = rng.integers(-100, 100, (1, 70, 1, 1))
    w = rng.integers(-100, 100, (3, 70, 1, 1))
    p, mem = setup(NV_FULL, Precision.INT8, x, w)
    assert p.cdma.surf_packed == 1 and p.cdma.surf_stride == 32
    expected = (w[:, :, 0, 0] @ x[0, :, 0, 0]).tolist()
    assert conv.execute(_with(p, "cdma", surf_stride=64), mem, NV_FULL).to_sdp[0, :, 0,
                                                                               0].tolist() == expected
    unpacked = _with(p, "cdma", surf_stride=64, surf_packed=0)
    assert conv.execute(unpacked, mem, NV_FULL).to_sdp[0, :, 0, 0].tolist() != expected


def test_both_gemm_precisions_are_exact() -> None:
    """A bound below 2^24 takes float32; above it float64, where float32 would have rounded."""
    x = np.full((1, 1024, 3, 3), 127, dtype=np.int64)
    x[0, ::2] = -127
    x[0, 1, 1, 1] = 126
    w = np.full((2, 1024, 3, 3), 127, dtype=np.int64)
    p, mem = setup(NV_FULL, Precision.INT8, x, w, pad=(0, 0, 0, 0))
    assert conv_int.bound(127, DirectAtoms(Taps(x, _geometry(x, w), 0), w, 64)) >= conv_int.SGEMM_EXACT
    out = conv.execute(p, mem, NV_FULL).to_sdp
    exact = int((x[0].reshape(-1) * w[0].reshape(-1)).sum())
    assert out[0, 0, 0, 0] == exact == -127
    big = x[0].reshape(1, -1).astype(np.float32) * np.float32(1e4)  # what float32 does to such sums
    assert float((big @ w[0].reshape(-1, 1).astype(np.float32))[0, 0]) != exact * 1e4


def _geometry(x: npt.NDArray[np.int64], w: npt.NDArray[np.int64]) -> Geometry:
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    return Geometry(batches=n, channel=c, height=h, width=wd, kernels=k, kernel_height=r, kernel_width=s,
                    stride_x=1, stride_y=1, dilation_x=1, dilation_y=1, pad_left=0, pad_top=0,
                    out_width=wd - s + 1, out_height=h - r + 1)


def test_48_bit_saturation_in_the_only_reachable_case() -> None:
    """BYTE_PER_KERNEL has 18 bits: at most 2^17 INT16 products per output, so |sum| <= 2^47, reached
    only when every product is (-2^15)^2. CACC then holds 2^47 - 1 (and delivers int32 max anyway)."""
    g = Geometry(batches=1, channel=8192, height=4, width=4, kernels=1, kernel_height=4, kernel_width=4,
                 stride_x=1,
                 stride_y=1, dilation_x=1, dilation_y=1, pad_left=0, pad_top=0, out_width=1, out_height=1)
    x = np.full((1, 8192, 4, 4), -32768, dtype=np.int16)
    w = np.full((1, 8192, 4, 4), -32768, dtype=np.int16)
    sums = conv_int.accumulate(DirectAtoms(Taps(x, g, 0), w, 64))
    assert sums.tolist() == [[[[2**47 - 1]]]]
    x[0, 0, 0, 0] = 32767  # one product smaller: no saturation, the float64 path, exact
    sums = conv_int.accumulate(DirectAtoms(Taps(x, g, 0), w, 64))
    assert sums.tolist() == [[[[2**47 - 2**30 - 32768 * 32767]]]]


def test_weight_layout_offsets() -> None:
    """formats.md's formula, by hand: nv_small INT8 groups of 8 kernels x 8 channels, K = 10, C = 11, 1x2."""
    off = conv_weights.offsets(10, 11, 1, 2, NV_SMALL, Precision.INT8)
    rs, c_total = 2, 11
    # kernel 0, channel 0, s 0 -> 0; channel 1 -> 1; s 1 -> after the 8 kernels' first 8 channels
    assert off[0, 0, 0, 0] == 0 and off[0, 1, 0, 0] == 1 and off[0, 0, 0, 1] == 8 * 8
    assert off[1, 0, 0, 0] == 8  # the next kernel of the group
    assert off[0, 8, 0, 0] == 8 * 8 * rs  # the partial channel block (3 channels) after the full one
    assert off[1, 9, 0, 1] == 8 * 8 * rs + 1 * 3 * 8 + 1 * 3 + 1
    assert off[8, 0, 0, 0] == 8 * rs * c_total  # the partial kernel group (2 kernels)
    assert off[9, 10, 0, 1] == 8 * rs * c_total + 8 * rs * 2 + 1 * 3 * 2 + 1 * 3 + 2
    assert sorted(off.reshape(-1).tolist()) == list(range(10 * 11 * 2))
    w = np.arange(10 * 11 * 2, dtype=np.int64).reshape(10, 11, 1, 2) % 251 - 125
    raw = conv_weights.pack(w, NV_SMALL, Precision.INT8)
    assert (conv_weights.unpack(raw, 10, 11, 1, 2, NV_SMALL, Precision.INT8) == w).all()


def _params() -> conv_params.ConvParams:
    return conv_params.direct(target=NV_FULL, precision=Precision.INT16, width=4, height=4, channel=20,
                              kernels=4, kernel_width=3, kernel_height=3, data_addr=DATA, weight_addr=WEIGHTS,
                              pad=(1, 1, 1, 1))


def _with(p: conv_params.ConvParams, block: str, **changes: int) -> conv_params.ConvParams:
    return dataclasses.replace(p, **{block: dataclasses.replace(getattr(p, block), **changes)})


@pytest.mark.parametrize(("block", "changes", "code", "text"), [
    ("cdma", dict(datain_width=8192), NvError.BadValue, "CDMA datain_width"),
    ("csc", dict(x_dilation_ext=32), NvError.BadValue, "CSC x_dilation_ext"),
    ("cacc", dict(clip_truncate=17), NvError.BadValue, "CACC clip_truncate"),
    ("cacc", dict(dataout_width=2), NvError.BadValue, "CACC dataout_width"),
    ("csc", dict(weight_channel_ext=18), NvError.BadValue, "CSC weight_channel_ext"),
    ("cmac_b", dict(proc_precision=0), NvError.BadValue, "CMAC_B proc_precision"),
    ("cdma", dict(in_precision=0), NvError.BadValue, "CDMA in_precision"),
    ("cdma", dict(byte_per_kernel=100), NvError.BadValue, "CDMA byte_per_kernel"),
    ("cdma", dict(weight_addr=WEIGHTS + 8), NvError.BadValue, "CDMA weight_addr"),
    ("cdma", dict(line_packed=0), NvError.BadValue, "CDMA line_packed"),
    ("cdma", dict(cvt_scale=1 << 16), NvError.BadValue, "CDMA cvt_scale"),
])
def test_refusals(block: str, changes: dict[str, int], code: NvError, text: str) -> None:
    p = _with(_params(), block, **changes)
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 22), NV_FULL)
    assert e.value.code == code and text in e.value.message


def test_reserved_precision_code() -> None:
    p = _params()
    for block, names in (("cdma", ("in_precision", "proc_precision")),
                         ("csc", ("in_precision", "proc_precision")),
                         ("cmac_a", ("proc_precision",)), ("cmac_b", ("proc_precision",)),
                         ("cacc", ("proc_precision",))):
        p = _with(p, block, **dict.fromkeys(names, 3))
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 22), NV_FULL)
    assert e.value.code == NvError.BadValue and "PROC_PRECISION: precision code 3" in e.value.message


def test_weight_bytes_must_hold_the_kernels() -> None:
    p = _with(_with(_params(), "cdma", weight_bytes=128), "csc", weight_bytes=128)
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 22), NV_FULL)
    assert e.value.code == NvError.InvalidSize and "CDMA weight_bytes" in e.value.message


def test_direct_registers_in_winograd_mode_are_refused() -> None:
    """A direct convolution's registers with CONV_MODE Winograd: the Winograd checks refuse them (here the
    padded input is not a multiple of 4)."""
    p = _params()
    for b in ("cdma", "csc", "cmac_a", "cmac_b", "cacc"):
        p = _with(p, b, conv_mode=1)
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 22), NV_FULL)
    assert e.value.code == NvError.BadValue and "CDMA pad_right: the padded input" in e.value.message


def test_configuration_refusals() -> None:
    p = conv_params.direct(target=NV_SMALL, precision=Precision.INT16, width=2, height=2, channel=8,
                           kernels=8,
                           kernel_width=1, kernel_height=1, data_addr=DATA, weight_addr=WEIGHTS)
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 22), NV_SMALL)
    assert e.value.code == NvError.NotSupported and "INT16" in e.value.message
    p = conv_params.direct(target=NV_SMALL, precision=Precision.INT8, width=2, height=2, channel=8, kernels=8,
                           kernel_width=1, kernel_height=1, data_addr=DATA, weight_addr=WEIGHTS, batches=2,
                           batch_stride=64)
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 22), NV_SMALL)
    assert e.value.code == NvError.NotSupported and "batches" in e.value.message


def test_memory_outside_is_refused_naming_the_field() -> None:
    p = _params()
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(0x3000), NV_FULL)  # the data fits, the weights do not
    assert e.value.code == NvError.InvalidAddress and "CDMA weights" in e.value.message
    with pytest.raises(DlaError) as e:
        conv.execute(_with(p, "cdma", datain_addr_0=1 << 40), ByteMemory(1 << 22), NV_FULL)
    assert e.value.code == NvError.InvalidAddress and "CDMA data" in e.value.message


def test_compressed_weight_format_by_hand() -> None:
    """One kernel of 3 channels (5, 0, 7): mask bits 1, 0, 1 (least significant first), the stored
    elements 5 and 7, one group of 2 bytes."""
    w = np.array([5, 0, 7]).reshape(1, 3, 1, 1)
    wmb, stream, wgs = conv_compressed.compress(w, NV_FULL, Precision.INT8)
    assert (wmb[0], wmb[1:].any(), wmb.size) == (0b101, False, 128)
    assert stream[:2].tolist() == [5, 7] and not stream[2:].any()
    assert wgs[:4].tolist() == [2, 0, 0, 0] and wgs.size == 32


@pytest.mark.parametrize("prec", [Precision.INT8, Precision.INT16, Precision.FP16])
def test_compressed_weights_round_trip(prec: Precision) -> None:
    rng = np.random.default_rng(int(prec))
    w = rng.integers(-100, 100, (37, 70, 2, 3)) * (rng.random((37, 70, 2, 3)) < 0.4)
    if prec is Precision.FP16:
        w = w.astype(np.float16).view(np.uint16).astype(np.int64)
    wmb, stream, wgs = conv_compressed.compress(w, NV_FULL, prec)
    back = conv_compressed.decompress(wmb, stream, wgs, 37, 70, 2, 3, NV_FULL, prec)
    assert (back.astype(np.int64) == w).all()
    assert stream.size < conv_weights.pack(w, NV_FULL, prec).size


def _compressed(p: conv_params.ConvParams, mem: ByteMemory, w: npt.NDArray[np.int64], prec: Precision
                ) -> conv_params.ConvParams:
    wmb, stream, wgs = conv_compressed.compress(w, NV_FULL, prec)
    wmb_addr, wgs_addr = WEIGHTS + 0x100000, WEIGHTS + 0x180000
    mem.write(WEIGHTS, stream)
    mem.write(wmb_addr, wmb)
    mem.write(wgs_addr, wgs)
    p = _with(p, "cdma", weight_format=1, weight_bytes=stream.size, wmb_addr=wmb_addr, wmb_bytes=wmb.size,
              wgs_addr=wgs_addr)
    return _with(p, "csc", weight_format=1, weight_bytes=stream.size, wmb_bytes=wmb.size)


def test_convolution_with_compressed_weights() -> None:
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (1, 70, 4, 5))
    w = rng.integers(-128, 128, (40, 70, 3, 3)) * (rng.random((40, 70, 3, 3)) < 0.3)
    p, mem = setup(NV_FULL, Precision.INT8, x, w, pad=(1, 1, 1, 1))
    dense = conv.execute(p, mem, NV_FULL).to_sdp
    mem.write(WEIGHTS, np.zeros(p.cdma.weight_bytes, np.uint8))  # the uncompressed copy is gone
    pc = _compressed(p, mem, w, Precision.INT8)
    assert (conv.execute(pc, mem, NV_FULL).to_sdp == dense).all()
    # a group size below what the group stores would let CSC read weights that have not arrived
    mem.write(pc.cdma.wgs_addr, np.array([1, 0, 0, 0], np.uint8))
    with pytest.raises(DlaError) as e:
        conv.execute(pc, mem, NV_FULL)
    assert e.value.code == NvError.BadValue and "kernel group 0" in e.value.message
    short = _with(_with(pc, "cdma", wmb_bytes=128), "csc", wmb_bytes=128)
    with pytest.raises(DlaError) as e:
        conv.execute(short, mem, NV_FULL)
    assert e.value.code == NvError.InvalidSize and "wmb_bytes" in e.value.message


def test_compressed_weights_need_nv_full() -> None:
    p = conv_params.direct(target=NV_SMALL, precision=Precision.INT8, width=2, height=2, channel=8, kernels=8,
                           kernel_width=1, kernel_height=1, data_addr=DATA, weight_addr=WEIGHTS)
    p = _with(_with(p, "cdma", weight_format=1), "csc", weight_format=1)
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 22), NV_SMALL)
    assert e.value.code == NvError.NotSupported and "compression" in e.value.message


def test_nv_full_weight_bytes_count_128() -> None:
    """nv_full's D_WEIGHT_BYTES holds bits 31:7: a size that is not a multiple of 128 would lose its tail."""
    p = _with(_with(_params(), "cdma", weight_bytes=2900), "csc", weight_bytes=2900)
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 22), NV_FULL)
    assert e.value.code == NvError.BadValue and "CDMA weight_bytes" in e.value.message
    assert "128" in e.value.message
