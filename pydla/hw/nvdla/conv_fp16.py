"""The FP16 convolution as CMAC and CACC compute it, bit for bit.

For every output (position, kernel) CACC starts from zero and adds, in CSC's order (pydla.hw.nvdla.
conv_atoms), the partial sum CMAC forms for each atom (pydla.hw.nvdla.cmac_fast, NVIDIA's MAC cell) in
its 48-bit float (pydla.hw.nvdla.cacc.fp48_add); the sum goes to the SDP as FP32 (``fp48_to_fp32``).
The loop runs over atoms and over blocks of output rows; each step is vectorised over the rows'
positions, the kernels and the atom's lanes, the weights' side of the MAC cell prepared once per atom.

Speed (bench_nvdla_blocks, 3x3 at 14x14x64->64, 7.2 M multiplies, 2 shared cores): 0.09-0.2 s, 13-30 ns
per multiply (with a Booth multiplier per product: 1-3.5 s, 150-450 ns); a float32 im2col + sgemm
takes 3-40 ms. What is left: the lanes k = 12..28 through the Booth multiplier (about 4 %), the FP48
additions (one per output and atom) and the gathers of the carry table.

Usage::

    bits = convolve(DirectAtoms(taps, weights, cf))     # uint32 FP32 patterns (N, OH, OW, K)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.cacc import fp48_add, fp48_to_fp32
from pydla.hw.nvdla.cmac_fast import data_operands, mac, weight_operands
from pydla.hw.nvdla.conv_atoms import Atoms

_CHUNK = 1 << 18  # pairs (positions x kernels x lanes) of one MAC step: small enough to stay in cache


def convolve(atoms: Atoms) -> npt.NDArray[np.uint32]:
    """FP32 bit patterns (N, OH, OW, K) of the convolution of FP16 data with FP16 weights (raw uint16
    patterns) that ``atoms`` describes."""
    n, oh, ow, k = atoms.batches, atoms.out_height, atoms.out_width, atoms.kernels
    out = np.empty((n, oh, ow, k), dtype=np.uint32)
    weights = [weight_operands(atoms.weights(a)) for a in range(atoms.count)]
    lanes = max([w.mant.shape[1] for w in weights], default=1)
    step = max(1, _CHUNK // max(1, n * ow * k * lanes))
    for oy0 in range(0, oh, step):
        oy1 = min(oh, oy0 + step)
        rows = n * (oy1 - oy0) * ow
        acc_e = np.zeros((rows, k), dtype=np.int64)
        acc_m = np.zeros((rows, k), dtype=np.int64)
        for a, w in enumerate(weights):
            x = atoms.data(a, oy0, oy1).reshape(rows, -1)
            mac_e, mac_m = mac(data_operands(x), w)
            acc_e, acc_m = fp48_add(acc_e, acc_m, mac_e, mac_m)
        out[:, oy0:oy1] = fp48_to_fp32(acc_e, acc_m).astype(np.uint32).reshape(n, oy1 - oy0, ow, k)
    return out
