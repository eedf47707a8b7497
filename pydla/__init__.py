"""pydla: an NVDLA-style accelerator software stack in Python.

Usage::

    import pydla
    try:
        ...
    except pydla.DlaError as e:
        print(e.code.name, e)
"""

from typing import Any

from pydla._version import __version__
from pydla.errors import DlaError, NvError

__all__ = ["DlaError", "NvError", "Session", "__version__", "createRuntime"]


def createRuntime(*args: Any, **kwargs: Any) -> Any:
    """A runtime (IRuntime) on the in-process port: see :func:`pydla.umd.runtime.createRuntime`.

    Usage: ``rt = pydla.createRuntime(); rt.load("model.dla")``
    """
    from pydla.umd import runtime

    return runtime.createRuntime(*args, **kwargs)


def __getattr__(name: str) -> Any:
    # Session is imported on first use, so that importing pydla stays light.
    if name == "Session":
        from pydla.session import Session

        return Session
    raise AttributeError(f"module 'pydla' has no attribute {name!r}")
