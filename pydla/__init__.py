"""pydla: an NVDLA-style accelerator software stack in Python.

Usage::

    import pydla
    try:
        ...
    except pydla.DlaError as e:
        print(e.code.name, e)
"""

from typing import Any as _Any

from pydla._version import __version__
from pydla.errors import DlaError, NvError

__all__ = ["DlaError", "ILoadable", "IRuntime", "ISync", "NvError", "Session", "__version__", "createRuntime"]

# Imported on first use, so that importing pydla stays light: name -> (module, attribute).
_LAZY = {
    "Session": ("pydla.session", "Session"),
    "IRuntime": ("pydla.umd.runtime", "IRuntime"),
    "ISync": ("pydla.umd.sync", "ISync"),
    "ILoadable": ("pydla.loadable.container", "Loadable"),  # the NVDLA runtime API's name for it
}


def createRuntime(*args: _Any, **kwargs: _Any) -> _Any:
    """A runtime (IRuntime) on the in-process port: see :func:`pydla.umd.runtime.createRuntime`.

    Usage: ``rt = pydla.createRuntime(); rt.load("model.dla")``
    """
    from pydla.umd import runtime

    return runtime.createRuntime(*args, **kwargs)


def __getattr__(name: str) -> _Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'pydla' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(where[0]), where[1])


def __dir__() -> list[str]:
    return sorted(set(__all__) | {"__doc__", "__name__", "__file__"})
