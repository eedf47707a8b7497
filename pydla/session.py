"""``pydla.Session``: the short way — numpy in, numpy out, model layout and dtype on both sides.

Usage::

    sess = pydla.Session("model.onnx")          # or a .dla, bytes, or an onnx.ModelProto
    sess = pydla.Session("model.onnx", port="linux:/run/pydla")   # through the KMD daemon
    out = sess.run({"input": x})                # {"output": array}

An ONNX model is compiled on first use and cached by content in the user's cache directory
(``PYDLA_CACHE_DIR``, else ``$XDG_CACHE_HOME/pydla``, else ``~/.cache/pydla``). A session is
reusable and safe to use from several threads (runs on one session are serialised).
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pydla._version import __version__
from pydla.cachedir import cache_dir
from pydla.errors import DlaError, NvError
from pydla.loadable.container import NUMPY_TYPES
from pydla.umd.runtime import close_quietly, createRuntime


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]


def loadable_bytes(model: Any, config: str = "full", precision: str = "fp32") -> bytes:
    """A loadable for ``model``: a .dla path or bytes as they are; ONNX compiled (and cached)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        if data[:4] == b"\x7fELF":
            return data
        return _compile_cached(data, config, precision)
    if isinstance(model, (str, Path)):
        path = Path(model)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise DlaError(NvError.FileNotFound, f"{path}: {e.strerror}") from e
        return data if data[:4] == b"\x7fELF" else _compile_cached(data, config, precision)
    serialize = getattr(model, "SerializeToString", None)
    if serialize is None:
        raise DlaError(NvError.BadParameter, f"model of type {type(model).__name__}: give a path, bytes "
                                             "or an onnx.ModelProto")
    return _compile_cached(serialize(), config, precision)


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of what decides a compiled loadable: the compiler's sources, the loadable side it
    writes with (the task encoder, the CPU operator tables, the container and ELF writers), the
    device configurations and limits, and the binary-contract specs and layouts. Part of the cache
    key, so that a changed compiler (a development install, a patched one) never serves loadables
    the old one made."""
    root = Path(__file__).parent
    digest = hashlib.sha256(__version__.encode())
    for f in fingerprinted_files():
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]


def fingerprinted_files() -> list[Path]:
    """The files :func:`compiler_fingerprint` hashes."""
    root = Path(__file__).parent
    return sorted([*(root / "compiler").rglob("*.py"), *(root / "loadable").rglob("*.py"),
                   *(root / "elf").rglob("*.py"), root / "hw" / "config.py",
                   *(root / "hw" / "configs").glob("*.json"), root / "deviceapi" / "task_layout.py",
                   *(root / "deviceapi" / "specs").rglob("*.yaml")])


def _compile_cached(onnx_bytes: bytes, config: str, precision: str) -> bytes:
    fingerprint = compiler_fingerprint()
    # A configuration given as a file is part of the key by its contents, not only its name.
    config_file = Path(config)
    contents = config_file.read_bytes() if config_file.suffix == ".json" and config_file.is_file() else b""
    key = hashlib.sha256(onnx_bytes + f"|{config}|{precision}|{fingerprint}|".encode() + contents).hexdigest()
    path = cache_dir() / f"{key}.dla"
    if path.is_file():
        return path.read_bytes()
    try:
        import onnx
    except ImportError as e:
        raise DlaError(NvError.NotSupported, "compiling ONNX needs the onnx packages: "
                                             "pip install 'pydla[onnx]'") from e
    from pydla.compiler.api import compile_model

    try:
        model = onnx.load_from_string(onnx_bytes)
    except Exception as e:
        raise DlaError(NvError.BadValue, f"not a loadable and not an ONNX model: {e}") from e
    blob: bytes = compile_model(model, config=config, precision=precision).blob
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        tmp.replace(path)  # atomic: a concurrent reader never sees half a file
    except OSError:
        pass  # a cache that cannot be written only costs a compile next time
    return blob


class Session:
    """See the module docstring."""

    def __init__(self, model: Any, *, port: str | None = None, config: str = "full", device: int = 0,
                 precision: str = "fp32", timeout_ms: int = 60_000,
                 path: str | os.PathLike[str] | None = None) -> None:
        """``port``: "inprocess", "linux" (with ``path``, the KMD daemon's mount) or "linux:PATH";
        None means ``$PYDLA_PORT``, else in-process."""
        blob = loadable_bytes(model, config, precision)
        self.runtime = createRuntime(port, config, device, timeout_ms=timeout_ms, path=path)
        self._lock = threading.Lock()
        try:
            self.runtime.load(blob)
            self.inputs = self._describe("input")
            self.outputs = self._describe("output")
            # An empty tensor (a dimension of 0) has no bytes: no memory, nothing to bind or copy.
            self._in_mems = [self.runtime.allocateSystemMemory(t.size) if t.size else None
                             for t in self._descs("input")]
            self._out_mems = [self.runtime.allocateSystemMemory(t.size) if t.size else None
                              for t in self._descs("output")]
            for i, mem in enumerate(self._in_mems):
                if mem is not None:
                    self.runtime.bindInputTensor(i, mem)
            for i, mem in enumerate(self._out_mems):
                if mem is not None:
                    self.runtime.bindOutputTensor(i, mem)
        except BaseException:
            self.runtime.close()
            raise

    def _descs(self, direction: str) -> list[Any]:
        rt = self.runtime
        if direction == "input":
            return [rt.getInputTensorDesc(i) for i in range(rt.getNumInputTensors())]
        return [rt.getOutputTensorDesc(i) for i in range(rt.getNumOutputTensors())]

    def _describe(self, direction: str) -> list[TensorInfo]:
        return [TensorInfo(d.name, d.dims, NUMPY_TYPES[d.data_type])
                for d in self._descs(direction)]

    def run(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """Run on ``feeds`` ({input name: array}); return {output name: array}."""
        expected = {t.name: t for t in self.inputs}
        unknown = sorted(set(feeds) - set(expected))
        missing = sorted(set(expected) - set(feeds))
        if unknown or missing:
            raise DlaError(NvError.BadParameter,
                           f"inputs: expected {sorted(expected)}; unknown {unknown}, missing {missing}")
        arrays = []
        for t in self.inputs:
            a = np.asarray(feeds[t.name])
            if a.shape != t.shape or a.dtype != t.dtype:
                raise DlaError(NvError.BadParameter,
                               f"input '{t.name}': expected {t.dtype} of shape {t.shape}, got {a.dtype} "
                               f"of shape {a.shape}")
            arrays.append(a)
        with self._lock:
            for mem, t, a in zip(self._in_mems, self.inputs, arrays, strict=True):
                if mem is not None:
                    mem.array(t.dtype, t.shape)[...] = a
            self.runtime.submit()
            return {t.name: np.empty(t.shape, t.dtype) if mem is None else mem.array(t.dtype, t.shape).copy()
                    for mem, t in zip(self._out_mems, self.outputs, strict=True)}

    def close(self) -> None:
        """Wait for a run in flight (up to the runtime's timeout), then free everything."""
        self.runtime.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        close_quietly(self.close, exc_type)

