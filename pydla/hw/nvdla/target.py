"""The facts of an NVDLA hardware configuration that the block kernels need, in one place.

nvdla/hw defines the configurations in ``spec/defs/<name>.spec``; these are the parameters that
change what a block computes or accepts: the memory atom, the precisions, which blocks and SDP
stages exist, the MAC array (atomic C x K: the weights' kernel groups and channel blocks, CSC's
lanes), CBUF's geometry as NVIDIA's C model addresses it (nv_full's model pairs two 64-byte banks'
halves into 128-byte entries, 256 per bank; the newer model uses the spec's bank width and depth),
weight compression and Winograd (nv_full only), and the register map (nvdlav1 "nvdla_v1" for nv_full,
the newer "nvdla_v2" for the others: nv_full's WEIGHT_BYTES and WMB_BYTES drop the low 7 bits).
Timing parameters (throughputs, bus widths) change no result and are not here.

Usage::

    from pydla.hw.nvdla.target import NV_SMALL, by_name
    NV_SMALL.atom                      # 8
    by_name("nv_full").has_rubik       # True
    NV_SMALL.mac_atomic_c              # 8
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
    mac_atomic_c: int = 64  # MAC_ATOMIC_C_SIZE: channels of one atom (elements of one byte)
    mac_atomic_k: int = 32  # MAC_ATOMIC_K_SIZE: kernels of one group (one-byte elements)
    cbuf_banks: int = 16
    cbuf_bank_entries: int = 256  # entries per bank, as the C model addresses them
    cbuf_entry_bytes: int = 128
    weight_compression: bool = False
    winograd: bool = False
    register_map: str = "nvdla_v2"  # "nvdla_v1" (nv_full) or "nvdla_v2"

    def epa(self, prec: Precision) -> int:
        """Elements per atom for ``prec``: the channels of one surface."""
        return self.atom // prec.bpe

    def kernel_groups(self, prec: Precision) -> tuple[int, int]:
        """(kernels per group kf, channels per block cf) of the weights for ``prec``: atomic K (half of it
        for two-byte elements) and atomic C."""
        return (self.mac_atomic_k if prec is Precision.INT8 else self.mac_atomic_k // 2), self.mac_atomic_c

    def require(self, prec: Precision, what: str) -> None:
        """Refuse a precision the configuration does not have (nv_small is INT8 only)."""
        if prec not in self.precisions:
            names = ", ".join(p.name for p in sorted(self.precisions))
            raise DlaError(NvError.NotSupported, f"{what}: {prec.name} is not supported by {self.name} "
                                                 f"(it has {names})")


_ALL = frozenset(Precision)
_INT8 = frozenset({Precision.INT8})

NV_FULL = NvdlaTarget("nv_full", 32, _ALL, has_bdma=True, has_rubik=True, sdp_has_y=True,
                      sdp_has_lut=True, multi_batch=True, mac_atomic_c=64, mac_atomic_k=32, cbuf_banks=16,
                      cbuf_bank_entries=256, cbuf_entry_bytes=128, weight_compression=True, winograd=True,
                      register_map="nvdla_v1")
NV_LARGE = NvdlaTarget("nv_large", 32, _INT8, has_bdma=False, has_rubik=False, sdp_has_y=True,
                       sdp_has_lut=True, multi_batch=False, mac_atomic_c=64, mac_atomic_k=32, cbuf_banks=16,
                       cbuf_bank_entries=512, cbuf_entry_bytes=64)
NV_SMALL = NvdlaTarget("nv_small", 8, _INT8, has_bdma=False, has_rubik=False, sdp_has_y=False,
                       sdp_has_lut=False, multi_batch=False, mac_atomic_c=8, mac_atomic_k=8, cbuf_banks=32,
                       cbuf_bank_entries=512, cbuf_entry_bytes=8)
NV_SMALL_256 = NvdlaTarget("nv_small_256", 8, _INT8, has_bdma=False, has_rubik=False, sdp_has_y=False,
                           sdp_has_lut=False, multi_batch=False, mac_atomic_c=32, mac_atomic_k=8,
                           cbuf_banks=32, cbuf_bank_entries=128, cbuf_entry_bytes=32)
NV_SMALL_256_FULL = NvdlaTarget("nv_small_256_full", 8, _INT8, has_bdma=False, has_rubik=False,
                                sdp_has_y=True, sdp_has_lut=True, multi_batch=False, mac_atomic_c=32,
                                mac_atomic_k=8, cbuf_banks=32, cbuf_bank_entries=128, cbuf_entry_bytes=32)
NV_MEDIUM_512 = NvdlaTarget("nv_medium_512", 16, _INT8, has_bdma=False, has_rubik=False, sdp_has_y=False,
                            sdp_has_lut=False, multi_batch=False, mac_atomic_c=32, mac_atomic_k=16,
                            cbuf_banks=32, cbuf_bank_entries=512, cbuf_entry_bytes=32)
NV_MEDIUM_1024_FULL = NvdlaTarget("nv_medium_1024_full", 32, _INT8, has_bdma=False, has_rubik=False,
                                  sdp_has_y=True, sdp_has_lut=True, multi_batch=False, mac_atomic_c=32,
                                  mac_atomic_k=32, cbuf_banks=32, cbuf_bank_entries=512, cbuf_entry_bytes=32)

TARGETS: dict[str, NvdlaTarget] = {t.name: t for t in (
    NV_FULL, NV_LARGE, NV_SMALL, NV_SMALL_256, NV_SMALL_256_FULL, NV_MEDIUM_512, NV_MEDIUM_1024_FULL)}


def by_name(name: str) -> NvdlaTarget:
    """The configuration called ``name`` (as nvdla/hw's spec/defs names it)."""
    try:
        return TARGETS[name]
    except KeyError:
        raise DlaError(NvError.BadParameter, f"NVDLA configuration {name!r} is unknown "
                                             f"(known: {', '.join(TARGETS)})") from None
