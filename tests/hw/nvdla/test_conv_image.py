"""Image (pixel) input convolution: CDMA's pixel formats and converter, CBUF lines, CSC's pre- and
post-extended atoms, against a per-output Python reference (integer) and against NVIDIA's C model.

The C model's values were produced outside the repository by compiling nvdla/hw ``cmod`` (nv_full) whole
with g++ and SystemC, programming the convolution's registers and an on-the-fly SDP through its CSB
port, the picture and weights in its memory, and recording what CACC sent the SDP; they are kept as
SHA-256 digests of the outputs for the seeded cases below (docs/development/nvdla/plan.md has the
wider campaign)."""

from __future__ import annotations

import dataclasses
import hashlib
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import conv, conv_image, conv_params, pixel
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NV_FULL

DATA, UV, WEIGHTS = 0x1000, 0x40000, 0x100000
I64 = npt.NDArray[np.int64]


def digest(a: npt.ArrayLike) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(a, dtype="<i8")).tobytes()).hexdigest()[:32]


def image_case(seed: int) -> tuple[conv_params.ConvParams, ByteMemory]:
    """A seeded image convolution: any of the 36 formats, converter, means, sign, pads, strides, post
    extension, pixel offset; the picture and weights random."""
    rng = np.random.default_rng(seed)
    code = int(rng.integers(0, 36))
    fmt = pixel.FORMATS[code]
    prec = Precision.FP16 if fmt.unit == pixel.F16 else Precision(int(rng.integers(0, 3)))
    cvt = None
    if prec is not fmt.in_precision or rng.random() < 0.6:
        cvt = (int(rng.integers(-300, 300)), int(rng.integers(-400, 400)), int(rng.integers(0, 12)))
    mean = tuple(int(v) for v in rng.integers(-200, 200, 4)) if cvt and rng.random() < 0.5 else None
    w_n, h_n = int(rng.integers(1, 24)), int(rng.integers(1, 10))
    s_n, r_n = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    pl, pr, pt, pb = (int(v) for v in rng.integers(0, 4, 4))
    sx, sy = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    w_n, h_n = max(w_n, s_n), max(h_n, r_n)
    kc = s_n * fmt.elements
    posts = [p for p in (1, 2, 4) if kc <= 64 // p]
    post = posts[int(rng.integers(0, len(posts)))]
    k_n = int(rng.integers(1, 40))
    x_off = int(rng.integers(0, 20)) if rng.random() < 0.25 else 0
    if fmt.plane1 and x_off * fmt.plane1 >= 64:
        x_off = 0
    ls = -(-((x_off + w_n) * fmt.plane0 + int(rng.integers(0, 40))) // 32) * 32
    uvs = 0
    if fmt.plane1:
        uvs = -(-((x_off * fmt.plane1) % 32 + w_n * fmt.plane1 + int(rng.integers(0, 40))) // 32) * 32
    pad_value = int(rng.integers(0, 1 << 16))
    if prec is Precision.FP16:
        pad_value = int(np.array([rng.standard_normal()], np.float16).view(np.uint16)[0])
    p = conv_params.image(target=NV_FULL, in_precision=fmt.in_precision, precision=prec, pixel_format=code,
                          elements=fmt.elements, width=w_n, height=h_n, kernels=k_n, kernel_width=s_n,
                          kernel_height=r_n, data_addr=DATA, weight_addr=WEIGHTS, line_stride=ls, uv_addr=UV,
                          uv_line_stride=uvs, stride=(sx, sy), pad=(pl, pr, pt, pb), pad_value=pad_value,
                          clip_truncate=int(rng.integers(0, 4)) if prec.is_int else 0, cvt=cvt, mean=mean,
                          sign_override=int(rng.integers(0, 2)), post_extension=post,
                          nan_to_zero=int(rng.integers(0, 2)))
    p = dataclasses.replace(p, cdma=dataclasses.replace(p.cdma, pixel_x_offset=x_off))
    mem = ByteMemory(1 << 21)
    if fmt.unit == pixel.F16:
        values = (rng.standard_normal(0x18000) * 4).astype(np.float16).view(np.uint8)
        values[::97] = 0xFF  # NaNs among them
        mem.data[DATA:DATA + values.size] = values
    else:
        mem.data[DATA:DATA + 0x30000] = rng.integers(0, 256, 0x30000, dtype=np.uint8)
    mem.data[UV:UV + 0x30000] = rng.integers(0, 256, 0x30000, dtype=np.uint8)
    if prec is Precision.FP16:
        w = (rng.standard_normal((k_n, r_n, kc)) / 4).astype(np.float16).view(np.uint16)
    else:
        info = np.iinfo(prec.dtype)
        w = rng.integers(info.min, info.max + 1, (k_n, r_n, kc)).astype(prec.dtype)
    mem.write(WEIGHTS, conv_image.pack(w, NV_FULL, prec, post))
    return p, mem


# digests of NVIDIA's C model's CACC output (N, K, H, W as int64) for image_case(seed)
IMAGE_DIGESTS = {
    0: "aade425baee67123c7187bbf200a5a12",  # Y10 semi-planar, INT16, 4 rows per atom, 32-bit saturation
    2: "0af5f0b2df10696dfa81c8e45b6feb28",  # Y10 -> INT8 with the means, 2 rows per atom
    4: "75d298646c2a66ab6d34401d50ee1566",  # A8Y8U8V8 -> FP16, means
    5: "f75aa797e08e811a220352a5768b6ff3",  # A2Y10U10V10 (packed 10 bit) -> FP16
    6: "0fee76a64345097499fbb962fa481e23",  # X8B8G8R8 -> INT16, pixel offset 17
    7: "76e1ddcd2f77a5f525cbd4933f43cd0c",  # Y16 semi-planar, no converter
    8: "e26ef52d1e4dbb02d9e9a98ff00acf98",  # V10U10Y10A2 -> INT8, pixel offset 9
    14: "a0dd397624316adb2699ecdabc653dc9",  # R16_F with NaNs
    19: "fd4f38eb5cab7575a0d2622fae620e7a",  # A2R10G10B10, INT16 without converter
    23: "3de02e4b580a67f47febdd8314d7a777",  # R10 -> FP16, pixel offset 6
    27: "72b7c5fe5d5962fc0eb2842e6c2b3c47",  # R8 -> FP16
    36: "888b9417452dc85e1c8aba199c75de0a",  # A8R8G8B8, INT8
    38: "38b0bd94253532c705020c8e00a95d02",  # A16B16G16R16_F, 4 rows per atom
}


@pytest.mark.parametrize("seed", sorted(IMAGE_DIGESTS))
def test_image_convolution_matches_nvidias(seed: int) -> None:
    p, mem = image_case(seed)
    result = conv.execute(p, mem, NV_FULL)
    out = result.to_sdp if p.cacc.proc_precision != 2 else result.to_sdp.view(np.int32)
    assert digest(out) == IMAGE_DIGESTS[seed]


def test_uv_plane_past_one_atom() -> None:
    """A pixel offset of one atom or more into the UV plane: the C model fetches the UV line from its
    start and files its pixels one atom further on (Y12 semi-planar, offset 12)."""
    p, mem = image_case(1001)
    fmt = pixel.FORMATS[p.cdma.pixel_format]
    assert fmt.name == "Y12___U12V12_N444"
    d = p.cdma
    ls = -(-((8 + d.datain_width + 1) * fmt.plane0) // 32) * 32
    uvs = -(-(((8 * fmt.plane1) % 32) + (d.datain_width + 1) * fmt.plane1) // 32) * 32
    d = dataclasses.replace(d, pixel_x_offset=12, line_stride=max(ls, d.line_stride) + 32,
                            uv_line_stride=max(uvs, d.uv_line_stride) + 32)
    p = dataclasses.replace(p, cdma=d)
    out = conv.execute(p, mem, NV_FULL).to_sdp.view(np.int32)
    assert digest(out) == "bf30bb202b289d5aa0f00c36fec6f36b"


def round_half_away(v: Fraction) -> int:
    q = int(abs(v) + Fraction(1, 2))
    return q if v >= 0 else -q


def _picture_word(fmt: pixel.PixelFormat, channels: tuple[int, ...]) -> bytes:
    """One pixel's bytes from its components, reading the format's name as a little-endian word from its
    most significant component (A8B8G8R8: A in bits 31..24, R in 7..0); channel order R, G, B, A (or Y,
    U, V, A)."""
    named = dict(zip("RGBA", channels, strict=False))
    named.update(zip("YUV", channels, strict=False))
    name = fmt.name.split("_")[0]
    parts = [(name[i], int(name[i + 1:i + 3]) if name[i + 1:i + 3].isdigit() else int(name[i + 1]))
             for i in range(len(name)) if name[i].isalpha()]
    word, shift = 0, 0
    for letter, bits in reversed(parts):
        value = named.get(letter, 0) if letter != "X" else 0
        word |= (value & ((1 << bits) - 1)) << shift
        shift += bits
    return word.to_bytes(shift // 8, "little")


@pytest.mark.parametrize("code", [6, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27])
def test_channel_order_of_each_packed_format(code: int) -> None:
    """One pixel through a 1x1 kernel per channel (weight 1): the kernels see its channels in the order
    R, G, B, A (Y, U, V, A), the format's name read as a little-endian word; 10-bit components are shifted
    left by 6 (the 2-bit alpha by 14)."""
    fmt = pixel.FORMATS[code]
    comps = (0x155, 0x2A3, 0x0F1, 0x2) if fmt.unit == pixel.PACKED else (11, 22, 33, 44)
    if fmt.unit == pixel.U16:
        comps = (1111, 2222, 3333, 4444)
    raw = _picture_word(fmt, comps)
    prec = fmt.in_precision
    p = conv_params.image(target=NV_FULL, in_precision=prec, precision=prec, pixel_format=code, elements=4,
                          width=1, height=1, kernels=4, kernel_width=1, kernel_height=1, data_addr=DATA,
                          weight_addr=WEIGHTS, line_stride=32)
    mem = ByteMemory(1 << 21)
    mem.write(DATA, np.frombuffer(raw, dtype=np.uint8))
    mem.write(WEIGHTS, conv_image.pack(np.eye(4, dtype=np.int64).reshape(4, 1, 4), NV_FULL, prec))
    got = conv.execute(p, mem, NV_FULL).to_sdp[0, :, 0, 0].tolist()
    if fmt.unit == pixel.PACKED:
        want = [(c << 6) for c in comps[:3]] + [comps[3] << 14]
        want = [v - (1 << 16) if v >= 1 << 15 else v for v in want]  # INT16 elements
    else:
        want = list(comps)
    if "X" in fmt.name:  # the unused component (0 in this pixel) is the fourth channel
        want[3] = 0
    assert got == want


@pytest.mark.parametrize("code", [28, 29, 30, 35])
def test_channel_order_of_semi_planar_formats(code: int) -> None:
    """Y from the first plane, U and V from the interleaved second plane (its name read as a word)."""
    fmt = pixel.FORMATS[code]
    big = fmt.unit == pixel.U16
    y, u, v = (1000, 2000, 3000) if big else (10, 20, 30)
    uv_name = fmt.name.split("___")[1].split("_")[0]  # "U8V8": U in the high half
    first, second = (u, v) if uv_name.startswith("U") else (v, u)
    size = 2 if big else 1
    uv = (second | (first << (8 * size))).to_bytes(2 * size, "little")
    prec = fmt.in_precision
    p = conv_params.image(target=NV_FULL, in_precision=prec, precision=prec, pixel_format=code, elements=3,
                          width=1, height=1, kernels=3, kernel_width=1, kernel_height=1, data_addr=DATA,
                          weight_addr=WEIGHTS, line_stride=32, uv_addr=UV, uv_line_stride=32)
    mem = ByteMemory(1 << 21)
    mem.write(DATA, np.frombuffer(y.to_bytes(size, "little"), dtype=np.uint8))
    mem.write(UV, np.frombuffer(uv, dtype=np.uint8))
    mem.write(WEIGHTS, conv_image.pack(np.eye(3, dtype=np.int64).reshape(3, 1, 3), NV_FULL, prec))
    assert conv.execute(p, mem, NV_FULL).to_sdp[0, :, 0, 0].tolist() == [y, u, v]


def _reference(channels: I64, w: I64, stride: tuple[int, int], pad: tuple[int, int, int, int],
               pad_left_right: int, pad_top_bottom: int, truncate: int) -> I64:
    """Per output, from formats.md/arithmetic.md: the converted picture (H, W, C) padded left and right
    with CDMA's padding value, above and below with CSC's, convolved with the original kernels (K, C, R,
    S), CACC's rounding and 32-bit saturation."""
    h, wd, c = channels.shape
    k_n, _, r_n, s_n = w.shape
    left, right, top, bottom = pad
    oh, ow = (h + top + bottom - r_n) // stride[1] + 1, (wd + left + right - s_n) // stride[0] + 1
    out = np.zeros((k_n, oh, ow), dtype=np.int64)
    for k in range(k_n):
        for oy in range(oh):
            for ox in range(ow):
                acc = 0
                for r in range(r_n):
                    for s in range(s_n):
                        y, x = oy * stride[1] + r - top, ox * stride[0] + s - left
                        for ch in range(c):
                            if not 0 <= y < h:
                                v = pad_top_bottom
                            elif not 0 <= x < wd:
                                v = pad_left_right
                            else:
                                v = int(channels[y, x, ch])
                            acc += v * int(w[k, ch, r, s])
                t = round_half_away(Fraction(acc, 1 << truncate))
                out[k, oy, ox] = max(-(1 << 31), min((1 << 31) - 1, t))
    return out


@pytest.mark.parametrize(("code", "prec", "post", "seed"), [
    (12, Precision.INT16, 1, 1), (12, Precision.INT16, 2, 2), (13, Precision.INT8, 4, 3),
    (28, Precision.INT16, 2, 4), (29, Precision.INT8, 1, 5), (0, Precision.INT16, 4, 6)])
def test_integer_image_convolution_against_reference(code: int, prec: Precision, post: int,
                                                     seed: int) -> None:
    rng = np.random.default_rng(seed)
    fmt = pixel.FORMATS[code]
    c = fmt.elements
    h, wd = int(rng.integers(2, 7)), int(rng.integers(2, 9))
    r_n, s_n = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    while s_n * c > 64 // post:
        s_n -= 1
    k_n = int(rng.integers(1, 20))
    pad = tuple(int(v) for v in rng.integers(0, 3, 4))
    stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    offset, scale = int(rng.integers(-50, 50)), int(rng.integers(-300, 300))
    truncate = int(rng.integers(0, 6))
    means = tuple(int(v) for v in rng.integers(-100, 100, 4))
    sign = int(rng.integers(0, 2))
    pictures = rng.integers(0, 256, (h, wd, c))
    info = np.iinfo(prec.dtype)
    w = rng.integers(info.min, info.max + 1, (k_n, c, r_n, s_n))
    pad_value = int(rng.integers(-100, 100))
    cvt = (offset, scale, truncate) if prec is not Precision.INT8 else None
    p = conv_params.image(target=NV_FULL, in_precision=Precision.INT8, precision=prec, pixel_format=code,
                          elements=c, width=wd, height=h, kernels=k_n, kernel_width=s_n, kernel_height=r_n,
                          data_addr=DATA, weight_addr=WEIGHTS, line_stride=wd * 8 // 32 * 32 + 64, uv_addr=UV,
                          uv_line_stride=64, stride=stride, pad=pad, pad_value=pad_value, clip_truncate=1,
                          cvt=cvt, mean=means if cvt else None, sign_override=sign, post_extension=post)
    mem = ByteMemory(1 << 21)
    for y in range(h):
        for x in range(wd):
            px = tuple(int(v) for v in pictures[y, x])
            if fmt.plane1:  # Y, then the UV word: "U8V8" has U in its high byte
                uv = [px[2], px[1]] if fmt.name.endswith("U8V8_N444") else [px[1], px[2]]
                mem.write(DATA + y * p.cdma.line_stride + x, np.array([px[0]], np.uint8))
                mem.write(UV + y * 64 + 2 * x, np.array(uv, np.uint8))
            else:
                raw = _picture_word(fmt, px) if c == 4 else bytes([px[0]])
                mem.write(DATA + y * p.cdma.line_stride + x * len(raw), np.frombuffer(raw, np.uint8))
    mem.write(WEIGHTS, conv_image.pack(conv_image.pre_extend(w, c), NV_FULL, prec, post))
    x = pictures - 256 * (pictures >= 128) if sign else pictures
    if cvt:
        conv_x = np.vectorize(lambda v, m: max(-(1 << 15), min((1 << 15) - 1, round_half_away(
            Fraction((int(v) - m) * scale, 1 << truncate)))))
        x = np.stack([conv_x(x[..., ch], means[ch]) for ch in range(c)], axis=-1)
    else:
        x = pictures - 256 * (pictures >= 128)  # INT8 elements: the bytes as they are
    pad_lr = pad_value if prec is Precision.INT16 else (pad_value & 0xFF) - 256 * ((pad_value & 0xFF) >= 128)
    expect = _reference(x, w, stride, pad, pad_lr, pad_lr, 1)
    assert conv.execute(p, mem, NV_FULL).to_sdp[0].tolist() == expect.tolist()


def _rgba(**kw: object) -> conv_params.ConvParams:
    args: dict[str, object] = dict(target=NV_FULL, in_precision=Precision.INT8, precision=Precision.INT8,
                                   pixel_format=12, elements=4, width=8, height=4, kernels=5, kernel_width=3,
                                   kernel_height=3, data_addr=DATA, weight_addr=WEIGHTS, line_stride=64)
    args.update(kw)
    return conv_params.image(**args)  # type: ignore[arg-type]


def _change(p: conv_params.ConvParams, block: str, **kw: int) -> conv_params.ConvParams:
    return dataclasses.replace(p, **{block: dataclasses.replace(getattr(p, block), **kw)})


@pytest.mark.parametrize(("params", "code", "text"), [
    (_change(_rgba(), "cdma", pixel_mapping=1), NvError.NotSupported, "CDMA pixel_mapping"),
    (_change(_rgba(), "cdma", in_precision=1), NvError.BadValue, "CDMA in_precision"),
    (_rgba(precision=Precision.INT16), NvError.BadValue, "CDMA cvt_en"),
    (_rgba(pixel_format=5, elements=1, in_precision=Precision.FP16, precision=Precision.FP16, cvt=(0, 1, 0)),
     None, ""),
    (_change(_rgba(pixel_format=5, elements=1, in_precision=Precision.FP16, precision=Precision.FP16), "cdma",
             proc_precision=1), NvError.BadValue, "CDMA proc_precision"),
    (_change(_change(_rgba(), "csc", weight_width_ext=1), "cdma", byte_per_kernel=71), NvError.BadValue,
     "CSC weight_width_ext"),
    (_change(_rgba(), "cdma", pixel_format=36), NvError.BadValue, "CDMA pixel_format"),
    (_change(_rgba(), "csc", y_extension=3), NvError.BadValue, "CSC y_extension"),
    (_change(_rgba(kernel_width=5), "csc", y_extension=2), NvError.BadValue, "CSC weight_channel_ext"),
    (_rgba(width=9, line_stride=32), NvError.BadValue, "CDMA line_stride"),
    (_rgba(pixel_format=28, elements=3, uv_addr=UV, uv_line_stride=0), NvError.BadValue,
     "CDMA uv_line_stride"),
    (_change(_rgba(pixel_format=34, elements=3, in_precision=Precision.INT16, precision=Precision.INT16,
                   uv_addr=UV, uv_line_stride=128), "cdma", pixel_x_offset=16), NvError.NotSupported,
     "CDMA pixel_x_offset"),
    (_change(_change(_rgba(height=300, width=100, line_stride=512), "csc", data_bank=0), "cdma", data_bank=0),
     NvError.BadValue, "CSC data_bank"),
    (_change(_change(_rgba(), "csc", entries=2), "cdma", entries=2), NvError.BadValue, "CSC entries"),
])
def test_image_refusals(params: conv_params.ConvParams, code: NvError | None, text: str) -> None:
    mem = ByteMemory(1 << 21)
    if code is None:  # the converter passes FP16 pixels through: accepted
        conv.execute(params, mem, NV_FULL)
        return
    with pytest.raises(DlaError) as e:
        conv.execute(params, mem, NV_FULL)
    assert e.value.code == code and text in e.value.message


def test_image_batches_refused() -> None:
    p = _change(_change(_change(_rgba(), "cdma", batches=1), "csc", batches=1), "cacc", batches=1)
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 21), NV_FULL)
    assert e.value.code == NvError.NotSupported and "CDMA batches" in e.value.message


def test_post_extended_weight_layout_by_hand() -> None:
    """Two rows per atom, kernel groups of 2 (kf), 3 kernels of 5 rows x 4 channels: per group, per row
    pair, per kernel the pair's rows one after the other; the last pair is the fifth row alone."""
    off = conv_image.weight_offsets(3, 5, 4, 2, 2)
    assert off[0, 0, 0] == 0 and off[0, 0, 3] == 3 and off[0, 1, 0] == 4  # row 1 follows row 0
    assert off[1, 0, 0] == 8  # kernel 1 of the group after kernel 0's two rows
    assert off[0, 2, 0] == 2 * 8  # the next row pair after both kernels' pairs
    assert off[0, 4, 0] == 2 * 2 * 8 and off[1, 4, 0] == 2 * 2 * 8 + 4  # the lone fifth row: 4 elements
    assert off[2, 0, 0] == 2 * 5 * 4  # the second group (one kernel)
    assert sorted(off.reshape(-1).tolist()) == list(range(3 * 5 * 4))
