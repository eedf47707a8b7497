"""The atoms CSC hands CMAC, in CSC's order: what the integer and FP16 MAC paths consume.

An output (position, kernel) of a convolution is the sum, in this order, of one MAC atom per
*kernel atom*: a block of data lanes against the same lanes of one kernel's weights. Direct
convolution's atoms are (channel block of the MAC array's atomic C, kernel row, kernel column)
(:class:`DirectAtoms`); image input's are (channel block of the pre-extended line, kernel row group)
(pydla.hw.nvdla.conv_image). For atom ``a``, ``data(a, oy0, oy1)`` gives the lanes every output
position of rows ``oy0 … oy1 - 1`` reads, shape (N, rows, OW, L), and ``weights(a)`` the kernels'
lanes, shape (K, L). Lanes the hardware zeroes (past the channel count) are left out: a zero lane adds
nothing and, being masked, does not set an FP16 atom's exponent.

Usage::

    atoms = DirectAtoms(Taps(x, geometry, pad_value), w, cf)
    for a in range(atoms.count):
        x_a, w_a = atoms.data(a, 0, atoms.out_height), atoms.weights(a)
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.conv_taps import Taps

A = npt.NDArray[np.generic]


class Atoms(Protocol):
    """A convolution as CSC feeds it to CMAC."""

    @property
    def count(self) -> int: ...

    @property
    def batches(self) -> int: ...

    @property
    def out_height(self) -> int: ...

    @property
    def out_width(self) -> int: ...

    @property
    def kernels(self) -> int: ...

    def data(self, a: int, oy0: int, oy1: int) -> A:
        """Atom ``a``'s data lanes for output rows oy0 … oy1 - 1: (N, rows, OW, L)."""
        ...

    def weights(self, a: int) -> A:
        """Atom ``a``'s weight lanes: (K, L)."""
        ...

    def extreme(self) -> int:
        """``max |x|`` over every datum the atoms read (integer data)."""
        ...


class DirectAtoms:
    """Direct convolution: atoms (channel block, kernel row, kernel column), blocks of ``cf`` channels."""

    def __init__(self, taps: Taps, weights: A, cf: int) -> None:
        self.taps, self.w, self.cf = taps, weights, cf
        k, c, r_n, s_n = weights.shape
        self._order = [(c0, r, s) for c0 in range(0, c, cf) for r in range(r_n) for s in range(s_n)]
        g = taps.g
        self.batches, self.out_height, self.out_width, self.kernels = g.batches, g.out_height, g.out_width, k

    @property
    def count(self) -> int:
        return len(self._order)

    def _block(self, a: int) -> tuple[slice, int, int]:
        c0, r, s = self._order[a]
        return slice(c0, min(self.w.shape[1], c0 + self.cf)), r, s

    def data(self, a: int, oy0: int, oy1: int) -> A:
        block, r, s = self._block(a)
        return self.taps(r, s, block, oy0, oy1)

    def weights(self, a: int) -> A:
        block, r, s = self._block(a)
        out: A = self.w[:, block, r, s]
        return out

    def extreme(self) -> int:
        return self.taps.extreme()
