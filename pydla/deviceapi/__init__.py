"""Binary contracts: declared once in YAML, generated into Python ctypes, C and C++.

The generated Python modules (``pydla.deviceapi.generated``) and the runtime helpers need only the
standard library; loading specs and rendering them needs the ``codegen`` extra (jinja2, pyyaml,
jsonschema).
"""

from pathlib import Path


def include_dir() -> Path:
    """The directory to put on a C compiler's include path: ``#include "pydla/device_api.h"``. Needs
    no extra (the generated headers are committed).

    Usage: ``cc -I$(pydla deviceapi include-dir) ...``
    """
    return Path(__file__).resolve().parent / "include"
