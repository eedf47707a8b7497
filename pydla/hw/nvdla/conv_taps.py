"""What CSC hands CMAC: the input under each kernel position, with the padding value outside the input.

For output position (ox, oy) and kernel position (r, s) CSC reads input column
``ox·stride_x + s·dilation_x - pad_left`` and row ``oy·stride_y + r·dilation_y - pad_top``; outside the
input cube it sends the padding value (``D_ZERO_PADDING_VALUE``: its low byte for INT8, all 16 bits
otherwise) for every channel of the cube. :class:`Taps` pads the input once and returns, for a kernel
position, a block of channels and a range of output rows, the data as (N, rows, OW, channels).

Usage::

    taps = Taps(x, geometry, pad_value)      # x: (N, C, H, W)
    block = taps(r, s, slice(0, 64), 0, 8)   # (N, 8, OW, 64)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Geometry:
    """Sizes of a direct convolution (plain numbers, not register encodings)."""

    batches: int
    channel: int
    height: int
    width: int
    kernels: int
    kernel_height: int
    kernel_width: int
    stride_x: int
    stride_y: int
    dilation_x: int
    dilation_y: int
    pad_left: int
    pad_top: int
    out_width: int
    out_height: int


class Taps:
    """The padded input of a convolution, sliced per kernel position."""

    def __init__(self, x: npt.NDArray[np.generic], g: Geometry, pad_value: int) -> None:
        self.g = g
        # rows/columns any output reads: from -pad to (out - 1)·stride + (kernel - 1)·dilation - pad
        self.rows = (g.out_height - 1) * g.stride_y + (g.kernel_height - 1) * g.dilation_y + 1
        self.cols = (g.out_width - 1) * g.stride_x + (g.kernel_width - 1) * g.dilation_x + 1
        fill = np.array(pad_value).astype(x.dtype)
        xp = np.full((g.batches, g.channel, self.rows, self.cols), fill, dtype=x.dtype)
        y_lo, x_lo = g.pad_top, g.pad_left  # input row 0 lies at padded row pad_top
        h = min(g.height, self.rows - y_lo)
        w = min(g.width, self.cols - x_lo)
        if h > 0 and w > 0:
            xp[:, :, y_lo:y_lo + h, x_lo:x_lo + w] = x[:, :, :h, :w]
        self.xp = xp

    def __call__(self, r: int, s: int, channels: slice, oy0: int, oy1: int) -> npt.NDArray[np.generic]:
        g = self.g
        y0 = oy0 * g.stride_y + r * g.dilation_y
        x0 = s * g.dilation_x
        block = self.xp[:, channels, y0:y0 + (oy1 - oy0 - 1) * g.stride_y + 1:g.stride_y,
                        x0:x0 + (g.out_width - 1) * g.stride_x + 1:g.stride_x]
        out: npt.NDArray[np.generic] = block.transpose(0, 2, 3, 1)
        return out

    def extreme(self) -> int:
        """``max |x|`` over everything the convolution reads (integer data)."""
        if self.xp.size == 0:
            return 0
        return max(abs(int(self.xp.min())), abs(int(self.xp.max())))
