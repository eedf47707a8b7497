"""pydla: an NVDLA-style accelerator software stack in Python.

Usage::

    import pydla
    try:
        ...
    except pydla.DlaError as e:
        print(e.code.name, e)
"""

from pydla._version import __version__
from pydla.errors import DlaError, NvError

__all__ = ["DlaError", "NvError", "__version__"]
