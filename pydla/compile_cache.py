"""A model as :class:`pydla.Session` takes it, made a loadable: a loadable's bytes as they are, an ONNX
model compiled, once per input shapes, and cached by content in the user's cache directory
(``PYDLA_CACHE_DIR``, else ``$XDG_CACHE_HOME/pydla``, else ``~/.cache/pydla``).

A model saved with its weights in external data files (``onnx.save_model(...,
save_as_external_data=True)``) is read with those files found next to the model file, and the cache
key covers their contents. Running a loadable imports nothing of the onnx extra.

Usage::

    source = read_model("model.onnx")             # bytes of a loadable, or an OnnxModel
    blob = source if isinstance(source, bytes) else source.loadable(input_shapes={"x": (1, 8)})
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydla._version import __version__
from pydla.cachedir import cache_dir, chosen_by
from pydla.compiler.input_shapes import InputShapes, cache_text, check_input_shapes
from pydla.compiler.onnx_extra import import_onnx
from pydla.compiler.progress import Progress
from pydla.elf.reader import ELF_MAGIC
from pydla.errors import DlaError, NvError, file_error

log = logging.getLogger("pydla")

def _is_loadable(data: bytes) -> bool:
    """pydla's loadable (an ELF file) or an NVDLA Loadable (FlatBuffers): run as it is."""
    from pydla.loadable.nvdla.reader import looks_like_nvdla_loadable

    return data[:4] == ELF_MAGIC or looks_like_nvdla_loadable(data[:8])


def read_model(model: Any) -> bytes | OnnxModel:
    """``model`` (a path, bytes, a memoryview or an ``onnx.ModelProto``) read once: a loadable's
    bytes, or the ONNX model to compile. A missing file is FileNotFound, naming it."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        return data if _is_loadable(data) else OnnxModel(data)
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise file_error(path, e) from None
        return data if _is_loadable(data) else OnnxModel(data, path)
    serialize = getattr(model, "SerializeToString", None)
    if not callable(serialize):
        raise DlaError(NvError.BadParameter, f"model of type {type(model).__name__}: give a path, bytes "
                                             "or an onnx.ModelProto")
    return OnnxModel(serialize())


def loadable_bytes(model: Any, config: str = "full", precision: str = "fp32", *,
                   progress: Progress | None = None,
                   input_shapes: Mapping[str, Sequence[int]] | None = None) -> bytes:
    """A loadable for ``model``: a .dla path or bytes as they are; ONNX compiled (and cached).
    ``input_shapes`` sizes an ONNX model's symbolic input dimensions ({name: shape}); it is part
    of the cache key.

    An ONNX model given as a path has its external data files read from the model file's
    directory; bytes or an ``onnx.ModelProto`` must hold their weights inline (or, for a
    ModelProto, have them loaded, as ``onnx.load(path)`` does).

    Usage: ``blob = loadable_bytes("model.onnx"); pydla.createRuntime().load(blob)``
    """
    shapes = check_input_shapes(input_shapes)
    source = read_model(model)
    if isinstance(source, bytes):
        return source
    return source.loadable(config, precision, shapes, progress=progress)


class OnnxModel:
    """An ONNX model read once, compiled for each set of input shapes asked (from the cache when it
    holds that loadable). ``proto`` is the parsed ``onnx.ModelProto``; ``label`` what messages call
    it (its file, or "model")."""

    def __init__(self, data: bytes, model_file: Path | None = None) -> None:
        import_onnx()  # the extra's one-line hint before the compiler's modules are imported
        from pydla.compiler.onnx_model import parse_model

        self.model_file = model_file
        self.label = str(model_file) if model_file is not None else "model"
        self.proto = parse_model(data, self.label)  # worded as `pydla compile` words it
        self._external = _external_tensors(self.proto, model_file)
        self._external_loaded = False
        self._kernel_dir = model_file.resolve().parent if model_file is not None else None
        # The key's first part is the model's bytes: hashed now, so that they need not be kept.
        self._digest = hashlib.sha256(data)
        self._files = b"".join(self._file_keys())

    def _file_keys(self) -> Iterator[bytes]:
        # The external data files, whole: the weights change while the .onnx file stays the same.
        # Keyed by their locations in the model, not where the model lies: a copy elsewhere is a hit.
        base = self.model_file.parent if self.model_file is not None else None
        for file in sorted({f for _, f in self._external}):
            location = file.relative_to(base).as_posix() if base is not None else ""
            yield b"\0" + location.encode() + b"\0" + _file_digest(file, self.model_file)
        # And the custom SHAVE kernels' ELFs it names: rebuilding one must not serve the old one.
        from pydla.compiler.custom_kernel import kernel_files

        for file in kernel_files(self.proto, self._kernel_dir):
            yield b"\0kernel\0" + str(file).encode() + b"\0" + _file_digest(file, self.model_file)

    def cache_path(self, config: str, precision: str, shapes: InputShapes) -> Path:
        """Where the loadable for these arguments is cached."""
        # A configuration given as a file is part of the key by its contents, not only its name; the
        # input shapes decide the loadable's shapes: one model compiled for two sequence lengths is
        # two entries.
        config_file = Path(config)
        is_file = config_file.suffix == ".json" and config_file.is_file()
        contents = config_file.read_bytes() if is_file else b""
        key = f"|{config}|{precision}|{compiler_fingerprint()}|{cache_text(shapes)}|"
        digest = self._digest.copy()
        digest.update(key.encode() + contents + self._files)
        return cache_dir() / f"{digest.hexdigest()}.dla"

    def loadable(self, config: str = "full", precision: str = "fp32", shapes: InputShapes | None = None, *,
                 progress: Progress | None = None) -> bytes:
        """The loadable for ``shapes`` (the sizes of the symbolic input dimensions), from the
        cache or compiled (and then cached)."""
        shapes = shapes or {}
        path = self.cache_path(config, precision, shapes)
        if path.is_file():
            return path.read_bytes()
        from pydla.compiler.api import compile_model

        if not self._external_loaded:
            for tensor, file in self._external:
                _load_external(tensor, file, self.label)
            self._external_loaded = True
        blob: bytes = compile_model(self.proto, config=config, precision=precision, progress=progress,
                                    input_shapes=shapes, base_dir=self._kernel_dir).blob
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(blob)
            tmp.replace(path)  # atomic: a concurrent reader never sees half a file
        except OSError as e:  # it only costs a compile next time, but every time: said once
            _warn_unwritable(path.parent, e)
        return blob


_warned: set[str] = set()  # the cache directories said to be unusable: each once per process


def _warn_unwritable(directory: Path, e: OSError) -> None:
    """One warning per process that the compile cache cannot be written (a directory that is a
    file, on a read-only file system, without permission): models then compile at every open."""
    if str(directory) in _warned:
        return
    _warned.add(str(directory))
    if directory.exists() and not directory.is_dir():
        reason = "it is a file, not a directory"
    else:
        why = e.strerror or str(e)
        reason = f"{why[:1].lower()}{why[1:]}"
    log.warning("the compile cache %s (%s) cannot be written: %s; every model is compiled again each time "
                "it is opened (set $PYDLA_CACHE_DIR to a writable directory)", directory, chosen_by(), reason)


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of what decides a compiled loadable: the compiler's sources, the loadable side it
    writes with (the task encoder, the CPU operator tables, the container and ELF writers), the
    device configurations and limits, the binary-contract specs and layouts, and the shipped SHAVE
    kernels the loadables carry. Part of the cache
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
                   *(root / "elf").rglob("*.py"), *(root / "target").glob("*.py"),
                   *(root / "target" / "configs").glob("*.json"), root / "deviceapi" / "task_layout.py",
                   *(root / "deviceapi" / "specs").rglob("*.yaml"), root / "kernels" / "image.py",
                   root / "kernels" / "invocation.py", root / "kernels" / "memref.py",
                   *(root / "kernels" / "shipped").glob("*.elf")])  # the SHAVE kernels it embeds


def _graph_tensors(graph: Any) -> Any:
    """Every TensorProto of a graph that can keep its data outside the model: initializers, sparse
    initializers and node attributes, in subgraphs too."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node: Any) -> Any:
    for a in node.attribute:
        if a.HasField("t"):
            yield a.t
        yield from a.tensors
        if a.HasField("sparse_tensor"):
            yield from (a.sparse_tensor.values, a.sparse_tensor.indices)
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            yield from _graph_tensors(sub)


def _external_tensors(model: Any, model_file: Path | None) -> list[tuple[Any, Path]]:
    """The tensors of ``model`` whose data is in an external file, each with that file (in
    ``model_file``'s directory); refused when the model was not given as a file, when a location
    leaves the directory, or when a file is missing."""
    tensors = [*_graph_tensors(model.graph),
               *(t for f in model.functions for n in f.node for t in _node_tensors(n))]
    found = []
    for tensor in tensors:
        if tensor.data_location != tensor.EXTERNAL:
            continue
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        where = f"tensor '{tensor.name}' keeps its data in external file '{location}'"
        if model_file is None:
            raise DlaError(NvError.BadParameter,
                           f"the model's {where}, which is not loaded: give the model's path (its external "
                           "data is read from the model file's directory), or load the model with "
                           "onnx.load(path), which reads it")
        label = str(model_file)
        # Checked by its text, not by resolving it: a model directory may link its weights from
        # elsewhere (the Hugging Face cache does), while '..' and absolute paths let a model read
        # any file of the machine into its weights.
        parts = location.replace("\\", "/").split("/")
        if not location or location.startswith(("/", "\\")) or ".." in parts or location[1:2] == ":":
            raise DlaError(NvError.BadParameter,
                           f"{label}: {where}: the location must be a path inside the model's directory "
                           f"{model_file.parent} (relative, without '..')")
        file = model_file.parent / location
        if not file.is_file():
            raise DlaError(NvError.FileNotFound, f"{label}: {where}: {file}: no such file"
                           if not file.exists() else f"{label}: {where}: {file} is not a file")
        found.append((tensor, file))
    return found


def _file_digest(file: Path, model_file: Path | None) -> bytes:
    """The SHA-256 of ``file``'s contents, read in chunks (weights files can be gigabytes)."""
    try:
        digest = hashlib.sha256()
        with open(file, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        return digest.digest()
    except OSError as e:
        raise DlaError(NvError.FileReadFailed, f"{model_file}: external data file {file}: "
                                               f"{e.strerror or e}") from e


def _load_external(tensor: Any, file: Path, label: str) -> None:
    """Read ``tensor``'s bytes from ``file`` into the tensor (offset and length checked against
    the file's size), as onnx.load would."""
    info = {e.key: e.value for e in tensor.external_data}
    where = f"{label}: tensor '{tensor.name}' in {file}"
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError as e:
        raise DlaError(NvError.BadValue, f"{where}: offset or length is not an integer: {e}") from e
    try:
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if length is None:
                length = size - offset
            if offset < 0 or length < 0 or offset + length > size:
                raise DlaError(NvError.BadValue, f"{where}: offset {offset} + length {length} is outside "
                                                 f"the file's {size} bytes")
            f.seek(offset)
            tensor.raw_data = f.read(length)
    except OSError as e:
        raise DlaError(NvError.FileReadFailed, f"{where}: {e.strerror or e}") from e
    tensor.data_location = tensor.DEFAULT
    del tensor.external_data[:]
