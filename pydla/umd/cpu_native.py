"""CPU libraries as shared libraries (the dlopen form of XRT's CPU kernels), through the C ABI of
``pydla/cpu_library_api.h``: ``library_init`` sets a lookup function; a found function is wrapped
so the runner calls it like a Python one, with the run's argument list in argidx order.

Usage::

    lib = NativeLibrary(Path("libconvert.so"))
    num_args, fn = lib.lookup("convert_ifm")
    fn([src_uint8_array, dst_uint8_array, "nchw2nchw4c"])
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pydla.deviceapi.generated import cpu_library as abi
from pydla.errors import DlaError, NvError

MESSAGE_SIZE = 512
CpuFunctionType = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(abi.cpu_arg_t), ctypes.c_uint32,
                                   ctypes.c_char_p, ctypes.c_uint32)
LookupType = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_char_p, ctypes.POINTER(abi.cpu_lookup_args_t))


def include_dirs() -> list[Path]:
    """The directories to pass to a C compiler with -I for ``#include "pydla/cpu_library_api.h"``:
    this package's hand-written header, then the generated structs it includes."""
    from pydla.deviceapi import include_dir as deviceapi_include

    return [Path(__file__).parent / "include", deviceapi_include()]


def cflags() -> str:
    """The ``-I`` options of :func:`include_dirs`, for a shell command line.

    Usage: ``cc -shared -fPIC $(python -c 'import pydla.umd.cpu_native as c; print(c.cflags())') ...``
    """
    return " ".join(f"-I{d}" for d in include_dirs())


class NativeLibrary:
    """A shared library loaded with ctypes; ``library_init`` is called once, at load."""

    def __init__(self, path: Path, name: str | None = None) -> None:
        self.name = name or str(path)
        try:
            self._dll = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            raise DlaError(NvError.FileReadFailed, f"CPU library '{self.name}' failed to load: {e}") from e
        try:
            init = self._dll.library_init
        except AttributeError:
            raise DlaError(NvError.NotSupported, f"CPU library '{self.name}' has no library_init") from None
        init.restype = None
        init.argtypes = [ctypes.POINTER(abi.cpu_library_init_args_t)]
        args = abi.cpu_library_init_args_t(abi_version=abi.VERSION[0])
        init(ctypes.byref(args))
        if not args.lookup_fn:
            raise DlaError(NvError.NotSupported,
                           f"CPU library '{self.name}': library_init did not set lookup_fn")
        self._lookup = LookupType(args.lookup_fn)

    def lookup(self, function: str) -> tuple[int, Callable[[list[Any]], None]]:
        """(number of arguments, a callable taking the argument list); DlaError when not found."""
        found = abi.cpu_lookup_args_t()
        status = self._lookup(function.encode(), ctypes.byref(found))
        if status != 0 or not found.callable:
            raise DlaError(NvError.NotSupported, f"CPU library '{self.name}' has no function '{function}'")
        fn = CpuFunctionType(found.callable)
        library, num_args = self.name, int(found.num_args)

        def call(args: list[Any]) -> None:
            array = (abi.cpu_arg_t * max(len(args), 1))()
            keep: list[Any] = []  # the encoded strings must outlive the call
            for i, value in enumerate(args):
                _encode(array[i], value, keep, f"{library}:{function} argument {i}")
            message = ctypes.create_string_buffer(MESSAGE_SIZE)
            status = int(fn(array, len(args), message, MESSAGE_SIZE))
            if status != 0:
                text = message.value.decode("utf-8", "replace") or "no message"
                code = NvError(status) if status in NvError._value2member_map_ else NvError.ResourceError
                raise DlaError(code, f"CPU function '{function}' of '{library}' failed ({status}): {text}")

        return num_args, call


def _encode(slot: Any, value: Any, keep: list[Any], what: str) -> None:
    if isinstance(value, np.ndarray):
        if not value.flags.c_contiguous:
            raise DlaError(NvError.BadParameter, f"{what}: a buffer must be contiguous")
        slot.kind, slot.data, slot.size = abi.cpu_arg_kind_e.BUFFER, value.ctypes.data, value.nbytes
    elif isinstance(value, bool) or value is None:
        raise DlaError(NvError.BadParameter, f"{what}: {value!r} has no C form")
    elif isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise DlaError(NvError.BadValue, f"{what}: {value} does not fit in 64 bits")
        slot.kind, slot.int_value = abi.cpu_arg_kind_e.INT, value
    elif isinstance(value, float):
        slot.kind, slot.float_value = abi.cpu_arg_kind_e.FLOAT, value
    elif isinstance(value, str):
        encoded = ctypes.create_string_buffer(value.encode())
        keep.append(encoded)
        slot.kind, slot.data = abi.cpu_arg_kind_e.STRING, ctypes.addressof(encoded)
        slot.size = len(encoded) - 1
    else:
        raise DlaError(NvError.BadParameter, f"{what}: {type(value).__name__} has no C form")
