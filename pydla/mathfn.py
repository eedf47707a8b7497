"""Numeric functions numpy lacks, shared by pydla's CPU library and the SHAVE tiles' high-level
emulation (neither layer owns them).

Usage: ``from pydla.mathfn import erf; erf(np.linspace(-3, 3, 7))``
"""

from __future__ import annotations

from typing import Any

import numpy as np


def erf(x: Any) -> Any:
    """erf in float64 (numpy has none): its Maclaurin series below |x| = 0.5, where it keeps full
    relative precision; above, 1 - erfc by the Chebyshev fit of erfc whose fractional error is
    below 1.2e-7 (Numerical Recipes' erfcc)."""
    x = np.asarray(x, dtype=np.float64)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    far = np.sign(x) * (1.0 - t * np.exp(poly))
    x2 = x * x
    term, near = x.copy(), x.copy()
    for n in range(1, 12):  # x * sum (-x^2)^n / (n! (2n + 1)): |x| < 0.5 needs a dozen terms
        term = term * -x2 / n
        near = near + term / (2 * n + 1)
    return np.where(z < 0.5, near * (2.0 / np.sqrt(np.pi)), far)
