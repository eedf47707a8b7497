"""How tensors of any rank and batch lie on the device.

Every tensor is stored densely in its ONNX (C order) layout, so the bytes of a graph input or output
need no conversion. The device works on planar (C, H, W) cubes; a tensor is seen as:

- its *flat cube*, for work that treats every element alike or per channel (SDP, PDP): the batch
  folded into the channels, ``(N*C, D1*...*Dk-1, Dk)`` for ``(N, C, D1, ..., Dk)``; ``(N*C, 1, 1)``
  for ``(N, C)``; ``(1, 1, L)`` for ``(L,)``;
- *images*, for work that must not mix the images of a batch (CONV, CDP): image ``n`` is the cube
  ``(C, D1*...*Dk-1, Dk)`` at byte ``n * C*D1*...*Dk * element`` — the flat cube's channels
  ``[n*C, (n+1)*C)``.

Data movement (transposes, concatenation, slices, padding, broadcasting) is a strided copy of
elements, any rank and any element type: :func:`copy_plan` reduces it to as few BDMA operations as
the strides allow.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from pydla.errors import DlaError, NvError

MAX_DIM = 1 << 16  # a cube's C, H and W (the KMD's and the device's limit)
MAX_COPY_OPS = 1 << 14  # BDMA operations one copy may take before the compiler refuses it


def prod(dims: Sequence[int]) -> int:
    # math.prod of Python ints: np.prod's per-call overhead was a tenth of compiling a large graph.
    return math.prod(int(d) for d in dims)


def flat_cube(shape: Sequence[int], where: str) -> tuple[int, int, int]:
    """The cube holding a whole tensor, channels first (see the module docstring)."""
    dims = [int(d) for d in shape]
    if len(dims) == 0:
        cube = (1, 1, 1)
    elif len(dims) == 1:
        cube = (1, 1, dims[0])
    elif len(dims) == 2:
        cube = (dims[0] * dims[1], 1, 1)
    else:
        cube = (dims[0] * dims[1], prod(dims[2:-1]), dims[-1])
    if max(cube) <= MAX_DIM:
        return cube
    return dense_cube(prod(dims), where)


def dense_cube(count: int, where: str) -> tuple[int, int, int]:
    """Some (C, H, W) of ``count`` elements within the device's limits (element-wise work only)."""
    w = next((d for d in range(min(count, MAX_DIM), 0, -1) if count % d == 0), 1)
    rest = count // w
    h = next((d for d in range(min(rest, MAX_DIM), 0, -1) if rest % d == 0), 1)
    c = rest // h
    if c > MAX_DIM:
        raise DlaError(NvError.NotSupported, f"{where}: {count} elements do not fit a device cube "
                                             f"(at most {MAX_DIM} per dimension)")
    return (c, h, w)


def images(shape: Sequence[int], where: str) -> tuple[int, tuple[int, int, int]]:
    """(N, image cube) of a tensor of rank 3 or more (see the module docstring)."""
    dims = [int(d) for d in shape]
    if len(dims) < 3:
        raise DlaError(NvError.NotSupported, f"{where}: shape {tuple(dims)}: needs (N, C, ...) "
                                             "with at least one spatial axis")
    cube = (dims[1], prod(dims[2:-1]), dims[-1])
    if max(cube) > MAX_DIM:
        raise DlaError(NvError.NotSupported, f"{where}: image {cube} exceeds the device's "
                                             f"{MAX_DIM} per dimension")
    return dims[0], cube


def spatial_2d(values: Sequence[int], fill: int) -> tuple[int, int]:
    """ONNX per-axis values (kernel, strides, ...) of a 1-D or 2-D operation as (y, x) of the
    image cube: a 1-D operation runs along W (the cube's H is 1)."""
    v = [int(x) for x in values]
    if len(v) == 1:
        return (fill, v[0])
    return (v[0], v[1])


def dense_strides(shape: Sequence[int], element: int) -> tuple[int, ...]:
    strides: list[int] = []
    step = element
    for d in reversed(shape):
        strides.insert(0, step)
        step *= int(d)
    return tuple(strides)


@dataclass(frozen=True)
class Copy:
    """One BDMA operation: ``surfaces`` x ``lines`` x ``line_bytes``, at byte offsets relative to
    the copy's source and destination starts."""

    src: int
    dst: int
    line_bytes: int
    lines: int
    src_line: int
    dst_line: int
    surfaces: int
    src_surf: int
    dst_surf: int

    def extent(self, line: int, surf: int) -> int:
        return (self.surfaces - 1) * surf + (self.lines - 1) * line + self.line_bytes


def copy_plan(shape: Sequence[int], src_strides: Sequence[int], dst_strides: Sequence[int],
              element: int, where: str) -> list[Copy]:
    """BDMA operations copying the elements of ``shape`` between two strided layouts (byte strides,
    non-negative; a source stride of 0 repeats, which is how broadcasting copies)."""
    dims = [(int(n), int(s), int(d)) for n, s, d in zip(shape, src_strides, dst_strides, strict=True)
            if n != 1]
    if any(n < 1 for n, _, _ in dims) or min(src_strides, default=0) < 0 or min(dst_strides, default=0) < 0:
        raise DlaError(NvError.NotSupported, f"{where}: copy of shape {tuple(shape)} with strides "
                                             f"{tuple(src_strides)} -> {tuple(dst_strides)}")
    merged: list[tuple[int, int, int]] = []
    for n, s, d in dims:  # merge an axis into the previous one where both layouts allow it
        if merged and merged[-1][1] == n * s and merged[-1][2] == n * d:
            m = merged.pop()
            merged.append((m[0] * n, s, d))
        else:
            merged.append((n, s, d))
    line_bytes = element
    if merged and merged[-1][1] == element and merged[-1][2] == element:
        line_bytes = merged.pop()[0] * element
    while len(merged) < 2:
        merged.insert(0, (1, 0, 0))
    outer, (surfaces, s_surf, d_surf), (lines, s_line, d_line) = merged[:-2], merged[-2], merged[-1]
    count = prod([n for n, _, _ in outer])
    if count > MAX_COPY_OPS:
        raise DlaError(NvError.NotSupported, f"{where}: a copy of shape {tuple(shape)} would take {count} "
                                             f"BDMA operations (at most {MAX_COPY_OPS})")
    copies = []
    for index in _indices([n for n, _, _ in outer]):
        src = sum(i * s for i, (_, s, _) in zip(index, outer, strict=True))
        dst = sum(i * d for i, (_, _, d) in zip(index, outer, strict=True))
        copies.append(Copy(src, dst, line_bytes, lines, s_line, d_line, surfaces, s_surf, d_surf))
    return copies


def _indices(dims: list[int]) -> Iterator[tuple[int, ...]]:
    return itertools.product(*(range(n) for n in dims))


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int], element: int) -> tuple[int, ...]:
    """Byte strides reading a dense tensor of ``shape`` as its numpy broadcast to ``out_shape``."""
    own = dense_strides(shape, element)
    lead = len(out_shape) - len(shape)
    return tuple(0 if i < lead or shape[i - lead] == 1 else own[i - lead] for i in range(len(out_shape)))


def normalize_axis(axis: int, rank: int, where: str) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        raise DlaError(NvError.BadValue, f"{where}: axis {axis} of a rank-{rank} tensor")
    return a


AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def check_auto_pad(where: str, value: str) -> str:
    """An ``auto_pad`` attribute's value, which ONNX's shape inference does not check."""
    if value not in (*AUTO_PADS, ""):
        raise DlaError(NvError.BadValue, f"{where}: auto_pad '{value}' is not one of {', '.join(AUTO_PADS)}")
    return value


def check_conv(where: str, x_shape: Sequence[int], w_shape: Sequence[int], groups: int,
               kernel_shape: Sequence[int] | None, transpose: bool) -> None:
    """A Conv's or ConvTranspose's group and kernel_shape against its input and weights (ONNX's
    shape inference does not check them: a mismatch would otherwise reach the device)."""
    c_in = x_shape[1]
    if kernel_shape is not None and [int(k) for k in kernel_shape] != [int(k) for k in w_shape[2:]]:
        raise DlaError(NvError.BadValue, f"{where}: kernel_shape {list(kernel_shape)}, but the weights "
                                         f"{tuple(w_shape)} have a {'x'.join(str(k) for k in w_shape[2:])} "
                                         "kernel")
    if groups < 1:
        raise DlaError(NvError.BadValue, f"{where}: group {groups} must be at least 1")
    if transpose:
        if w_shape[0] != c_in or c_in % groups:
            raise DlaError(NvError.BadValue,
                           f"{where}: {c_in} input channels in {groups} groups, weights {tuple(w_shape)} "
                           f"(ConvTranspose weights are (input channels, output channels / group, ...))")
    elif c_in % groups or w_shape[1] * groups != c_in or w_shape[0] % groups:
        raise DlaError(NvError.BadValue,
                       f"{where}: {c_in} input channels in {groups} groups, weights {tuple(w_shape)} "
                       "(Conv weights are (output channels, input channels / group, ...); both channel "
                       "counts must divide by the group)")


def spatial_pads(auto_pad: str, pads: Sequence[int] | None, spatial: Sequence[int], kernel: Sequence[int],
                 strides: Sequence[int], dilations: Sequence[int]) -> tuple[list[int], list[int]]:
    """ONNX pads (or auto_pad) of a convolution or pooling: (begins, ends) per spatial axis."""
    nd = len(spatial)
    if auto_pad in ("NOTSET", ""):
        p = [int(v) for v in (pads if pads is not None else [0] * (2 * nd))]
        return p[:nd], p[nd:]
    if auto_pad == "VALID":
        return [0] * nd, [0] * nd
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return begin, end


def deconv_pads(auto_pad: str, pads: Sequence[int] | None, output_padding: Sequence[int],
                size_in: Sequence[int], size_out: Sequence[int], kernel: Sequence[int],
                strides: Sequence[int], dilations: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """A ConvTranspose's (begins, ends, output_padding) per spatial axis that give its static
    output size: pads or auto_pad as ONNX says, then the output cropped or extended at the end to
    the size inferred for it (which is what ``output_shape`` asks for)."""
    nd = len(size_in)
    out_pad = [int(v) for v in output_padding]
    full = [s * (i - 1) + op + (k - 1) * d + 1
            for s, i, op, k, d in zip(strides, size_in, out_pad, kernel, dilations, strict=True)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = [max(0, f - o) for f, o in zip(full, size_out, strict=True)]
        begins = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals]
        ends = [t - b for t, b in zip(totals, begins, strict=True)]
    else:
        p = [int(v) for v in (pads if pads is not None else [0] * (2 * nd))]
        begins, ends = p[:nd], p[nd:]
    for i in range(nd):
        diff = size_out[i] - (full[i] - begins[i] - ends[i])
        if diff > 0:
            out_pad[i] += diff
        else:
            ends[i] -= diff
    return begins, ends, out_pad


def channel_values(value: np.ndarray, shape: Sequence[int], axis: int) -> np.ndarray | None:
    """``value`` broadcast to ``shape`` as one value per index of ``axis`` (what an SDP per-channel
    parameter holds when that axis is the cube's channels): those values, or None when it varies
    along another axis too (or does not broadcast)."""
    try:
        full = np.broadcast_to(np.asarray(value, dtype=np.float64), tuple(shape))
    except ValueError:
        return None
    per = np.moveaxis(full, axis, 0).reshape(full.shape[axis], -1)
    if not (per == per[:, :1]).all():
        return None
    return np.array(per[:, 0])
