"""pydla: an NVDLA-style accelerator software stack in Python.

Usage::

    import pydla
    out = pydla.Session("model.onnx").run({"input": x})     # numpy in, numpy out
    sess = pydla.InferenceSession("model.onnx")              # onnxruntime's API
    v = pydla.OrtValue.ortvalue_from_numpy(x)                # onnxruntime's OrtValue, IOBinding
    rt = pydla.createRuntime()                               # the NVDLA runtime API (IRuntime)
    y = pydla.ShaveKernel("scale_add.elf")(x, params=p)      # a custom SHAVE kernel on an array
    try:
        ...
    except pydla.DlaError as e:
        print(e.code.name, e)
"""

from __future__ import annotations

from pydla._version import __version__

# Importing pydla imports nothing else (not even typing): the `pydla` command's entry point
# (pydla.entry) is inside the package, and a Ctrl-C before it runs is Python's to report.
_TYPE_CHECKING = False  # not typing.TYPE_CHECKING (no typing import): type checkers read the block alike
if _TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from typing import Any as _Any

    from pydla.errors import DlaError, NvError
    from pydla.inference_session import InferenceSession
    from pydla.loadable.container import Loadable as ILoadable
    from pydla.loadable.metadata import ModelMetadata
    from pydla.model_info import TensorInfo
    from pydla.ort_values import IOBinding, NodeArg, OrtValue
    from pydla.platform import createRuntime
    from pydla.session import Session
    from pydla.shave_kernel import ShaveKernel
    from pydla.umd.cu import ComputeUnit
    from pydla.umd.runtime import IRuntime
    from pydla.umd.sync import ISync

__all__ = [
    "ComputeUnit",
    "DlaError",
    "ILoadable",
    "IOBinding",
    "IRuntime",
    "ISync",
    "InferenceSession",
    "ModelMetadata",
    "NodeArg",
    "NvError",
    "OrtValue",
    "Session",
    "ShaveKernel",
    "TensorInfo",
    "__version__",
    "createRuntime",
]

# Imported on first use, so that importing pydla stays light: name -> (module, attribute). Each is
# the real object (not a wrapper), so help() and inspect.signature() show its own parameters.
_LAZY = {
    "DlaError": ("pydla.errors", "DlaError"),
    "NvError": ("pydla.errors", "NvError"),
    "createRuntime": ("pydla.platform", "createRuntime"),  # the composition root builds the port
    "Session": ("pydla.session", "Session"),
    "InferenceSession": ("pydla.inference_session", "InferenceSession"),
    "OrtValue": ("pydla.ort_values", "OrtValue"),  # onnxruntime's value and binding types
    "IOBinding": ("pydla.ort_values", "IOBinding"),
    "NodeArg": ("pydla.ort_values", "NodeArg"),
    "ModelMetadata": ("pydla.loadable.metadata", "ModelMetadata"),
    "TensorInfo": ("pydla.model_info", "TensorInfo"),
    "IRuntime": ("pydla.umd.runtime", "IRuntime"),
    "ISync": ("pydla.umd.sync", "ISync"),
    "ILoadable": ("pydla.loadable.container", "Loadable"),  # the NVDLA runtime API's name for it
    "ComputeUnit": ("pydla.umd.cu", "ComputeUnit"),  # XRT's xrt::kernel
    "ShaveKernel": ("pydla.shave_kernel", "ShaveKernel"),  # a custom SHAVE kernel on numpy arrays
}


def __getattr__(name: str) -> _Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'pydla' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {"__doc__", "__name__", "__file__"})


# PYDLA_LOG=debug|info|warning|error turns on pydla's logs on stderr without code (nothing when unset;
# logging is then not even imported).
if __import__("os").environ.get("PYDLA_LOG"):
    from pydla.logconfig import configure_from_env as _configure_log

    _configure_log()
