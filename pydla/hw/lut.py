"""SDP's lookup-table activation: linear interpolation in a table of float32 values spread evenly
over [start, end], the end values held outside, computed in float64 and rounded once to float32.

The result is bit for bit ``np.interp(x, np.linspace(start, end, n), table)`` (numpy's own rules:
NaN stays NaN, a point on the grid takes its table value), but much faster: ``np.interp`` finds
each element's interval by a binary search, which costs 12-25 ns an element on maps past a few
tens of thousands of elements (branch mispredictions), while here the interval comes from the
element's value (the grid is uniform), corrected by one comparison with each neighbouring grid
point (the estimate is off by at most one where rounding moves it), and the interpolation is a few
whole-array passes over blocks that stay in the cache.

It pays for long tables only: its ~25 whole-array passes cost more than np.interp's search through
a short table (SDP takes tables of at least :data:`LUT_INDEXED_MIN_ENTRIES` entries this way; the
compiler's own tables, HardSigmoid's, have 2). Measured (this machine: 2 cores shared with other
engineers' test runs, load average 8-9; minimum of 40 calls, in place on a float32 map; np.interp ->
this): 257 entries, 15360 elements 457 -> 202 us, 65536 elements 2173 -> 1073 us, 262144 elements
23.7 -> 7.0 ms; 65 entries 2019 -> 1074 us on 65536 elements; 17 entries 85 -> 203 us on 15360.

Usage::

    lut = Interpolator(table, start, end)
    lut(x)                                  # x (float32) replaced by its interpolated values
    interp_blocks(x, grid, table64, out)    # np.interp(x, grid, table64) into out, in blocks
"""

from __future__ import annotations

import numpy as np

from pydla.hw.arrays import F32Array

#: Tables of at least this many entries go through :class:`Interpolator`; below it np.interp's
#: search is short (a 17-entry table: np.interp 85 us on 15360 elements, the indexed way 203 us).
LUT_INDEXED_MIN_ENTRIES = 64
#: Below that, np.interp itself, on about this many elements at a time: its float64 copy of the
#: input and its result are then small enough to be reused memory rather than fresh pages (a
#: 2-entry table on 65536 elements: 679 us in one call, 293 us in blocks of 16384; 262144 elements
#: 2.9 -> 1.3 ms; 15360 elements the same).
INTERP_BLOCK = 16384
# Elements per block: the float64 temporaries of a block (a few of 8 bytes an element) stay in L2.
_BLOCK = 8192


class Interpolator:
    """``x[...] = np.interp(x, linspace(start, end, len(table)), table)`` on float32 ``x``, fast.

    ``table`` is read on every call (device memory: it may change between runs); a table with a
    non-finite value goes to ``np.interp`` itself (numpy's NaN fallbacks then decide)."""

    def __init__(self, table: F32Array, start: float, end: float) -> None:
        self.table = table
        self.n = int(table.shape[0])
        self.start = float(start)
        self.grid = np.linspace(start, end, self.n)
        self.scale = (self.n - 1) / (float(end) - float(start))

    def __call__(self, x: F32Array) -> None:
        fp = self.table.astype(np.float64)  # the table as it is now
        if not np.isfinite(fp).all() or x.size == 0:
            x[...] = np.interp(x, self.grid, fp)
            return
        grid = self.grid
        # Each interval's slope, as np.interp computes it: (dy) / (dx), float64.
        slopes = np.append((fp[1:] - fp[:-1]) / (grid[1:] - grid[:-1]), 0.0)
        last = self.n - 1
        flat = x.reshape(-1) if x.flags.c_contiguous else None
        if flat is None:
            work = np.ascontiguousarray(x)
            self._run(work.reshape(-1), fp, slopes, last)
            x[...] = work
            return
        self._run(flat, fp, slopes, last)

    def _run(self, flat: F32Array, fp: np.ndarray, slopes: np.ndarray, last: int) -> None:
        # NaN and infinite elements pass through casts and products (inf * 0 is NaN) whose results
        # the masks below then replace, or which are NaN as np.interp's: no warning to give.
        with np.errstate(invalid="ignore", over="ignore"):
            self._blocks(flat, fp, slopes, last)

    def _blocks(self, flat: F32Array, fp: np.ndarray, slopes: np.ndarray, last: int) -> None:
        grid = self.grid
        size = min(_BLOCK, flat.size)  # per call: a decoded operation may run on any thread
        v, t, g, s, y = np.empty((5, size), dtype=np.float64)
        j, j1 = np.empty((2, size), dtype=np.intp)
        less = np.empty(size, dtype=bool)
        for lo in range(0, flat.size, _BLOCK):
            part = flat[lo:lo + _BLOCK]
            m = part.size
            vb, tb, gb, sb, yb = v[:m], t[:m], g[:m], s[:m], y[:m]
            jb, j1b, lb = j[:m], j1[:m], less[:m]
            np.copyto(vb, part)  # float32 -> float64, exactly
            # Estimated interval: floor((v - start) * scale), within [0, n - 2] (NaN: any, kept NaN).
            np.subtract(vb, self.start, out=tb)
            np.multiply(tb, self.scale, out=tb)
            np.clip(tb, 0.0, last - 1, out=tb)
            np.copyto(jb, tb, casting="unsafe")  # truncation = floor for t >= 0
            # Corrected to grid[j] <= v < grid[j + 1] where v is inside the grid.
            np.take(grid, jb, out=gb, mode="clip")
            np.greater(gb, vb, out=lb)
            np.subtract(jb, lb, out=jb, casting="unsafe")
            np.maximum(jb, 0, out=jb)
            np.add(jb, 1, out=j1b)
            np.take(grid, j1b, out=gb, mode="clip")
            np.less_equal(gb, vb, out=lb)
            np.add(jb, lb, out=jb, casting="unsafe")
            np.minimum(jb, last - 1, out=jb)
            # slope * (v - grid[j]) + table[j], float64, as np.interp.
            np.take(grid, jb, out=gb, mode="clip")
            np.take(slopes, jb, out=sb, mode="clip")
            np.subtract(vb, gb, out=yb)
            np.multiply(yb, sb, out=yb)
            np.take(fp, jb, out=sb, mode="clip")
            np.add(yb, sb, out=yb)
            # On a grid point, its table value (np.interp's rule; it keeps the sign of a zero).
            np.equal(vb, gb, out=lb)
            np.copyto(yb, sb, where=lb)
            # Outside the grid the end values; the last grid point takes the last value.
            np.less(vb, grid[0], out=lb)
            np.copyto(yb, fp[0], where=lb)
            np.greater_equal(vb, grid[last], out=lb)
            np.copyto(yb, fp[last], where=lb)
            np.copyto(part, yb, casting="same_kind")


def interp_blocks(x: F32Array, grid: np.ndarray, fp: np.ndarray, out: F32Array) -> None:
    """``out[...] = np.interp(x, grid, fp)`` for (C, H, W) arrays of any strides, a block of
    channels of about :data:`INTERP_BLOCK` elements at a time (out may be x)."""
    c = x.shape[0]
    per = max(1, INTERP_BLOCK // max(1, x[0].size)) if c else 1
    for c0 in range(0, c, per):
        out[c0:c0 + per] = np.interp(x[c0:c0 + per], grid, fp)
