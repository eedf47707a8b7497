"""The convolution pipeline's register-level parameters: CDMA, CSC, CMAC_A/B and CACC.

One frozen dataclass per block, field names the block's register field names in lower case (CDMA
``D_ZERO_PADDING.PAD_LEFT`` is ``cdma.pad_left``, CSC ``D_WEIGHT_SIZE_EXT_0.WEIGHT_WIDTH_EXT`` is
``csc.weight_width_ext``). Sizes, kernel sizes, strides, dilations and batch counts hold value - 1
as the registers do; addresses (HIGH and LOW joined), strides and byte counts are bytes. NVIDIA's
firmware programs the five blocks together from one descriptor (kmd/firmware/conv.c); :func:`direct`
does the same from plain numbers, for tests and tools.

Usage::

    p = direct(target=NV_FULL, precision=Precision.INT8, width=56, height=56, channel=64, kernels=64,
               kernel_width=3, kernel_height=3, pad=(1, 1, 1, 1), data_addr=0x1000, weight_addr=...)
    result = conv.execute(p, mem, NV_FULL)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydla.hw.nvdla.memory import RAM_MC
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NvdlaTarget

CONV_DIRECT, CONV_WINOGRAD = 0, 1  # D_MISC_CFG.CONV_MODE
FEATURE, PIXEL = 0, 1  # D_DATAIN_FORMAT.DATAIN_FORMAT
UNCOMPRESSED, COMPRESSED = 0, 1  # D_WEIGHT_FORMAT.WEIGHT_FORMAT


@dataclass(frozen=True)
class CdmaParams:
    """CDMA: fetches the input cube (converting it when ``cvt_en``) and the weights into CBUF."""

    in_precision: int = 0  # D_MISC_CFG: 0 INT8, 1 INT16, 2 FP16
    proc_precision: int = 0
    conv_mode: int = CONV_DIRECT
    data_reuse: int = 0
    weight_reuse: int = 0
    skip_data_rls: int = 0
    skip_weight_rls: int = 0
    datain_format: int = FEATURE  # D_DATAIN_FORMAT
    pixel_format: int = 0
    pixel_mapping: int = 0
    pixel_sign_override: int = 0
    pixel_x_offset: int = 0  # D_PIXEL_OFFSET (image input; NVIDIA's firmware leaves it 0)
    pixel_y_offset: int = 0
    datain_width: int = 0  # D_DATAIN_SIZE_0/1: size - 1
    datain_height: int = 0
    datain_channel: int = 0
    datain_width_ext: int = 0  # D_DATAIN_SIZE_EXT_0: size - 1
    datain_height_ext: int = 0
    datain_ram_type: int = RAM_MC
    datain_addr_0: int = 0  # D_DAIN_ADDR_HIGH_0/LOW_0
    datain_addr_1: int = 0  # the second plane of semi-planar images
    line_stride: int = 0
    uv_line_stride: int = 0
    surf_stride: int = 0
    line_packed: int = 0  # D_DAIN_MAP
    surf_packed: int = 0
    batches: int = 0  # D_BATCH_NUMBER: batches - 1
    batch_stride: int = 0
    entries: int = 0  # D_ENTRY_PER_SLICE: entries - 1
    grains: int = 0  # D_FETCH_GRAIN: grains - 1
    weight_format: int = UNCOMPRESSED
    byte_per_kernel: int = 0  # D_WEIGHT_SIZE_0: bytes - 1
    weight_kernel: int = 0  # D_WEIGHT_SIZE_1: kernels - 1
    weight_ram_type: int = RAM_MC
    weight_addr: int = 0
    weight_bytes: int = 0
    wgs_addr: int = 0
    wmb_addr: int = 0
    wmb_bytes: int = 0
    mean_format: int = 0  # D_MEAN_FORMAT, D_MEAN_GLOBAL_0/1 (image input)
    mean_ry: int = 0
    mean_gu: int = 0
    mean_bv: int = 0
    mean_ax: int = 0
    cvt_en: int = 0  # D_CVT_CFG: the input converter
    cvt_truncate: int = 0  # 6 bits
    cvt_offset: int = 0  # 16 bits, signed
    cvt_scale: int = 0  # 16 bits, signed
    conv_x_stride: int = 0  # D_CONV_STRIDE: stride - 1
    conv_y_stride: int = 0
    pad_left: int = 0  # D_ZERO_PADDING
    pad_right: int = 0
    pad_top: int = 0
    pad_bottom: int = 0
    pad_value: int = 0  # D_ZERO_PADDING_VALUE: 16 bits
    data_bank: int = 0  # D_BANK: banks - 1
    weight_bank: int = 0
    nan_to_zero: int = 0  # D_NAN_FLUSH_TO_ZERO: FP16 NaN inputs become +0


@dataclass(frozen=True)
class CscParams:
    """CSC: walks the output positions and kernel positions, hands data and weight atoms to CMAC."""

    in_precision: int = 0  # D_MISC_CFG
    proc_precision: int = 0
    conv_mode: int = CONV_DIRECT
    data_reuse: int = 0
    weight_reuse: int = 0
    skip_data_rls: int = 0
    skip_weight_rls: int = 0
    datain_format: int = FEATURE
    datain_width_ext: int = 0  # D_DATAIN_SIZE_EXT_0/1: size - 1
    datain_height_ext: int = 0
    datain_channel_ext: int = 0
    batches: int = 0
    y_extension: int = 0  # D_POST_Y_EXTENSION (image input)
    entries: int = 0
    weight_format: int = UNCOMPRESSED
    weight_width_ext: int = 0  # D_WEIGHT_SIZE_EXT_0/1: size - 1
    weight_height_ext: int = 0
    weight_channel_ext: int = 0
    weight_kernel: int = 0
    weight_bytes: int = 0
    wmb_bytes: int = 0
    dataout_width: int = 0  # D_DATAOUT_SIZE_0/1: size - 1
    dataout_height: int = 0
    dataout_channel: int = 0
    atomics: int = 0  # D_ATOMICS: output positions - 1
    rls_slices: int = 0  # D_RELEASE: slices - 1
    conv_x_stride_ext: int = 0  # D_CONV_STRIDE_EXT: stride - 1
    conv_y_stride_ext: int = 0
    x_dilation_ext: int = 0  # D_DILATION_EXT: dilation - 1
    y_dilation_ext: int = 0
    pad_left: int = 0  # D_ZERO_PADDING
    pad_top: int = 0
    pad_value: int = 0  # D_ZERO_PADDING_VALUE: 16 bits in the processing precision's encoding
    data_bank: int = 0
    weight_bank: int = 0
    pra_truncate: int = 0  # D_PRA_CFG (Winograd)


@dataclass(frozen=True)
class CmacParams:
    """CMAC_A or CMAC_B: D_MISC_CFG."""

    conv_mode: int = CONV_DIRECT
    proc_precision: int = 0


@dataclass(frozen=True)
class CaccParams:
    """CACC: accumulates the partial sums, truncates and hands them to the SDP."""

    conv_mode: int = CONV_DIRECT  # D_MISC_CFG
    proc_precision: int = 0
    dataout_width: int = 0  # D_DATAOUT_SIZE_0/1: size - 1
    dataout_height: int = 0
    dataout_channel: int = 0
    dataout_addr: int = 0  # 32 bits
    batches: int = 0
    line_stride: int = 0
    surf_stride: int = 0
    line_packed: int = 0  # D_DATAOUT_MAP
    surf_packed: int = 0
    clip_truncate: int = 0  # D_CLIP_CFG: the rounding right shift of the sums (0 … 16)


@dataclass(frozen=True)
class ConvParams:
    """One convolution: the five blocks' registers."""

    cdma: CdmaParams
    csc: CscParams
    cacc: CaccParams
    cmac_a: CmacParams = field(default_factory=CmacParams)
    cmac_b: CmacParams = field(default_factory=CmacParams)


def direct(*, target: NvdlaTarget, precision: Precision, width: int, height: int, channel: int, kernels: int,
           kernel_width: int, kernel_height: int, data_addr: int, weight_addr: int,
           line_stride: int | None = None, surf_stride: int | None = None, stride: tuple[int, int] = (1, 1),
           dilation: tuple[int, int] = (1, 1), pad: tuple[int, int, int, int] = (0, 0, 0, 0),
           pad_value: int = 0,
           clip_truncate: int = 0, batches: int = 1, batch_stride: int = 0,
           cvt: tuple[int, int, int] | None = None, nan_to_zero: int = 0) -> ConvParams:
    """A direct convolution's registers as NVIDIA's firmware programs them (``pad`` is left, right,
    top, bottom; ``stride`` and ``dilation`` are x, y; ``cvt`` is the input converter's offset, scale,
    truncate; strides default to packed surfaces). The output size follows from the input, kernel,
    pads, stride and dilation."""
    atom = target.atom
    ls = width * atom if line_stride is None else line_stride
    ss = height * ls if surf_stride is None else surf_stride
    left, right, top, bottom = pad
    out_w = (width + left + right - ((kernel_width - 1) * dilation[0] + 1)) // stride[0] + 1
    out_h = (height + top + bottom - ((kernel_height - 1) * dilation[1] + 1)) // stride[1] + 1
    bpk = kernel_width * kernel_height * channel * precision.bpe
    weight_bytes = -(-bpk * kernels // 128) * 128
    prec = int(precision)
    cvt_en, (cvt_offset, cvt_scale, cvt_truncate) = (0, (0, 0, 0)) if cvt is None else (1, cvt)
    cdma = CdmaParams(
        in_precision=prec, proc_precision=prec, datain_width=width - 1, datain_height=height - 1,
        datain_channel=channel - 1, datain_width_ext=width - 1, datain_height_ext=height - 1,
        datain_addr_0=data_addr, line_stride=ls, surf_stride=ss, line_packed=int(ls == width * atom),
        surf_packed=int(ss == width * height * atom), batches=batches - 1, batch_stride=batch_stride,
        byte_per_kernel=bpk - 1, weight_kernel=kernels - 1, weight_addr=weight_addr,
        weight_bytes=weight_bytes, cvt_en=cvt_en, cvt_offset=cvt_offset & 0xFFFF,
        cvt_scale=cvt_scale & 0xFFFF, cvt_truncate=cvt_truncate,
        conv_x_stride=stride[0] - 1, conv_y_stride=stride[1] - 1, pad_left=left, pad_right=right, pad_top=top,
        pad_bottom=bottom, pad_value=pad_value & 0xFFFF, nan_to_zero=nan_to_zero)
    csc = CscParams(
        in_precision=prec, proc_precision=prec, datain_width_ext=width - 1, datain_height_ext=height - 1,
        datain_channel_ext=channel - 1, batches=batches - 1, weight_width_ext=kernel_width - 1,
        weight_height_ext=kernel_height - 1, weight_channel_ext=channel - 1, weight_kernel=kernels - 1,
        weight_bytes=weight_bytes, dataout_width=out_w - 1, dataout_height=out_h - 1,
        dataout_channel=kernels - 1, atomics=out_w * out_h - 1, conv_x_stride_ext=stride[0] - 1,
        conv_y_stride_ext=stride[1] - 1, x_dilation_ext=dilation[0] - 1, y_dilation_ext=dilation[1] - 1,
        pad_left=left, pad_top=top, pad_value=pad_value & 0xFFFF)
    cacc = CaccParams(proc_precision=prec, dataout_width=out_w - 1, dataout_height=out_h - 1,
                      dataout_channel=kernels - 1, batches=batches - 1, clip_truncate=clip_truncate)
    cmac = CmacParams(proc_precision=prec)
    return ConvParams(cdma=cdma, csc=csc, cacc=cacc, cmac_a=cmac, cmac_b=cmac)


def image(*, target: NvdlaTarget, in_precision: Precision, precision: Precision, pixel_format: int,
          elements: int, width: int, height: int, kernels: int, kernel_width: int, kernel_height: int,
          data_addr: int, weight_addr: int, line_stride: int, uv_addr: int = 0, uv_line_stride: int = 0,
          stride: tuple[int, int] = (1, 1), pad: tuple[int, int, int, int] = (0, 0, 0, 0), pad_value: int = 0,
          clip_truncate: int = 0, cvt: tuple[int, int, int] | None = None,
          mean: tuple[int, int, int, int] | None = None, sign_override: int = 0, post_extension: int = 1,
          nan_to_zero: int = 0) -> ConvParams:
    """An image convolution's registers as NVIDIA's firmware programs them from its compiler's
    descriptor: the kernel ``kernel_width`` x ``kernel_height`` over ``elements`` channels becomes 1 wide
    and ``kernel_width · elements`` channels deep (channel pre-extension), ``post_extension`` kernel rows
    per atom; CBUF takes each padded line in whole entries and the data banks the lines need."""
    left, right, top, bottom = pad
    kc = kernel_width * elements
    out_w = (width + left + right - kernel_width) // stride[0] + 1
    out_h = (height + top + bottom - kernel_height) // stride[1] + 1
    bpk = kernel_height * kc * precision.bpe
    weight_bytes = -(-bpk * kernels // 128) * 128
    entries = -(-(left + width + right) * elements * precision.bpe // target.cbuf_entry_bytes)
    data_bank = -(-entries * height // target.cbuf_bank_entries)
    weight_bank = -(-weight_bytes // (target.cbuf_entry_bytes * target.cbuf_bank_entries))
    y_extension = {1: 0, 2: 1, 4: 2}[post_extension]
    prec, in_prec = int(precision), int(in_precision)
    cvt_en, (cvt_offset, cvt_scale, cvt_truncate) = (0, (0, 0, 0)) if cvt is None else (1, cvt)
    means = (0, 0, 0, 0) if mean is None else mean
    cdma = CdmaParams(
        in_precision=in_prec, proc_precision=prec, datain_format=PIXEL, pixel_format=pixel_format,
        pixel_sign_override=sign_override, datain_width=width - 1, datain_height=height - 1,
        datain_channel=elements - 1, datain_width_ext=width - 1, datain_height_ext=height - 1,
        datain_addr_0=data_addr, datain_addr_1=uv_addr, line_stride=line_stride,
        uv_line_stride=uv_line_stride, line_packed=int(line_stride == width * target.atom),
        entries=entries - 1, byte_per_kernel=bpk - 1,
        weight_kernel=kernels - 1, weight_addr=weight_addr, weight_bytes=weight_bytes,
        mean_format=int(mean is not None), mean_ry=means[0] & 0xFFFF, mean_gu=means[1] & 0xFFFF,
        mean_bv=means[2] & 0xFFFF, mean_ax=means[3] & 0xFFFF, cvt_en=cvt_en, cvt_offset=cvt_offset & 0xFFFF,
        cvt_scale=cvt_scale & 0xFFFF, cvt_truncate=cvt_truncate, conv_x_stride=stride[0] - 1,
        conv_y_stride=stride[1] - 1, pad_left=left, pad_right=right, pad_top=top, pad_bottom=bottom,
        pad_value=pad_value & 0xFFFF, data_bank=data_bank - 1, weight_bank=weight_bank - 1,
        nan_to_zero=nan_to_zero)
    csc = CscParams(
        in_precision=prec, proc_precision=prec, datain_format=PIXEL, datain_width_ext=width - 1,
        datain_height_ext=height - 1, datain_channel_ext=elements - 1, y_extension=y_extension,
        entries=entries - 1, weight_height_ext=kernel_height - 1, weight_channel_ext=kc - 1,
        weight_kernel=kernels - 1, weight_bytes=weight_bytes, dataout_width=out_w - 1,
        dataout_height=out_h - 1, dataout_channel=kernels - 1, atomics=out_w * out_h - 1,
        rls_slices=height - 1,
        conv_x_stride_ext=stride[0] - 1, conv_y_stride_ext=stride[1] - 1, pad_left=left, pad_top=top,
        pad_value=pad_value & 0xFFFF, data_bank=data_bank - 1, weight_bank=weight_bank - 1)
    cacc = CaccParams(proc_precision=prec, dataout_width=out_w - 1, dataout_height=out_h - 1,
                      dataout_channel=kernels - 1, clip_truncate=clip_truncate)
    cmac = CmacParams(proc_precision=prec)
    return ConvParams(cdma=cdma, csc=csc, cacc=cacc, cmac_a=cmac, cmac_b=cmac)


def winograd(*, target: NvdlaTarget, precision: Precision, width: int, height: int, channel: int,
             kernels: int, out_width: int, out_height: int, data_addr: int, weight_addr: int,
             pad_left: int = 1, pad_top: int = 1, stride: tuple[int, int] = (1, 1), pad_value: int = 0,
             pra_truncate: int = 0, clip_truncate: int = 0, line_stride: int | None = None,
             surf_stride: int | None = None, nan_to_zero: int = 0) -> ConvParams:
    """A Winograd convolution's registers as NVIDIA's compiler and firmware set them: the output
    ``out_width`` x ``out_height`` (multiples of 4), the input padded right and below to ``out + 4``
    extended pixels (x stride), channels extended to whole surfaces times the stride, 4x4 kernels over
    them, the CBUF entries of an extended row and the banks the input needs."""
    atom = target.atom
    epa = target.epa(precision)
    surfaces = -(-channel // epa)
    sx, sy = stride
    ext_w, ext_h = out_width + 4, out_height + 4
    ext_c = sx * sy * surfaces * epa
    pad_right, pad_bottom = ext_w * sx - width - pad_left, ext_h * sy - height - pad_top
    ls = width * atom if line_stride is None else line_stride
    ss = height * ls if surf_stride is None else surf_stride
    bpk = 16 * ext_c * precision.bpe
    weight_bytes = -(-bpk * kernels // 128) * 128
    entries = ext_w * sx * sy * surfaces // 4
    data_bank = -(-entries * ext_h // target.cbuf_bank_entries)
    weight_bank = -(-weight_bytes // (target.cbuf_entry_bytes * target.cbuf_bank_entries))
    prec = int(precision)
    common = dict(conv_mode=CONV_WINOGRAD, in_precision=prec, proc_precision=prec)
    cdma = CdmaParams(
        **common, datain_width=width - 1, datain_height=height - 1, datain_channel=channel - 1,
        datain_width_ext=ext_w - 1, datain_height_ext=ext_h - 1, datain_addr_0=data_addr, line_stride=ls,
        surf_stride=ss, line_packed=int(ls == width * atom), surf_packed=int(ss == width * height * atom),
        entries=entries - 1, byte_per_kernel=bpk - 1, weight_kernel=kernels - 1, weight_addr=weight_addr,
        weight_bytes=weight_bytes, conv_x_stride=sx - 1, conv_y_stride=sy - 1, pad_left=pad_left,
        pad_right=pad_right, pad_top=pad_top, pad_bottom=pad_bottom, pad_value=pad_value & 0xFFFF,
        data_bank=data_bank - 1, weight_bank=weight_bank - 1, nan_to_zero=nan_to_zero)
    csc = CscParams(
        **common, datain_width_ext=ext_w - 1, datain_height_ext=ext_h - 1, datain_channel_ext=ext_c - 1,
        entries=entries - 1, weight_width_ext=3, weight_height_ext=3, weight_channel_ext=ext_c - 1,
        weight_kernel=kernels - 1, weight_bytes=weight_bytes, dataout_width=out_width - 1,
        dataout_height=out_height - 1, dataout_channel=kernels - 1, atomics=out_width * out_height - 1,
        rls_slices=ext_h - 1, pad_value=pad_value & 0xFFFF, data_bank=data_bank - 1,
        weight_bank=weight_bank - 1, pra_truncate=pra_truncate)
    cacc = CaccParams(conv_mode=CONV_WINOGRAD, proc_precision=prec, dataout_width=out_width - 1,
                      dataout_height=out_height - 1, dataout_channel=kernels - 1, clip_truncate=clip_truncate)
    cmac = CmacParams(conv_mode=CONV_WINOGRAD, proc_precision=prec)
    return ConvParams(cdma=cdma, csc=csc, cacc=cacc, cmac_a=cmac, cmac_b=cmac)
