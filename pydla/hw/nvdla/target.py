"""The facts of an NVDLA hardware configuration that the block kernels need.

nvdla/hw defines the configurations in ``spec/defs/<name>.spec``; these are the parameters that
change what a block computes or accepts (the memory atom, the precisions, which blocks and SDP
stages exist). Timing parameters (throughputs, bus widths) change no result and are not here.

Usage::

    from pydla.hw.nvdla.target import NV_SMALL, by_name
    NV_SMALL.atom                      # 8
    by_name("nv_full").has_rubik       # True
"""

from __future__ import annotations

from dataclasses import dataclass

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.precision import Precision


@dataclass(frozen=True)
class NvdlaTarget:
    """One NVDLA configuration, as the block kernels see it."""

    name: str
    atom: int  # bytes of one memory atom (feature data is read and written in atoms)
    precisions: frozenset[Precision]
    has_bdma: bool
    has_rubik: bool
    sdp_has_y: bool  # the SDP's element-wise stage (Y, "EW")
    sdp_has_lut: bool
    multi_batch: bool

    def epa(self, prec: Precision) -> int:
        """Elements per atom for ``prec``: the channels of one surface."""
        return self.atom // prec.bpe

    def require(self, prec: Precision, what: str) -> None:
        """Refuse a precision the configuration does not have (nv_small is INT8 only)."""
        if prec not in self.precisions:
            names = ", ".join(p.name for p in sorted(self.precisions))
            raise DlaError(NvError.NotSupported, f"{what}: {prec.name} is not supported by {self.name} "
                                                 f"(it has {names})")


_ALL = frozenset(Precision)
_INT8 = frozenset({Precision.INT8})

NV_FULL = NvdlaTarget("nv_full", 32, _ALL, has_bdma=True, has_rubik=True, sdp_has_y=True,
                      sdp_has_lut=True, multi_batch=True)
NV_LARGE = NvdlaTarget("nv_large", 32, _INT8, has_bdma=False, has_rubik=False, sdp_has_y=True,
                       sdp_has_lut=True, multi_batch=False)
NV_SMALL = NvdlaTarget("nv_small", 8, _INT8, has_bdma=False, has_rubik=False, sdp_has_y=False,
                       sdp_has_lut=False, multi_batch=False)
NV_SMALL_256 = NvdlaTarget("nv_small_256", 8, _INT8, has_bdma=False, has_rubik=False, sdp_has_y=False,
                           sdp_has_lut=False, multi_batch=False)
NV_SMALL_256_FULL = NvdlaTarget("nv_small_256_full", 8, _INT8, has_bdma=False, has_rubik=False,
                                sdp_has_y=True, sdp_has_lut=True, multi_batch=False)
NV_MEDIUM_512 = NvdlaTarget("nv_medium_512", 16, _INT8, has_bdma=False, has_rubik=False, sdp_has_y=False,
                            sdp_has_lut=False, multi_batch=False)
NV_MEDIUM_1024_FULL = NvdlaTarget("nv_medium_1024_full", 32, _INT8, has_bdma=False, has_rubik=False,
                                  sdp_has_y=True, sdp_has_lut=True, multi_batch=False)

TARGETS: dict[str, NvdlaTarget] = {t.name: t for t in (
    NV_FULL, NV_LARGE, NV_SMALL, NV_SMALL_256, NV_SMALL_256_FULL, NV_MEDIUM_512, NV_MEDIUM_1024_FULL)}


def by_name(name: str) -> NvdlaTarget:
    """The configuration called ``name`` (as nvdla/hw's spec/defs names it)."""
    try:
        return TARGETS[name]
    except KeyError:
        raise DlaError(NvError.BadParameter, f"NVDLA configuration {name!r} is unknown "
                                             f"(known: {', '.join(TARGETS)})") from None
