"""Convolution of an image (pixel) input, as nvdla/hw ``cmod/csc`` (``SendImageDataToMacSequencerConvCommon``,
``csc_read_one_image_entry``, ``SendWeightToMacSequencerDirectConvCommon`` in image mode) computes it.

CDMA writes each line of the picture to CBUF as it is padded and converted (pydla.hw.nvdla.pixel):
the lines one after the other, each taking whole CBUF entries (zeros after its last element). CSC
reads a line ``l`` at entry ``l · ENTRY_PER_SLICE`` and sees it as one long row of elements: the kernel
is 1 wide and ``kc`` (``WEIGHT_CHANNEL_EXT`` + 1) channels deep, its channels spanning the original
kernel's columns times the picture's channels ("channel pre-extension": channel ``s·C + c`` of the
kernel is column s, channel c). For output (ox, oy) and kernel row r it reads elements
``ox · stride_x · C + j`` (C = ``DATAIN_CHANNEL_EXT`` + 1) of line ``oy · stride_y + r - pad_top``; a
line outside the picture is the padding value (``D_ZERO_PADDING_VALUE`` of CSC). The atoms come by
block of 64 elements, then kernel row, as in direct convolution.

Channel post-extension (``Y_EXTENSION`` 1 or 2: 2 or 4 rows per atom): one atom holds ``post`` kernel
rows, each in its own ``64 / post`` lanes (their first ``kc`` elements; ``kc`` must fit), and the weights
of those rows lie next to each other: per kernel group, per row group ``t``, per kernel, the rows of
the group one after the other, ``kc`` elements each (a last group of ``R mod post`` rows is shorter).

Speed (bench_nvdla_blocks, an RGBA 224x224 picture, 7x7 stride 2 -> 64 kernels, 2 rows per atom,
2 shared cores): INT8 0.1-0.12 s, 2-4x a float32 im2col + sgemm of the same layer; FP16 (through the MAC
cell) at 56x56 0.25-0.7 s.

Usage::

    atoms = ImageAtoms(p, lines, weights[weight_offsets(...)], prec, target)   # pixel.image_lines(...)
    sums = conv_int.accumulate(atoms)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.conv_params import ConvParams
from pydla.hw.nvdla.intmath import sign_extend
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NvdlaTarget

A = npt.NDArray[np.generic]
LANES = 64  # CSC's parallel channels per atom (ELEMENT_PER_INPUT_ATOM)


def post_extension(p: ConvParams) -> int:
    """Kernel rows per atom: 1, 2 or 4 (``D_POST_Y_EXTENSION``)."""
    if p.csc.y_extension > 2:
        raise DlaError(NvError.BadValue, f"CSC y_extension: {p.csc.y_extension} is not 0, 1 or 2 (1, 2 or 4 "
                                         "kernel rows per atom)")
    return 1 << p.csc.y_extension


def weight_offsets(kernels: int, rows: int, kc: int, post: int, kf: int) -> npt.NDArray[np.int64]:
    """Element offsets (K, R, kc) of an image convolution's weights, ``post`` rows per atom (1: the
    direct layout of a 1-wide kernel of ``kc`` channels, which must then be at most 64)."""
    k = np.arange(kernels, dtype=np.int64)
    g, kk = k // kf, k % kf
    kg = np.minimum(kf, kernels - g * kf)[:, None, None]
    r = np.arange(rows, dtype=np.int64)[None, :, None]
    t, ii = r // post, r % post
    rows_t = np.minimum(post, rows - t * post)
    j = np.arange(kc, dtype=np.int64)[None, None, :]
    out: npt.NDArray[np.int64] = ((g * kf * rows * kc)[:, None, None] + t * post * kc * kg
                                  + kk[:, None, None] * rows_t * kc + ii * kc + j)
    return out


def pre_extend(weights: npt.ArrayLike, channels: int) -> A:
    """Kernels (K, C, R, S) as an image convolution holds them: (K, R, S · channels), channel ``s ·
    channels + c`` being column s, channel c (channels past C, up to the picture's ``channels``, 0)."""
    w = np.asarray(weights)
    k, c, r, s = w.shape
    out = np.zeros((k, r, s, channels), dtype=w.dtype)
    out[..., :c] = w.transpose(0, 2, 3, 1)
    result: A = out.reshape(k, r, s * channels)
    return result


def pack(weights: npt.ArrayLike, target: NvdlaTarget, prec: Precision, post: int = 1
         ) -> npt.NDArray[np.uint8]:
    """The bytes of pre-extended weights (K, R, kc) in the image layout, ``post`` rows per atom."""
    w = np.asarray(weights)
    k, r, kc = w.shape
    flat = np.zeros(w.size, dtype=prec.dtype)
    kf, _ = target.kernel_groups(prec)
    flat[weight_offsets(k, r, kc, post, kf).reshape(-1)] = w.astype(prec.dtype).reshape(-1)
    out: npt.NDArray[np.uint8] = flat.view(np.uint8)
    return out


class ImageAtoms:
    """The atoms of an image convolution (see the module's description)."""

    def __init__(self, p: ConvParams, lines: A, weights: A, prec: Precision, target: NvdlaTarget) -> None:
        s = p.csc
        self.prec = prec
        self.post = post_extension(p)
        self.height = lines.shape[0]
        self.cin = s.datain_channel_ext + 1
        self.kc, self.rows = s.weight_channel_ext + 1, s.weight_height_ext + 1
        self.stride_x, self.stride_y = s.conv_x_stride_ext + 1, s.conv_y_stride_ext + 1
        self.pad_top = s.pad_top
        self.batches, self.out_height, self.out_width = 1, s.dataout_height + 1, s.dataout_width + 1
        self.kernels = s.weight_kernel + 1
        self.w = weights  # (K, R, kc)
        pad = s.pad_value & (0xFF if prec is Precision.INT8 else 0xFFFF)
        self.pad = np.array(sign_extend(pad, 8 * prec.bpe) if prec.is_int else pad).astype(prec.dtype)
        if self.post == 1:
            self.lanes = [min(LANES, self.kc - b) for b in range(0, self.kc, LANES)]
            self._order = [(b, t) for b in range(len(self.lanes)) for t in range(self.rows)]
        else:
            seg = LANES // self.post
            if self.kc > seg:
                raise DlaError(NvError.BadValue, f"CSC weight_channel_ext: {self.kc} kernel channels do "
                                                 f"not fit the {seg} lanes of a row when {self.post} rows "
                                                 "share an atom")
            self.lanes = [self.kc]
            self._order = [(0, t) for t in range(-(-self.rows // self.post))]
        self._cbuf(p, lines, target)

    def _cbuf(self, p: ConvParams, lines: A, target: NvdlaTarget) -> None:
        """CDMA's CBUF: the lines in whole entries, one after the other, read back at ENTRY_PER_SLICE."""
        entry = target.cbuf_entry_bytes // self.prec.bpe  # elements per CBUF entry
        ring = (p.csc.data_bank + 1) * target.cbuf_bank_entries
        per_line = -(-lines.shape[1] // entry)
        eps = p.csc.entries + 1
        if max(per_line, eps) * self.height > ring:
            raise DlaError(NvError.BadValue, f"CSC data_bank: {p.csc.data_bank + 1} banks ({ring} entries) "
                                             f"do not hold {self.height} lines of {max(per_line, eps)} "
                                             "entries")
        self.cbuf = np.zeros(ring * entry, dtype=self.prec.dtype)
        self.written = np.zeros(ring * entry, dtype=bool)
        for h in range(self.height):
            at = h * per_line * entry
            self.cbuf[at:at + lines.shape[1]] = lines[h]
            self.written[at:at + per_line * entry] = True
        self.line_start = eps * entry

    @property
    def count(self) -> int:
        return len(self._order)

    def _segments(self, a: int) -> list[tuple[int, int, int]]:
        """(kernel row, first element, lanes) of each row atom ``a`` holds."""
        b, t = self._order[a]
        if self.post == 1:
            return [(t, b * LANES, self.lanes[b])]
        return [(r, 0, self.kc) for r in range(t * self.post, min(self.rows, (t + 1) * self.post))]

    def data(self, a: int, oy0: int, oy1: int) -> A:
        parts = []
        oy = np.arange(oy0, oy1)[:, None, None]
        ox = np.arange(self.out_width)[None, :, None]
        for r, first, lanes in self._segments(a):
            line = oy * self.stride_y + r - self.pad_top
            element = ox * self.stride_x * self.cin + first + np.arange(lanes)[None, None, :]
            index = (line * self.line_start + element) % self.cbuf.size
            inside = (line >= 0) & (line < self.height)
            if not self.written[index[np.broadcast_to(inside, index.shape)]].all():
                raise DlaError(NvError.BadValue, "CSC entries: an output reads CBUF entries CDMA did not "
                                                 "write (ENTRY_PER_SLICE, the line's elements and the output "
                                                 "width do not agree)")
            parts.append(np.where(inside, self.cbuf[index], self.pad))
        out: A = np.concatenate(parts, axis=-1)[None]
        return out

    def weights(self, a: int) -> A:
        out: A = np.concatenate([self.w[:, r, first:first + lanes] for r, first, lanes in self._segments(a)],
                                axis=1)
        return out

    def extreme(self) -> int:
        used = self.cbuf[self.written]
        values = np.concatenate([used.astype(np.int64), [int(self.pad)]])
        return int(np.abs(values).max())
