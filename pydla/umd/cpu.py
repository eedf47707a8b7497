"""CPU libraries (XRT's run recipe): loaded at run time, entered through ``library_init``, asked for
functions by name through ``lookup``.

Two forms are loaded: shared libraries (``.so``, ``.dylib``, ``.dll``) through ctypes with the C ABI
of ``pydla/cpu_library_api.h`` (see :mod:`pydla.umd.cpu_native`), and Python modules (``.py``: a
file exposing ``library_init(args)`` that sets ``args.lookup_fn``; ``lookup_fn(name, lookup_args)``
fills in ``num_args`` and ``callable``).
A library path is relative: it is looked up in each directory of ``PYDLA_LIBRARY_PATH`` (``:``
separated), then in pydla's install directory. Absolute paths and ``..`` are refused unless the
caller allows them.

Usage::

    libs = CpuLibraries()
    fn = libs.lookup("umd/cpulib.py", "softmax")
    fn.callable(args)
"""

from __future__ import annotations

import importlib.util
import os
import threading
import types
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.umd.cpu_native import NativeLibrary

NATIVE_SUFFIXES = (".so", ".dylib", ".dll")
ENV = "PYDLA_LIBRARY_PATH"
INSTALL_DIR = Path(__file__).resolve().parent.parent  # the pydla package's directory (pydla.umd's parent)


@dataclass(frozen=True)
class CpuFunction:
    library: str
    name: str
    num_args: int
    callable: Any


class CpuLibraries:
    """Loaded libraries, by resolved path; loading is done once per path."""

    def __init__(self, *, allow_unsafe_paths: bool = False) -> None:
        self.allow_unsafe_paths = allow_unsafe_paths
        self._lock = threading.Lock()
        self._libraries: dict[Path, Any] = {}

    def resolve(self, library_path: str) -> Path:
        p = PurePosixPath(library_path.replace("\\", "/"))
        if not self.allow_unsafe_paths and (p.is_absolute() or ".." in p.parts):
            raise DlaError(NvError.BadParameter,
                           f"CPU library '{library_path}': absolute paths and '..' are not allowed")
        if p.is_absolute():
            candidates = [Path(library_path)]
        else:
            roots = [Path(d) for d in os.environ.get(ENV, "").split(os.pathsep) if d]
            roots.append(INSTALL_DIR)
            candidates = [root / Path(*p.parts) for root in roots]
        for c in candidates:
            if c.is_file():
                return c.resolve()
        where = ", ".join(str(c.parent) for c in candidates)
        raise DlaError(NvError.FileNotFound, f"CPU library '{library_path}' not found (looked in {where})")

    def load(self, library_path: str) -> Any:
        path = self.resolve(library_path)
        with self._lock:
            lib = self._libraries.get(path)
            if lib is not None:
                return lib
            if path.suffix in NATIVE_SUFFIXES or ".so." in path.name:
                native = NativeLibrary(path, library_path)
                self._libraries[path] = native
                return native
            if path.suffix != ".py":
                raise DlaError(NvError.NotSupported,
                               f"CPU library '{library_path}': a shared library "
                               f"({', '.join(NATIVE_SUFFIXES)}) or a Python module (.py) is expected")
            spec = importlib.util.spec_from_file_location(f"pydla_cpulib_{len(self._libraries)}", path)
            if spec is None or spec.loader is None:
                raise DlaError(NvError.FileReadFailed, f"CPU library '{library_path}' cannot be loaded")
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as e:
                raise DlaError(NvError.FileReadFailed,
                               f"CPU library '{library_path}' failed to load: {type(e).__name__}: {e}") from e
            init = types.SimpleNamespace(lookup_fn=None)
            entry = getattr(module, "library_init", None)
            if entry is None:
                raise DlaError(NvError.NotSupported, f"CPU library '{library_path}' has no library_init")
            entry(init)
            if not callable(init.lookup_fn):
                raise DlaError(NvError.NotSupported,
                               f"CPU library '{library_path}': library_init did not set lookup_fn")
            self._libraries[path] = init
            return init

    def lookup(self, library_path: str, name: str) -> CpuFunction:
        lib = self.load(library_path)
        if isinstance(lib, NativeLibrary):
            num_args, call = lib.lookup(name)
            return CpuFunction(library_path, name, num_args, call)
        found = types.SimpleNamespace(num_args=None, callable=None)
        try:
            lib.lookup_fn(name, found)
        except DlaError:
            raise
        except Exception as e:
            raise DlaError(NvError.NotSupported,
                           f"CPU library '{library_path}': lookup of '{name}' failed: {e}") from e
        if not isinstance(found.num_args, int) or not callable(found.callable):
            raise DlaError(NvError.NotSupported,
                           f"CPU library '{library_path}' has no function '{name}'")
        return CpuFunction(library_path, name, found.num_args, found.callable)
