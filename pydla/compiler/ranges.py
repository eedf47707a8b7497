"""Activation ranges for post-training INT8 calibration: min-max, percentile and entropy.

The quantization is NVDLA's and TensorRT's: symmetric INT8 (zero point 0), ``scale = threshold /
127``, the threshold chosen per tensor by one of three methods:

- ``minmax``: the largest magnitude seen (nothing saturates; a rare outlier costs resolution);
- ``percentile``: the magnitude below which ``percentile`` % of the values lie (99.99 by default),
  from a histogram of magnitudes;
- ``entropy``: TensorRT's calibrator (Migacz, "8-bit Inference with TensorRT", GTC 2017): a
  histogram of magnitudes in :data:`BINS` bins; for each candidate threshold of ``i`` bins (128 to
  2048), P is the histogram's first ``i`` bins with every value beyond folded into the last, Q is
  those ``i`` bins merged into 128 quantization levels and expanded back over the bins that held
  values; the threshold is the one minimising the KL divergence KL(P || Q).

Percentile and entropy need the magnitudes' range before the histogram's bins are set: a first pass
over the calibration data finds it (and the min-max ranges), a second fills the histograms. Exact
zeros are left out of the histograms (as pytorch-quantization's ``skip_zeros``): any threshold keeps
them exact, and a ReLU's many zeros in the first bin drove the entropy method to the smallest
thresholds.

Usage::

    observer = RangeObserver("entropy")
    for outputs in first_pass: observer.observe(outputs)
    if observer.needs_histograms:
        observer.start_histograms()
        for outputs in second_pass: observer.observe(outputs)
    thresholds = observer.thresholds()   # {tensor name: (threshold, (min, max))}
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.loadable.calibration_table import METHODS

BINS = 2048  # histogram bins of the magnitudes (TensorRT's)
LEVELS = 128  # the quantized magnitudes of symmetric INT8: 0..127
QMAX = 127
DEFAULT_PERCENTILE = 99.99


def check_method(method: str, percentile: float) -> None:
    """DlaError BadParameter for an unknown method or a percentile outside (0, 100]."""
    if method not in METHODS:
        raise DlaError(NvError.BadParameter, f"calibration method '{method}': choose {', '.join(METHODS)}")
    if not 0 < percentile <= 100:
        raise DlaError(NvError.BadParameter, f"calibration percentile {percentile}: a number in (0, 100]")


class RangeObserver:
    """The per-tensor statistics of the calibration runs, for ``method`` (see the module)."""

    def __init__(self, method: str, percentile: float = DEFAULT_PERCENTILE) -> None:
        check_method(method, percentile)
        self.method = method
        self.percentile = percentile
        self.low: dict[str, float] = {}
        self.high: dict[str, float] = {}
        self.histograms: dict[str, np.ndarray] = {}
        self._histogram_pass = False

    @property
    def needs_histograms(self) -> bool:
        return self.method != "minmax"

    def observe(self, outputs: Mapping[str, np.ndarray]) -> None:
        """One run's float tensors (others are ignored); non-finite values take no part."""
        for name, value in outputs.items():
            a = np.asarray(value)
            if a.dtype.kind != "f" or a.size == 0:
                continue
            a = a.astype(np.float32, copy=False)
            finite = np.isfinite(a)
            if not finite.all():
                a = a[finite]
                if a.size == 0:
                    continue
            if self._histogram_pass:
                self._histogram(name, a)
                continue
            lo, hi = float(a.min()), float(a.max())
            self.low[name] = min(lo, self.low.get(name, lo))
            self.high[name] = max(hi, self.high.get(name, hi))

    def start_histograms(self) -> None:
        """The ranges are known: the next runs fill the histograms of magnitudes."""
        self._histogram_pass = True
        self.histograms = {name: np.zeros(BINS, np.int64) for name in self.low}

    def _histogram(self, name: str, a: np.ndarray) -> None:
        amax = self.amax(name)
        if name not in self.histograms or amax == 0.0:
            return
        # exact zeros (half of a ReLU's outputs) are exact at any threshold: counted in the first bin,
        # they made the entropy method's Q spread them over the first level's bins and so chose the
        # smallest thresholds (a trained ResNet-18's stem: 0.59 of 5.2, its INT8 top-1 11 %)
        a = a[a != 0]
        index = np.minimum((np.abs(a) * (BINS / amax)).astype(np.int64), BINS - 1)
        self.histograms[name] += np.bincount(index.ravel(), minlength=BINS)

    def amax(self, name: str) -> float:
        return max(abs(self.low[name]), abs(self.high[name]))

    def thresholds(self) -> dict[str, tuple[float, tuple[float, float]]]:
        """Each tensor's threshold (the magnitude mapped to 127) and its observed (min, max)."""
        out: dict[str, tuple[float, tuple[float, float]]] = {}
        for name in self.low:
            amax = self.amax(name)
            hist = self.histograms.get(name)
            if self.method == "minmax" or amax == 0.0 or hist is None or not hist.any():
                threshold = amax
            elif self.method == "percentile":
                threshold = percentile_threshold(hist, amax, self.percentile)
            else:
                threshold = entropy_threshold(hist, amax)
            out[name] = (threshold, (self.low[name], self.high[name]))
        return out


def percentile_threshold(hist: np.ndarray, amax: float, percentile: float) -> float:
    """The upper edge of the bin in which the cumulative count reaches ``percentile`` %."""
    cdf = np.cumsum(hist, dtype=np.float64)
    k = int(np.searchsorted(cdf, cdf[-1] * percentile / 100.0))
    return min(k + 1, len(hist)) * amax / len(hist)


def entropy_threshold(hist: np.ndarray, amax: float) -> float:
    """TensorRT's KL-divergence threshold (see the module) of the magnitudes' histogram.

    Every candidate at once, from cumulative sums: for ``i`` bins, with T the total count, C the
    count below a bin, level_c the mean count of chunk c's non-empty bins (Q's value there),
    KL = sum_{j<i-1} (h_j/T) log(h_j/T) - sum_c (h of chunk c below i-1)/T log(level_c/C_i) + the
    last bin's term (which holds the folded tail; where it was empty Q gives it 1e-12)."""
    h = hist.astype(np.float64)
    bins = len(h)
    total = h.sum()
    if total == 0:
        return amax
    count = np.concatenate([[0.0], np.cumsum(h)])
    held = np.concatenate([[0.0], np.cumsum(h > 0)])
    with np.errstate(divide="ignore", invalid="ignore"):
        hlogh = np.concatenate([[0.0], np.cumsum(np.where(h > 0, h * np.log(np.where(h > 0, h, 1)), 0.0))])
        i = np.arange(LEVELS, bins + 1)
        chunk = np.arange(LEVELS + 1)
        edges = (chunk[None, :] * i[:, None]) // LEVELS  # (candidates, LEVELS + 1)
        sums = count[edges[:, 1:]] - count[edges[:, :-1]]
        nonzero = held[edges[:, 1:]] - held[edges[:, :-1]]
        below = count[i][:, None]
        level = np.where(nonzero > 0, sums / np.where(nonzero > 0, nonzero, 1), 0.0)
        last = h[i - 1]
        sums[:, -1] -= last  # the last bin's term is its own
        ratio = np.where(level > 0, level, 1) / np.where(below > 0, below, 1)
        log_q = np.where(level > 0, np.log(ratio), 0.0)
        part_p = (hlogh[i - 1] - count[i - 1] * np.log(total)) / total
        part_q = np.sum(np.where(sums > 0, sums * log_q, 0.0), axis=1) / total
        p_last = (total - count[i - 1]) / total
        q_last = np.where(last > 0, level[:, -1] / np.where(below[:, 0] > 0, below[:, 0], 1), 1e-12)
        kl = part_p - part_q + np.where(p_last > 0, p_last * np.log(p_last / q_last), 0.0)
    kl = np.where(below[:, 0] > 0, kl, np.inf)
    return float(i[int(np.argmin(kl))]) * amax / bins


def scale_of(threshold: float) -> float:
    """The symmetric INT8 scale of ``threshold`` (an all-zero tensor: 1, which keeps zeros exact)."""
    return threshold / QMAX if threshold > 0 else 1.0
