"""Tensor layouts the application chooses (``setInputTensorDesc`` / ``setOutputTensorDesc``).

A network is compiled for dense tensors; an application may keep its data in another arrangement of
the same tensor — other byte strides (padded rows, NHWC order expressed as permuted strides), another
start offset in its memory. Only that may change: the dims, the data type and the tensor's identity
are what the network was compiled for. The runtime then converts between the application's memory and
a dense staging buffer around each run (:class:`Staging`).

Usage::

    d = rt.getInputTensorDesc(0)
    n, c, h, w = d.dims
    nhwc = (h * w * c * 4, 4, w * c * 4, c * 4)          # byte strides of NHWC, indexed N, C, H, W
    rt.setInputTensorDesc(0, dataclasses.replace(d, strides=nhwc))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.loadable.container import ELEMENT_SIZE, TensorDesc, tensor_span
from pydla.portability.interface import NvDlaMemHandle

BITS: dict[int, np.dtype[Any]] = {n: np.dtype(f"<u{n}") for n in (1, 2, 4, 8)}
FIXED = ("name", "dims", "data_type", "direction", "bind_id", "buffer")
WHY = {"name": "it names the network's tensor", "dims": "the network was compiled for these dims",
       "data_type": "the network was compiled for this data type (convert before binding)",
       "direction": "it is the network's", "bind_id": "it is the network's", "buffer": "it is the network's"}


def dense_strides(dims: tuple[int, ...], element: int) -> tuple[int, ...]:
    out: list[int] = []
    step = element
    for d in reversed(dims):
        out.insert(0, step)
        step *= d
    return tuple(out)


def check_layout(current: TensorDesc, new: TensorDesc, what: str) -> TensorDesc:
    """``new`` if it changes only strides, layout, offset and size (consistently); DlaError saying why
    otherwise."""
    changed = [f for f in FIXED if getattr(new, f) != getattr(current, f)]
    if changed:
        reasons = "; ".join(f"{f} ({WHY[f]})" for f in changed)
        raise DlaError(NvError.NotSupported, f"{what}: cannot change {reasons}. Strides, layout, offset "
                                             "and size may change")
    el = ELEMENT_SIZE[current.data_type]
    if not isinstance(new.strides, (tuple, list)):
        raise DlaError(NvError.BadParameter, f"{what}: strides {new.strides!r}: a tuple of byte strides")
    strides = tuple(new.strides)
    if len(strides) != len(current.dims):
        raise DlaError(NvError.BadParameter, f"{what}: {len(strides)} strides for {len(current.dims)} dims")
    for i, s in enumerate(strides):
        if isinstance(s, bool) or not isinstance(s, int) or s <= 0 or s % el:
            raise DlaError(NvError.BadParameter, f"{what}: stride {i} = {s!r}: a positive multiple of the "
                                                 f"{el}-byte element")
    # No two elements may share bytes: walk the dims from the smallest stride up.
    reach = el
    for d, s in sorted(((d, s) for d, s in zip(current.dims, strides, strict=True) if d > 1),
                       key=lambda ds: ds[1]):
        if s < reach:
            raise DlaError(NvError.BadParameter, f"{what}: strides {strides} make elements overlap")
        reach = s * (d - 1) + reach
    need = tensor_span(current.dims, strides, el)
    if isinstance(new.offset, bool) or not isinstance(new.offset, int) or new.offset < 0:
        raise DlaError(NvError.BadParameter, f"{what}: offset {new.offset!r}")
    if isinstance(new.size, bool) or not isinstance(new.size, int):
        raise DlaError(NvError.BadParameter, f"{what}: size {new.size!r}: a number of bytes")
    if new.size < need:
        raise DlaError(NvError.InvalidSize, f"{what}: size {new.size} is less than the {need} bytes the "
                                            f"strides {strides} span")
    return new


def strided_view(mem: NvDlaMemHandle, desc: TensorDesc) -> npt.NDArray[Any]:
    """``desc``'s tensor in ``mem`` as a numpy view with its strides (no copy). Elements are unsigned
    integers of the element's size: converting layouts moves bits, exactly."""
    raw = mem.bytes_view()
    if desc.offset + desc.size > raw.size:
        raise DlaError(NvError.InvalidSize, f"tensor '{desc.name}': offset {desc.offset} + size {desc.size} "
                                            f"exceeds the {raw.size}-byte memory bound to it")
    dtype: np.dtype[Any] = BITS[ELEMENT_SIZE[desc.data_type]]
    data = raw[desc.offset:desc.offset + desc.size]
    view: npt.NDArray[Any] = np.ndarray(desc.dims, dtype=dtype, buffer=data, strides=desc.strides)
    return view


@dataclass
class Staging:
    """A tensor whose application layout differs from the network's: the application's memory, and
    the dense buffer the network reads or writes instead."""

    desc: TensorDesc          # the application's layout
    network: TensorDesc       # the compiled, dense one
    dense: NvDlaMemHandle     # bound to the network
    user: NvDlaMemHandle | None = None

    def _views(self) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        if self.user is None:
            raise DlaError(NvError.InvalidState, f"tensor '{self.desc.name}' is not bound")
        return strided_view(self.user, self.desc), strided_view(self.dense, self.network)

    def to_network(self) -> None:
        user, dense = self._views()
        np.copyto(dense, user)

    def from_network(self) -> None:
        user, dense = self._views()
        np.copyto(user, dense)
