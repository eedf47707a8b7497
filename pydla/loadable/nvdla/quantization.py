"""The quantization of an INT8 NVDLA Loadable's bound tensors, as pydla's compiler records it: a blob
``pydla_int8_tensors`` (JSON, beside the loadable's own tables, which have no field for it) mapping
each input and output name to its type, shape, scale and zero point (``real = scale * (q - zero)``).
NVIDIA's runtime ignores the blob.

Usage::

    meta = tensor_quantization(lo)      # {} for a loadable without the blob
    meta["input"]["scale"], meta["input"]["zero_point"]
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M

METADATA_BLOB = "pydla_int8_tensors"
FORMAT = "pydla-int8-tensors"


def tensor_quantization(lo: M.NvdlaLoadable) -> dict[str, dict[str, Any]]:
    """Each bound tensor's quantization ({} when the loadable has no record); DlaError for a record
    that is not one."""
    blob = lo.blob(METADATA_BLOB)
    if blob is None:
        return {}
    where = f"NVDLA Loadable: blob {METADATA_BLOB}"
    try:
        meta = json.loads(bytes(blob.data[: blob.size]))
    except ValueError as e:
        raise DlaError(NvError.BadValue, f"{where} is not JSON ({e})") from e
    if (
        not isinstance(meta, dict)
        or meta.get("format") != FORMAT
        or not isinstance(meta.get("tensors"), dict)
    ):
        raise DlaError(NvError.BadValue, f"{where} is not pydla's record of tensor quantization")
    out: dict[str, dict[str, Any]] = {}
    for name, t in meta["tensors"].items():
        scale, zero = (
            t.get("scale") if isinstance(t, dict) else None,
            t.get("zero_point") if isinstance(t, dict) else None,
        )
        if (
            not isinstance(scale, (int, float))
            or not math.isfinite(scale)
            or scale <= 0
            or not isinstance(zero, int)
            or not -128 <= zero <= 127
        ):
            raise DlaError(
                NvError.BadValue,
                f"{where}: tensor {name!r}: scale {scale!r} and zero point "
                f"{zero!r} (a positive scale, an INT8 zero point)",
            )
        out[str(name)] = dict(t)
    return out
