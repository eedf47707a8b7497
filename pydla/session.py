"""``pydla.Session``: the short way — numpy in, numpy out, model layout and dtype on both sides;
``pydla.InferenceSession``: the same with onnxruntime's constructor and ``run``.

Usage::

    sess = pydla.Session("model.onnx")          # or a .dla, bytes, or an onnx.ModelProto
    sess = pydla.Session("model.onnx", port="linux:/run/pydla")   # through the KMD daemon
    out = sess.run({"input": x})                # {"output": array}
    y, = sess.run(None, {"input": x})           # onnxruntime's form: a list of arrays

    sess = pydla.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])  # as ort's

An ONNX model is compiled on first use and cached by content in the user's cache directory
(``PYDLA_CACHE_DIR``, else ``$XDG_CACHE_HOME/pydla``, else ``~/.cache/pydla``). A model saved with
its weights in external data files (``onnx.save_model(..., save_as_external_data=True)``) is read
with those files found next to the model file, and the cache key covers their contents. A session
is reusable and safe to use from several threads (runs on one session are serialised).
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from pydla._version import __version__
from pydla.cachedir import cache_dir
from pydla.compiler.input_shapes import InputShapes, cache_text, check_input_shapes
from pydla.compiler.progress import Progress
from pydla.elf.reader import ELF_MAGIC
from pydla.errors import DlaError, NvError
from pydla.loadable.container import NUMPY_TYPES
from pydla.trace.capture import Capture, TraceResult
from pydla.umd.runtime import close_quietly, createRuntime


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as :attr:`Session.inputs` lists it: name, shape, numpy dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]


# onnxruntime's names of the element types (NodeArg.type), by numpy type.
_ORT_TYPES = {np.dtype(t): f"tensor({n})" for t, n in (
    (np.float32, "float"), (np.float16, "float16"), (np.float64, "double"), (np.int8, "int8"),
    (np.int16, "int16"), (np.int32, "int32"), (np.int64, "int64"), (np.uint8, "uint8"),
    (np.uint16, "uint16"), (np.uint32, "uint32"), (np.uint64, "uint64"), (np.bool_, "bool"))}


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime's ``get_inputs()`` / ``get_outputs()`` describe it.

    Usage: ``[(a.name, a.shape, a.type) for a in sess.get_inputs()]`` ->
    ``[("input", [1, 3, 32, 32], "tensor(float)")]``
    """

    name: str
    shape: list[int]
    type: str

    __hash__ = None  # type: ignore[assignment]  # a list inside: equal by value, not hashable


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
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        if data[:4] == ELF_MAGIC:
            return data
        return _compile_cached(data, config, precision, shapes, progress=progress)
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        try:
            data = path.read_bytes()
        except OSError as e:
            code = NvError.FileNotFound if isinstance(e, FileNotFoundError) else NvError.FileReadFailed
            raise DlaError(code, f"{path}: {e.strerror or e}") from e
        if data[:4] == ELF_MAGIC:
            return data
        return _compile_cached(data, config, precision, shapes, model_file=path, progress=progress)
    serialize = getattr(model, "SerializeToString", None)
    if not callable(serialize):
        raise DlaError(NvError.BadParameter, f"model of type {type(model).__name__}: give a path, bytes "
                                             "or an onnx.ModelProto")
    return _compile_cached(serialize(), config, precision, shapes, progress=progress)


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
                   *(root / "elf").rglob("*.py"), root / "hw" / "config.py",
                   *(root / "hw" / "configs").glob("*.json"), root / "deviceapi" / "task_layout.py",
                   *(root / "deviceapi" / "specs").rglob("*.yaml"), root / "kernels.py",
                   *(root / "hw" / "shave" / "kernels").glob("*.elf")])  # the SHAVE kernels it embeds


def _compile_cached(onnx_bytes: bytes, config: str, precision: str,
                    input_shapes: InputShapes | None = None, *, model_file: Path | None = None,
                    progress: Progress | None = None) -> bytes:
    """The loadable of an ONNX model (``onnx_bytes``, read from ``model_file`` when given: its
    external data files are then found in that file's directory), from the cache or compiled."""
    _import_onnx()
    from pydla.compiler.onnx_model import parse_model

    label = str(model_file) if model_file is not None else "model"
    model = parse_model(onnx_bytes, label)  # worded as `pydla compile` words it
    external = _external_tensors(model, model_file)
    fingerprint = compiler_fingerprint()
    # A configuration given as a file is part of the key by its contents, not only its name.
    config_file = Path(config)
    contents = config_file.read_bytes() if config_file.suffix == ".json" and config_file.is_file() else b""
    # The input shapes decide the loadable's shapes: one model compiled for two sequence lengths is
    # two entries.
    input_shapes = input_shapes if input_shapes is not None else {}  # keeps how they were given
    key = f"|{config}|{precision}|{fingerprint}|{cache_text(input_shapes)}|"
    digest = hashlib.sha256(onnx_bytes + key.encode() + contents)
    # So are the external data files, whole: the weights change while the .onnx file stays the same.
    # Keyed by their locations in the model, not where the model lies: a copy elsewhere is a hit.
    for file in sorted({f for _, f in external}):
        location = file.relative_to(model_file.parent).as_posix() if model_file is not None else ""
        digest.update(b"\0" + location.encode() + b"\0" + _file_digest(file, model_file))
    # And so are the custom SHAVE kernels' ELFs it names: rebuilding one must not serve the old one.
    from pydla.compiler.custom_kernel import kernel_files

    kernel_dir = model_file.resolve().parent if model_file is not None else None
    for file in kernel_files(model, kernel_dir):
        digest.update(b"\0kernel\0" + str(file).encode() + b"\0" + _file_digest(file, model_file))
    path = cache_dir() / f"{digest.hexdigest()}.dla"
    if path.is_file():
        return path.read_bytes()
    from pydla.compiler.api import compile_model

    for tensor, file in external:
        _load_external(tensor, file, label)
    blob: bytes = compile_model(model, config=config, precision=precision, progress=progress,
                                input_shapes=input_shapes, base_dir=kernel_dir).blob
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        tmp.replace(path)  # atomic: a concurrent reader never sees half a file
    except OSError:
        pass  # a cache that cannot be written only costs a compile next time
    return blob


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError as e:
        raise DlaError(NvError.NotSupported, "compiling ONNX needs the onnx packages: "
                                             "pip install 'pydla[onnx]'") from e
    return onnx


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
            raise DlaError(NvError.FileNotFound, f"{label}: {where}: {file} does not exist"
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


def _describe(descs: list[Any]) -> list[TensorInfo]:
    return [TensorInfo(d.name, d.dims, NUMPY_TYPES[d.data_type]) for d in descs]


def _forms(model_inputs: list[str], what: str) -> str:
    ort = "run(None, {name: array}) or run([output names], {name: array}) -> [array, ...]"
    if what.startswith("InferenceSession"):  # onnxruntime's run only
        return (f"the accepted form: {ort} (pydla.Session's run({{name: array}}) returns a dict); the "
                f"model's inputs: {model_inputs}")
    return (f"the accepted forms: run({{name: array}}) -> {{name: array}}; {ort} (onnxruntime's form); "
            f"the model's inputs: {model_inputs}")


def _short(value: Any) -> str:
    """``value`` for a message: arrays by shape, never pages of numbers."""
    if isinstance(value, np.ndarray):
        return f"array{value.shape}"
    if isinstance(value, dict):
        inner = ", ".join(f"{k!r}: {_short(v)}" for k, v in list(value.items())[:4])
        return "{" + inner + (", ...}" if len(value) > 4 else "}")
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_short(v) for v in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Session:
    """A compiled model on a device, run with numpy arrays: the short way through the whole stack
    (compiler, loadable, runtime, portability layer, driver, device).

    Usage::

        with pydla.Session("model.onnx") as sess:
            out = sess.run({"input": x})            # {"output": array}
            y, = sess.run(None, {"input": x})       # onnxruntime's form: a list of arrays

    Parameters:
        model: a loadable (.dla path, bytes or memoryview) or an ONNX model (.onnx path, bytes, or
            an ``onnx.ModelProto``), compiled on first use and cached; a path's external data
            files are read from the model file's directory.
        port: "inprocess", "linux" (with ``path``, the KMD daemon's directory) or "linux:PATH";
            None means ``$PYDLA_PORT``, else in-process.
        config: the device configuration: "full", "small" or a JSON file.
        device: the device instance to run on.
        precision: what an ONNX model is compiled to: "fp32" or "fp16".
        timeout_ms: how long a run (and closing) may take before NvError Timeout.
        path: the KMD daemon's directory for ``port="linux"``.
        progress: called as an ONNX model compiles (not from the cache), with (done, total, phase):
            ``pydla.compiler.progress.TerminalProgress(sys.stderr)`` draws it on a terminal.
        input_shapes: the shapes of an ONNX model's inputs whose dimensions are symbolic (the
            batch, a sequence length), {input name: shape}, e.g. ``{"input_ids": (1, 128)}``; for a
            loadable they must be the shapes it was compiled with.
        trace: a file to write a Perfetto / Chrome trace of every run to, when the session closes
            (or at :meth:`stop_trace`): the device's blocks and compute units, and the host's calls,
            CPU runs and fence waits, on one timeline (open it at https://ui.perfetto.dev).

    Attributes: ``inputs`` and ``outputs`` (lists of :class:`TensorInfo`), ``runtime`` (the
    :class:`~pydla.umd.runtime.IRuntime` underneath).
    """

    def __init__(self, model: Any, *, port: str | None = None, config: str = "full", device: int = 0,
                 precision: str = "fp32", timeout_ms: int = 60_000,
                 path: str | os.PathLike[str] | None = None, progress: Progress | None = None,
                 input_shapes: Mapping[str, Sequence[int]] | None = None,
                 trace: str | os.PathLike[str] | None = None) -> None:
        shapes = check_input_shapes(input_shapes)
        blob = loadable_bytes(model, config, precision, progress=progress, input_shapes=shapes)
        self.runtime = createRuntime(port, config, device, timeout_ms=timeout_ms, path=path)
        self._lock = threading.Lock()
        try:
            self.runtime.load(blob, name=_model_name(model))
            in_descs, out_descs = self._descs("input"), self._descs("output")
            self.inputs = _describe(in_descs)
            self.outputs = _describe(out_descs)
            _check_loaded_shapes(self.inputs, shapes)
            # An empty tensor (a dimension of 0) has no bytes: no memory, nothing to bind or copy.
            self._in_mems = [self.runtime.allocateSystemMemory(t.size) if t.size else None
                             for t in in_descs]
            self._out_mems = [self.runtime.allocateSystemMemory(t.size) if t.size else None
                              for t in out_descs]
            for i, mem in enumerate(self._in_mems):
                if mem is not None:
                    self.runtime.bindInputTensor(i, mem)
            for i, mem in enumerate(self._out_mems):
                if mem is not None:
                    self.runtime.bindOutputTensor(i, mem)
            self._trace_path = trace
            self._capture = Capture(self.runtime) if trace is not None else None
        except BaseException:
            self.runtime.close()
            raise

    def _descs(self, direction: str) -> list[Any]:
        rt = self.runtime
        if direction == "input":
            return [rt.getInputTensorDesc(i) for i in range(rt.getNumInputTensors())]
        return [rt.getOutputTensorDesc(i) for i in range(rt.getNumOutputTensors())]

    # -- running -------------------------------------------------------------------------------

    @overload
    def run(self, output_names: Mapping[str, Any], /) -> dict[str, np.ndarray]: ...

    @overload
    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]: ...

    def run(self, output_names: Any = None, input_feed: Any = None,
            run_options: Any = None) -> dict[str, np.ndarray] | list[np.ndarray]:
        """Run the model. ``run(feeds)`` with ``feeds`` a dict {input name: array} returns
        {output name: array}; ``run(output_names, input_feed)`` is onnxruntime's form and returns
        the list of arrays of ``output_names`` (None or [] for every output) in that order.
        Arrays must have the model's dtype and shape. ``run_options`` (an onnxruntime RunOptions)
        has no effect.

        Usage: ``sess.run({"input": x})["output"]``; ``y, = sess.run(None, {"input": x})``
        """
        if input_feed is None and run_options is None and isinstance(output_names, Mapping):
            return self._run(output_names)
        return self._run_ort(output_names, input_feed, run_options, "run")

    def _run_ort(self, output_names: Any, input_feed: Any, run_options: Any, what: str) -> list[np.ndarray]:
        if input_feed is None and isinstance(output_names, Mapping):
            # InferenceSession.run({...}): the feeds were given where onnxruntime takes output names
            raise DlaError(NvError.BadParameter,
                           f"{what}({_short(output_names)}): onnxruntime's run takes the output names "
                           f"first: write {what}(None, feeds) (pydla.Session.run(feeds) returns a dict)")
        if not isinstance(input_feed, Mapping):
            given, feed = ((f"{what}({'' if output_names is None else _short(output_names)})", output_names)
                           if input_feed is None else
                           (f"{what}({_short(output_names)}, {_short(input_feed)})", input_feed))
            raise DlaError(NvError.BadParameter, f"{given}: the inputs must be a dict {{input name: array}}, "
                                                 f"not {type(feed).__name__}; "
                                                 f"{_forms([t.name for t in self.inputs], what)}")
        names = self._output_names(output_names, what)
        if run_options is not None and type(run_options).__name__ != "RunOptions":
            raise DlaError(NvError.BadParameter, f"{what}: run_options {_short(run_options)}: None or an "
                                                 "onnxruntime RunOptions (it has no effect) is expected")
        results = self._run(input_feed)
        return [results[n] for n in names]

    def _output_names(self, output_names: Any, what: str) -> list[str]:
        known = [t.name for t in self.outputs]
        if output_names is None or (isinstance(output_names, (list, tuple)) and not output_names):
            return known
        if not isinstance(output_names, (list, tuple)) or not all(isinstance(n, str) for n in output_names):
            raise DlaError(NvError.BadParameter,
                           f"{what}: output_names {_short(output_names)}: None or a list of output names "
                           f"(of {known}) is expected; {_forms([t.name for t in self.inputs], what)}")
        unknown = [n for n in output_names if n not in known]
        if unknown:
            raise DlaError(NvError.BadParameter, f"{what}: output_names: {unknown} are not outputs of the "
                                                 f"model (its outputs: {known})")
        return list(output_names)

    def _run(self, feeds: Mapping[Any, Any]) -> dict[str, np.ndarray]:
        expected = {t.name: t for t in self.inputs}
        unknown = sorted(set(feeds) - set(expected), key=repr)
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

    # -- onnxruntime's descriptions ------------------------------------------------------------

    def get_inputs(self) -> list[NodeArg]:
        """The inputs as onnxruntime describes them (``.name``, ``.shape`` a list, ``.type`` such
        as "tensor(float)").

        Usage: ``feeds = {a.name: np.zeros(a.shape, np.float32) for a in sess.get_inputs()}``
        """
        return [NodeArg(t.name, list(t.shape), _ORT_TYPES[t.dtype]) for t in self.inputs]

    def get_outputs(self) -> list[NodeArg]:
        """The outputs, as :meth:`get_inputs` describes the inputs."""
        return [NodeArg(t.name, list(t.shape), _ORT_TYPES[t.dtype]) for t in self.outputs]

    def get_providers(self) -> list[str]:
        """Where the model runs, in onnxruntime's terms: ``["PydlaExecutionProvider"]``."""
        return ["PydlaExecutionProvider"]

    # -- lifetime --------------------------------------------------------------------------------

    def stop_trace(self) -> TraceResult | None:
        """Stop tracing (``trace=``), write the trace file, and return what it found (also its
        profile: ``result.profile_text()``); None when the session does not trace. Idempotent."""
        capture, self._capture = self._capture, None
        if capture is None:
            return None
        result = capture.finish()
        if self._trace_path is not None:
            result.write_chrome(self._trace_path)
        return result

    def close(self) -> None:
        """Wait for a run in flight (up to the runtime's timeout), write the trace file if the
        session traces, then free everything."""
        try:
            self.stop_trace()
        finally:
            self.runtime.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        close_quietly(self.close, exc_type)


# pydla's keyword arguments that InferenceSession passes on to Session, and onnxruntime's keyword
# arguments that change nothing here (accepted so that code written for onnxruntime runs as is).
_SESSION_KEYWORDS = frozenset({"port", "config", "device", "precision", "timeout_ms", "path", "input_shapes",
                               "trace"})
_ORT_KEYWORDS_WITHOUT_EFFECT = frozenset({"disabled_optimizers", "read_config_from_model"})


class InferenceSession(Session):
    """A :class:`Session` with onnxruntime's constructor and ``run``: swap
    ``onnxruntime.InferenceSession`` for ``pydla.InferenceSession`` and the code runs on pydla.

    Usage::

        sess = pydla.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        probabilities, = sess.run(None, {name: x})

    Parameters:
        path_or_bytes: the model, as :class:`Session` takes it (an ONNX or .dla path, bytes, or an
            ``onnx.ModelProto``).
        sess_options: an onnxruntime SessionOptions, or None: it has no effect.
        providers: None, or a list of provider names or (name, options) pairs: no effect (the
            model runs on pydla's device, ``get_providers()`` says so).
        provider_options: None, or a list of dicts: no effect.
        **kwargs: :class:`Session`'s keywords (port, config, device, precision, timeout_ms, path,
            input_shapes); anything else is refused with DlaError BadParameter.
    """

    def __init__(self, path_or_bytes: Any, sess_options: Any = None,
                 providers: Sequence[str | tuple[str, dict[Any, Any]]] | None = None,
                 provider_options: Sequence[dict[Any, Any]] | None = None, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - _SESSION_KEYWORDS - _ORT_KEYWORDS_WITHOUT_EFFECT)
        if unknown:
            raise DlaError(NvError.BadParameter,
                           f"InferenceSession: unknown keyword argument(s) {unknown}: pydla takes "
                           f"{sorted(_SESSION_KEYWORDS)} besides onnxruntime's sess_options, providers "
                           "and provider_options")
        _check_providers(providers, provider_options)
        super().__init__(path_or_bytes, **{k: v for k, v in kwargs.items() if k in _SESSION_KEYWORDS})

    def run(self, output_names: Any = None, input_feed: Any = None,  # type: ignore[override]
            run_options: Any = None) -> list[np.ndarray]:
        """onnxruntime's run: the arrays of ``output_names`` (None or [] for every output), in
        that order, for ``input_feed`` ({input name: array}); ``run_options`` has no effect.

        Usage: ``probabilities, = sess.run(None, {"input": x})``
        """
        return self._run_ort(output_names, input_feed, run_options, "InferenceSession.run")

    def set_providers(self, providers: Sequence[str | tuple[str, dict[Any, Any]]] | None = None,
                      provider_options: Sequence[dict[Any, Any]] | None = None) -> None:
        """Accepted as onnxruntime's is, with no effect (the model stays on pydla's device)."""
        _check_providers(providers, provider_options)

    def __enter__(self) -> InferenceSession:
        return self


def _check_providers(providers: Any, provider_options: Any) -> None:
    """onnxruntime's provider arguments, by form only: they select nothing here."""
    if providers is not None and (not isinstance(providers, (list, tuple)) or not all(
            isinstance(p, str) or (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                   and isinstance(p[1], dict)) for p in providers)):
        raise DlaError(NvError.BadParameter, f"providers {_short(providers)}: None or a list of provider "
                                             "names or (name, options dict) pairs is expected")
    if provider_options is not None and (not isinstance(provider_options, (list, tuple))
                                         or not all(isinstance(o, dict) for o in provider_options)):
        raise DlaError(NvError.BadParameter, f"provider_options {_short(provider_options)}: None or a list "
                                             "of dicts is expected")


def _check_loaded_shapes(inputs: list[TensorInfo], shapes: InputShapes) -> None:
    """The loaded network has the input shapes asked for (a loadable's are fixed when compiling;
    a compiled ONNX model has them by construction)."""
    loaded = {t.name: t.shape for t in inputs}
    for name, dims in shapes.items():
        if name not in loaded:
            raise DlaError(NvError.BadParameter, f"input_shapes: the model has no input '{name}' "
                                                 f"(its inputs: {', '.join(loaded) or 'none'})")
        if loaded[name] != dims:
            raise DlaError(NvError.BadParameter,
                           f"input_shapes['{name}'] = {dims}: the loadable's input '{name}' has shape "
                           f"{loaded[name]}, fixed when it was compiled (compile the ONNX model with the "
                           "shapes you want)")


def _model_name(model: Any) -> str | None:
    """What errors about the model's loadable call it: its file (a compiled ONNX model says so)."""
    if isinstance(model, (str, Path)):
        path = Path(model)
        return str(path) if path.suffix.lower() != ".onnx" else f"{path} (compiled)"
    return None
