"""The INT8 calibration table: per tensor, the scale, zero point, method and observed range that
post-training calibration (:mod:`pydla.compiler.calibrate`) found, as versioned JSON, tied to the
model it was made for by the model's digest.

The file::

    {"format": "pydla-calibration-table", "version": 1,
     "model": {"name": "resnet18.onnx", "digest": "sha256:9f2c..."},
     "method": "entropy", "percentile": null, "samples": 64,
     "tensors": {"conv1_out": {"scale": 0.0312, "zero_point": 0, "method": "entropy",
                               "range": [-3.1, 5.7], "threshold": 3.96}, ...}}

Usage::

    table = CalibrationTable.load("model.calib.json")
    table.check_model(onnx_model, "model.onnx")  # DlaError naming both models when it is another's
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydla.errors import DlaError, NvError, file_error

# The calibration methods (pydla.compiler.ranges computes them); the table is read where loadables
# are (pydla info), below the compiler.
METHODS = ("minmax", "percentile", "entropy")

FORMAT = "pydla-calibration-table"
VERSION = 1
INT8_RANGE = (-128, 127)


def model_digest(model: Any) -> str:
    """The digest of an ``onnx.ModelProto`` (its deterministic serialization), as tables name it."""
    return "sha256:" + hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


@dataclass(frozen=True)
class TensorRange:
    """One tensor's quantization: ``real = scale * (q - zero_point)``."""

    scale: float
    zero_point: int
    method: str
    range: tuple[float, float]  # the (min, max) the calibration runs saw
    threshold: float  # the magnitude mapped to 127

    def as_json(self) -> dict[str, Any]:
        return {"scale": self.scale, "zero_point": self.zero_point, "method": self.method,
                "range": list(self.range), "threshold": self.threshold}


@dataclass(frozen=True)
class CalibrationTable:
    """Scales of a model's activations for INT8 (see the module for the file).

    Usage: ``table.save("m.calib.json")``; ``CalibrationTable.load("m.calib.json")``"""

    model_name: str
    model_digest: str
    method: str
    samples: int
    tensors: dict[str, TensorRange] = field(default_factory=dict)
    percentile: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION,
                "model": {"name": self.model_name, "digest": self.model_digest},
                "method": self.method, "percentile": self.percentile, "samples": self.samples,
                "tensors": {name: t.as_json() for name, t in self.tensors.items()}}

    def to_json(self) -> str:
        return json.dumps(self.as_json(), indent=1) + "\n"

    def save(self, path: str | Path, flag: str | None = None) -> None:
        """Write the table to ``path`` (DlaError naming the path, and ``flag`` when given)."""
        try:
            Path(path).write_text(self.to_json(), encoding="utf-8")
        except OSError as e:
            raise file_error(path, e, flag=flag, writing=True) from e

    @classmethod
    def load(cls, path: str | Path, flag: str | None = None) -> CalibrationTable:
        """The table in the file ``path``, checked (DlaError naming the file and the field)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            if isinstance(e, OSError):
                raise file_error(path, e, flag=flag) from e
            raise DlaError(NvError.BadValue, f"{path}: not a calibration table: not UTF-8 text") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, label: str = "calibration table") -> CalibrationTable:
        """The table in JSON ``text``; ``label`` names it in messages."""
        try:
            raw = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as e:
            raise DlaError(NvError.BadValue, f"{label}: not a calibration table: not JSON ({e})") from None
        return _from_raw(raw, label)

    def check_model(self, model: Any, name: str) -> None:
        """DlaError BadParameter when the table was made for another model than ``model``
        (``name``: how the user knows it, a file's path)."""
        digest = model_digest(model)
        if digest != self.model_digest:
            raise DlaError(NvError.BadParameter,
                           f"the calibration table is for model '{self.model_name}' "
                           f"({self.model_digest[:19]}), not for '{name}' ({digest[:19]}): calibrate "
                           "this model (--calibrate DIR)")

    def header(self) -> dict[str, Any]:
        """What a loadable records of the table (its recipe header's ``calibration``)."""
        return self.as_json()


def _bad(label: str, where: str, what: str) -> DlaError:
    return DlaError(NvError.BadValue, f"{label}: {where}: {what}")


def _number(label: str, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(label, where, f"{value!r} is not a finite number")
    return float(value)


def _from_raw(raw: Any, label: str) -> CalibrationTable:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        got = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise _bad(label, "format", f"{got!r}: not a calibration table ('{FORMAT}')")
    version = raw.get("version")
    if type(version) is not int or version < 1:
        raise _bad(label, "version", f"{version!r} is not a version number")
    if version > VERSION:
        raise DlaError(NvError.NotSupported, f"{label}: calibration table version {version}; this pydla "
                                             f"reads version {VERSION} (a newer pydla wrote it)")
    model = raw.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("name"), str) \
            or not isinstance(model.get("digest"), str) or not model["digest"].startswith("sha256:"):
        raise _bad(label, "model", "needs a name and a digest ('sha256:...')")
    method = raw.get("method")
    if method not in METHODS:
        raise _bad(label, "method", f"{method!r}: one of {', '.join(METHODS)}")
    samples = raw.get("samples")
    if type(samples) is not int or samples < 1:
        raise _bad(label, "samples", f"{samples!r} is not a count of 1 or more")
    percentile = raw.get("percentile")
    if percentile is not None:
        percentile = _number(label, "percentile", percentile)
    tensors = raw.get("tensors")
    if not isinstance(tensors, dict):
        raise _bad(label, "tensors", "not an object of tensor name -> quantization")
    return CalibrationTable(model["name"], model["digest"], method, samples,
                            {name: _tensor(label, name, t) for name, t in tensors.items()}, percentile)


def _tensor(label: str, name: str, t: Any) -> TensorRange:
    where = f"tensor '{name}'"
    if not isinstance(t, dict):
        raise _bad(label, where, "not an object")
    scale = _number(label, f"{where} scale", t.get("scale"))
    if scale <= 0:
        raise _bad(label, f"{where} scale", f"{scale} is not positive")
    zero_point = t.get("zero_point")
    if type(zero_point) is not int or not INT8_RANGE[0] <= zero_point <= INT8_RANGE[1]:
        raise _bad(label, f"{where} zero_point", f"{zero_point!r} is not an integer in [-128, 127]")
    method = t.get("method")
    if method not in METHODS:
        raise _bad(label, f"{where} method", f"{method!r}: one of {', '.join(METHODS)}")
    span = t.get("range")
    if not isinstance(span, list) or len(span) != 2:
        raise _bad(label, f"{where} range", f"{span!r} is not [min, max]")
    lo, hi = (_number(label, f"{where} range", v) for v in span)
    if lo > hi:
        raise _bad(label, f"{where} range", f"[{lo}, {hi}]: min above max")
    threshold = _number(label, f"{where} threshold", t.get("threshold"))
    if threshold < 0:
        raise _bad(label, f"{where} threshold", f"{threshold} is negative")
    return TensorRange(scale, zero_point, method, (lo, hi), threshold)
