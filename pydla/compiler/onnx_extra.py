"""The onnx extra, asked for where the compiler first needs it: one line saying what to install
instead of an ImportError from deep inside. Imports nothing of onnx itself, so that the command line
and the compile cache can say it before any compiler module is loaded.

Usage: ``onnx = import_onnx()``  (DlaError NotSupported, naming the extra, without it)
"""

from __future__ import annotations

from typing import Any

from pydla.errors import DlaError, NvError

ONNX_EXTRA = "compiling an ONNX model needs the onnx extra: pip install 'pydla[onnx]'"


def import_onnx() -> Any:
    """The onnx module, or DlaError NotSupported saying which extra to install."""
    try:
        import onnx
    except ImportError as e:
        raise DlaError(NvError.NotSupported, ONNX_EXTRA) from e
    return onnx
