"""The FP16 convolution as CMAC and CACC compute it, bit for bit.

For every output (position, kernel) CACC starts from zero and adds, in CSC's order (channel block,
then kernel row, then kernel column), the partial sum CMAC forms for that atom (pydla.hw.nvdla.
cmac_fp16), in its 48-bit float (pydla.hw.nvdla.cacc.fp48_add); the sum goes to the SDP as FP32
(``fp48_to_fp32``). The loop runs over atoms and over blocks of output rows; each step is vectorised
over the rows' positions, the kernels and the atom's channels.

Usage::

    bits = convolve(taps, weights, cf)     # uint32 FP32 patterns (N, OH, OW, K)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.cacc import fp48_add, fp48_to_fp32
from pydla.hw.nvdla.cmac_fp16 import mac_atom
from pydla.hw.nvdla.conv_taps import Taps

_CHUNK = 1 << 20  # elements (positions x kernels x channels) of one MAC step


def convolve(taps: Taps, weights: npt.NDArray[np.generic], cf: int) -> npt.NDArray[np.uint32]:
    """FP32 bit patterns (N, OH, OW, K) of the convolution of FP16 ``taps`` with FP16 ``weights``
    (K, C, R, S) as raw uint16, ``cf`` channels per atom."""
    g = taps.g
    k, c, r_n, s_n = weights.shape
    n, oh, ow = g.batches, g.out_height, g.out_width
    out = np.empty((n, oh, ow, k), dtype=np.uint32)
    step = max(1, _CHUNK // max(1, n * ow * k * min(c, cf)))
    w64 = weights.astype(np.int64)
    for oy0 in range(0, oh, step):
        oy1 = min(oh, oy0 + step)
        rows = n * (oy1 - oy0) * ow
        acc_e = np.zeros((rows, k), dtype=np.int64)
        acc_m = np.zeros((rows, k), dtype=np.int64)
        for c0 in range(0, c, cf):
            block = slice(c0, min(c, c0 + cf))
            for r in range(r_n):
                for s in range(s_n):
                    x = taps(r, s, block, oy0, oy1).reshape(rows, 1, -1).astype(np.int64)
                    mac_e, mac_m = mac_atom(x, w64[None, :, block, r, s])
                    acc_e, acc_m = fp48_add(acc_e, acc_m, mac_e, mac_m)
        out[:, oy0:oy1] = fp48_to_fp32(acc_e, acc_m).astype(np.uint32).reshape(n, oy1 - oy0, ow, k)
    return out
