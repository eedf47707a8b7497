"""``pydla.Session``: the short way — numpy in, numpy out, model layout and dtype on both sides, with
onnxruntime's habits (``run(None, feeds)``, ``get_inputs()``, ``io_binding()``, ``get_modelmeta()``,
``end_profiling()``); ``pydla.InferenceSession`` (:mod:`pydla.inference_session`) adds onnxruntime's
constructor.

Usage::

    sess = pydla.Session("model.onnx")          # or a .dla, bytes, or an onnx.ModelProto
    sess = pydla.Session("model.onnx", port="linux:/run/pydla")   # through the KMD daemon
    out = sess.run({"input": x})                # {"output": array}
    y, = sess.run(None, {"input": x})           # onnxruntime's form: a list of arrays
    sess.run({"input": x}, outputs={"output": y})   # into arrays of the caller's

An ONNX model is compiled on first use and cached by content (:mod:`pydla.compile_cache`). A model
whose inputs have dynamic axes (a symbolic batch or sequence length) is compiled for each input
shapes it runs with, as onnxruntime specializes: the session keeps the networks of the
``max_shapes`` most recently used shapes loaded (the compiled loadables stay in the cache). A session
is reusable and safe to use from several threads (runs on one session are serialised).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

from pydla.compile_cache import OnnxModel, loadable_bytes, read_model
from pydla.compiler.input_shapes import PARAMETER, GivenShapes, InputShapes, check_input_shapes, quoted
from pydla.compiler.progress import Progress
from pydla.errors import DlaError, NvError
from pydla.files import check_output
from pydla.loadable.metadata import loadable_metadata, onnx_metadata
from pydla.model_info import TensorInfo, declared_io, feed_shapes, show
from pydla.platform import open_port
from pydla.portability.interface import check_timeout_ms
from pydla.session_loaded import Loaded
from pydla.session_ort import OrtMethods, forms, short
from pydla.session_trace import SessionTrace
from pydla.trace.capture import TraceResult
from pydla.umd.closing import close_quietly, interrupted
from pydla.umd.runtime import IRuntime

__all__ = ["MAX_SHAPES", "Session", "TensorInfo", "loadable_bytes"]

log = logging.getLogger("pydla")

MAX_SHAPES = 4  # networks of a model with dynamic axes kept loaded, the most recently used first
Into = Mapping[str, np.ndarray] | Sequence[np.ndarray | None] | None  # run(..., outputs=)


class Session(OrtMethods):
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
        input_shapes: sizes for an ONNX model's inputs whose dimensions are symbolic (the batch, a
            sequence length), {input name: shape}, e.g. ``{"input_ids": (1, 128)}``; an input left
            dynamic takes the shape of the array each run gives it (compiled per shape, as
            onnxruntime specializes). For a loadable they must be the shapes it was compiled with.
        trace: a file to write a Perfetto / Chrome trace of every run to, when the session closes
            (or at :meth:`stop_trace` / :meth:`end_profiling`): the device's blocks and compute
            units, and the host's calls, CPU runs and fence waits, on one timeline (open it at
            https://ui.perfetto.dev).
        max_shapes: for a model with dynamic axes, how many input shapes keep their network loaded
            (the least recently used is unloaded beyond; one the application holds device values
            of stays); default :data:`MAX_SHAPES` (4).

    Attributes: ``inputs`` and ``outputs`` (lists of :class:`TensorInfo`; a dynamic dimension is its
    name), ``runtime`` (the :class:`~pydla.umd.runtime.IRuntime` underneath: of the input shapes that
    ran last, for a model with dynamic axes).
    """

    def __init__(self, model: Any, *, port: str | None = None, config: str = "full", device: int = 0,
                 precision: str = "fp32", timeout_ms: int = 60_000,
                 path: str | os.PathLike[str] | None = None, progress: Progress | None = None,
                 input_shapes: Mapping[str, Sequence[int]] | None = None,
                 trace: str | os.PathLike[str] | None = None, max_shapes: int = MAX_SHAPES) -> None:
        # Every argument is checked before any work: a mistake is not found at the first run, or at
        # close after all of them.
        shapes = check_input_shapes(input_shapes)
        if type(max_shapes) is not int or max_shapes < 1:
            raise DlaError(NvError.BadParameter, f"max_shapes {max_shapes!r}: 1 or more")
        timeout_ms = check_timeout_ms(timeout_ms, "Session: timeout_ms")
        if trace is not None:
            check_output(trace, "Session: trace", {"the model": model})
        source = read_model(model)
        self._config, self._precision, self._progress = config, precision, progress
        self._device, self._timeout_ms, self._max_shapes = device, timeout_ms, max_shapes
        self._name = _model_name(model)
        self._source = source if isinstance(source, OnnxModel) else None
        self._loaded: OrderedDict[tuple[tuple[int, ...], ...], Loaded] = OrderedDict()
        self._current: Loaded | None = None
        self._lock = threading.RLock()
        self._closed = False
        self._trace = SessionTrace(trace) if trace is not None else None
        self._port = open_port(port, config, path=path, timeout_ms=timeout_ms)
        try:
            if isinstance(source, bytes):
                loaded = self._load(source, ())
                network = loaded.runtime.loadable
                self.metadata = loadable_metadata(network.recipe.raw.get("header") if network else None)
                _check_loaded_shapes(loaded.inputs, shapes)
                self.inputs, self.outputs = loaded.inputs, loaded.outputs
            else:
                self.metadata = onnx_metadata(source.proto)
                self.inputs, self.outputs = declared_io(source.proto, shapes, outputs=False)
                self._given = shapes
                if self.dynamic:  # compiled at its first run: its outputs as the model declares them
                    self.outputs = declared_io(source.proto, shapes)[1]
                else:  # compiled now, as always
                    loaded = self._load(source.loadable(config, precision, shapes, progress=progress), ())
                    self.inputs, self.outputs = loaded.inputs, loaded.outputs
            if self._trace is not None and self._current is not None:
                self._trace.follow(self._current.runtime)
        except BaseException as e:
            self._close(cancel=isinstance(e, KeyboardInterrupt))
            raise

    @functools.cached_property
    def dynamic(self) -> bool:
        """Whether an input has dynamic dimensions: the model is then compiled per input shapes."""
        return any(t.dynamic for t in self.inputs)

    @property
    def runtime(self) -> IRuntime:
        """The :class:`~pydla.umd.runtime.IRuntime` the last run used (the only one, for a model
        without dynamic axes)."""
        if self._current is None:
            raise DlaError(NvError.InvalidState, "the model's input dimensions are dynamic: it is loaded for "
                                                 "the input shapes of its first run (or of prepare())")
        return self._current.runtime

    def prepare(self, input_shapes: Mapping[str, Sequence[int]]) -> None:
        """Compile (or find in the cache) and load the network for these input shapes now, rather
        than at the first run with them (a model without dynamic axes has it loaded already).

        Usage: ``sess.prepare({"input_ids": (1, 128)})``
        """
        shapes = check_input_shapes(input_shapes)
        if not self.dynamic:
            _check_loaded_shapes(self.inputs, shapes)
            return
        missing = [t.name for t in self.inputs if t.dynamic and t.name not in shapes]
        if missing:
            raise DlaError(NvError.BadParameter, f"prepare: give the shape of input(s) {missing} (their "
                                                 "dimensions are dynamic)")
        arrays = {t.name: np.empty(shapes.get(t.name) or _sizes(t), t.dtype) for t in self.inputs}
        with self._lock:
            self._check_open()
            self._loaded_for(arrays)

    # -- the networks ---------------------------------------------------------------------------

    def _load(self, blob: bytes, key: tuple[tuple[int, ...], ...]) -> Loaded:
        loaded = Loaded(self._port, self._device, self._timeout_ms, blob, self._name)
        self._loaded[key] = self._current = loaded
        return loaded

    def _loaded_for(self, arrays: Mapping[str, np.ndarray]) -> Loaded:
        """The network for the shapes of ``arrays`` (checked against the inputs' declarations):
        the one of a model without dynamic axes; else loaded now if it is not (compiled, or from
        the cache), the least recently used unloaded beyond ``max_shapes``. Under the lock."""
        if not self.dynamic:
            assert self._current is not None
            return self._current
        shapes = feed_shapes(self.inputs, arrays)
        key = tuple(shapes[t.name] for t in self.inputs if t.dynamic)
        loaded = self._loaded.get(key)
        if loaded is not None:
            self._loaded.move_to_end(key)
            self._current = loaded
            return loaded
        assert self._source is not None
        blob = self._source.loadable(self._config, self._precision, {**self._given, **shapes},
                                     progress=self._progress)
        for old_key in [k for k, old in self._loaded.items() if not old.pinned][:max(
                0, len(self._loaded) + 1 - self._max_shapes)]:
            self._unload(old_key)
        loaded = self._load(blob, key)
        for t, got in zip(self.inputs, loaded.inputs, strict=True):  # the compiler's, by construction
            if got.shape != arrays[t.name].shape or got.dtype != t.dtype:
                raise DlaError(NvError.BadValue, f"input '{t.name}': compiled as {got.dtype} {got.shape} for "
                                                 f"an array of {t.dtype} {arrays[t.name].shape}")
        return loaded

    def _unload(self, key: tuple[tuple[int, ...], ...], *, cancel: bool = False) -> None:
        loaded = self._loaded.pop(key)
        if self._current is loaded:
            self._current = None
        if self._trace is not None and self._trace.follows(loaded.runtime):
            self._trace.pause()
        loaded.close(cancel=cancel)

    def _unload_after(self, key: tuple[tuple[int, ...], ...], cancel: bool,
                      failed: Callable[[], BaseException | None]) -> None:
        """Unload, cancelling a run in flight when closing was asked to or was interrupted."""
        self._unload(key, cancel=cancel or isinstance(failed(), KeyboardInterrupt))

    # -- running -------------------------------------------------------------------------------

    @overload
    def run(self, output_names: Mapping[str, Any], /, *, outputs: Into = None) -> dict[str, np.ndarray]: ...

    @overload
    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None, *, outputs: Into = None) -> list[np.ndarray]: ...

    def run(self, output_names: Any = None, input_feed: Any = None, run_options: Any = None, *,
            outputs: Any = None) -> dict[str, np.ndarray] | list[np.ndarray]:
        """Run the model. ``run(feeds)`` with ``feeds`` a dict {input name: array} returns
        {output name: array}; ``run(output_names, input_feed)`` is onnxruntime's form and returns
        the list of arrays of ``output_names`` (None or [] for every output) in that order.
        Arrays must have the model's dtype and shape (a dynamic dimension: any size of 1 or more).
        ``run_options`` (an onnxruntime RunOptions) has no effect. ``outputs``: arrays of the
        caller's to write the outputs into (no new arrays): a dict {output name: array}, or a list
        in the order of the outputs returned (None where a new array will do); those same arrays
        are returned.

        Usage: ``sess.run({"input": x})["output"]``; ``y, = sess.run(None, {"input": x})``;
        ``sess.run({"input": x}, outputs={"output": y})``
        """
        if input_feed is None and run_options is None and isinstance(output_names, Mapping):
            return self._run(output_names, self._into(outputs, [t.name for t in self.outputs], "run"))
        return self._run_ort(output_names, input_feed, run_options, "run", outputs)

    def _run_ort(self, output_names: Any, input_feed: Any, run_options: Any, what: str,
                 outputs: Any = None) -> list[np.ndarray]:
        if input_feed is None and isinstance(output_names, Mapping):
            # InferenceSession.run({...}): the feeds were given where onnxruntime takes output names
            raise DlaError(NvError.BadParameter,
                           f"{what}({short(output_names)}): onnxruntime's run takes the output names "
                           f"first: write {what}(None, feeds) (pydla.Session.run(feeds) returns a dict)")
        if not isinstance(input_feed, Mapping):
            given, feed = ((f"{what}({'' if output_names is None else short(output_names)})", output_names)
                           if input_feed is None else
                           (f"{what}({short(output_names)}, {short(input_feed)})", input_feed))
            raise DlaError(NvError.BadParameter, f"{given}: the inputs must be a dict {{input name: array}}, "
                                                 f"not {type(feed).__name__}; "
                                                 f"{forms([t.name for t in self.inputs], what)}")
        names = self._output_names(output_names, what)
        if run_options is not None and type(run_options).__name__ != "RunOptions":
            raise DlaError(NvError.BadParameter, f"{what}: run_options {short(run_options)}: None or an "
                                                 "onnxruntime RunOptions (it has no effect) is expected")
        results = self._run(input_feed, self._into(outputs, names, what))
        return [results[n] for n in names]

    def _output_names(self, output_names: Any, what: str) -> list[str]:
        known = [t.name for t in self.outputs]
        if output_names is None or (isinstance(output_names, (list, tuple)) and not output_names):
            return known
        if not isinstance(output_names, (list, tuple)) or not all(isinstance(n, str) for n in output_names):
            raise DlaError(NvError.BadParameter,
                           f"{what}: output_names {short(output_names)}: None or a list of output names "
                           f"(of {known}) is expected; {forms([t.name for t in self.inputs], what)}")
        unknown = [n for n in output_names if n not in known]
        if unknown:
            raise DlaError(NvError.BadParameter, f"{what}: output_names: {unknown} are not outputs of the "
                                                 f"model (its outputs: {known})")
        return list(output_names)

    def _into(self, outputs: Any, names: list[str], what: str) -> dict[str, np.ndarray]:
        """``outputs=`` as {output name: array}, each a writable numpy array (its dtype and shape
        are checked once the run's shapes are known)."""
        if outputs is None:
            return {}
        if isinstance(outputs, Mapping):
            given = dict(outputs)
        elif isinstance(outputs, (list, tuple)) and len(outputs) == len(names):
            given = {n: a for n, a in zip(names, outputs, strict=True) if a is not None}
        else:
            raise DlaError(NvError.BadParameter, f"{what}: outputs {short(outputs)}: a dict {{output name: "
                                                 f"array}} or a list of {len(names)} arrays (or None) in the "
                                                 f"order of the outputs returned {names}")
        known = [t.name for t in self.outputs]
        for name, a in given.items():
            if name not in known:
                raise DlaError(NvError.BadParameter, f"{what}: outputs: '{name}' is not an output of the "
                                                     f"model (its outputs: {known})")
            if not isinstance(a, np.ndarray) or not a.flags.writeable:
                raise DlaError(NvError.BadParameter, f"{what}: outputs['{name}']: a writable numpy array is "
                                                     f"expected, not {short(a)}")
        return given

    def _check_feeds(self, feeds: Mapping[Any, Any]) -> dict[str, np.ndarray]:
        if len(feeds) != len(self.inputs) or not all(t.name in feeds for t in self.inputs):
            expected = {t.name for t in self.inputs}
            unknown = sorted(set(feeds) - expected, key=repr)
            missing = sorted(expected - set(feeds))
            raise DlaError(NvError.BadParameter,
                           f"inputs: expected {sorted(expected)}; unknown {unknown}, missing {missing}")
        arrays = {}
        for t in self.inputs:
            a = np.asarray(feeds[t.name])
            if a.dtype != t.dtype or (not t.dynamic and a.shape != t.shape):
                raise DlaError(NvError.BadParameter,
                               f"input '{t.name}': expected {t.dtype} of shape {_shown(t)}, got {a.dtype} "
                               f"of shape {a.shape}")
            arrays[t.name] = a
        return arrays

    def _run(self, feeds: Mapping[Any, Any],
             into: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        self._check_open()
        arrays = self._check_feeds(feeds)
        with self._lock:
            self._check_open()
            loaded = self._loaded_for(arrays)
            loaded.collect()
            for name, a in (into or {}).items():
                t = next(o for o in loaded.outputs if o.name == name)
                if a.shape != t.shape or a.dtype != t.dtype:
                    raise DlaError(NvError.BadParameter, f"outputs['{name}']: expected {t.dtype} of shape "
                                                         f"{t.shape}, got {a.dtype} of shape {a.shape}")
            loaded.bind(loaded.in_mems, loaded.out_mems)
            for view, t in zip(loaded.in_views, loaded.inputs, strict=True):
                if view.size:
                    view[...] = arrays[t.name]
            self._submit(loaded)
            results = {}
            for view, t in zip(loaded.out_views, loaded.outputs, strict=True):
                out = (into or {}).get(t.name)
                if out is None:
                    results[t.name] = view.copy()
                else:
                    out[...] = view
                    results[t.name] = out
            return results

    def _submit(self, loaded: Loaded) -> None:
        if self._trace is not None:
            self._trace.follow(loaded.runtime)
        loaded.submit()

    # -- bindings (onnxruntime's IOBinding: pydla.ort_values) ------------------------------------

    def _bind_and_run(self, ins: Mapping[str, np.ndarray], place: Any) -> None:
        """Run with the application's memory, for the shapes of ``ins``: ``place(loaded)`` gives, for
        the network that runs, the memory of each input and output (None: the network's own) and
        what to do after the run."""
        with self._lock:
            self._check_open()
            loaded = self._loaded_for(ins)
            loaded.collect()
            in_mems, out_mems, after = place(loaded)
            loaded.bind([m if m is not None else d for m, d in zip(in_mems, loaded.in_mems, strict=True)],
                        [m if m is not None else d for m, d in zip(out_mems, loaded.out_mems, strict=True)])
            self._submit(loaded)
            after(loaded)

    def _device_memory(self, arrays: Mapping[str, np.ndarray]) -> Loaded:
        """The network (loaded now if need be) whose device memory values for these input shapes
        go into. Under the lock."""
        with self._lock:
            self._check_open()
            return self._loaded_for(arrays)

    # -- lifetime --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DlaError(NvError.InvalidState, "the session is closed: create another to run the model")

    def stop_trace(self) -> TraceResult | None:
        """Stop tracing (``trace=``), write the trace file, and return what it found (also its
        profile: ``result.profile_text()``); None when the session does not trace, or nothing ran.
        Idempotent."""
        if self._trace is None:
            return None
        with self._lock:
            return self._trace.finish()

    def close(self) -> None:
        """Wait for a run in flight (up to the runtime's timeout), write the trace file if the
        session traces, then free everything. Idempotent."""
        self._close(cancel=False)

    def _close(self, *, cancel: bool) -> None:
        """Close; with ``cancel`` (Ctrl-C) a run in flight is cancelled at once, not waited for. Each
        step is tried; the first failure is raised (a Ctrl-C during one cancels the rest)."""
        if self._closed:
            return
        self._closed = True
        first: BaseException | None = None
        steps: list[Callable[[], Any]] = [self._trace.finish] if self._trace is not None else []
        for key in list(self._loaded):
            steps.append(functools.partial(self._unload_after, key, cancel, lambda: first))
        close = getattr(getattr(self, "_port", None), "close", None)
        steps += [close] if callable(close) else []
        for step in steps:
            try:
                step()
            except BaseException as e:  # the others still run: nothing is left open
                if first is None:
                    first = e
                else:
                    log.debug("closing the session after %s: %s", type(first).__name__, e)
        if first is not None:
            raise first

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        close_quietly(lambda: self._close(cancel=interrupted(exc_type)), exc_type)


def _sizes(t: TensorInfo) -> tuple[int, ...]:
    """The shape of an input without dynamic dimensions."""
    return tuple(d for d in t.shape if isinstance(d, int))


def _shown(t: TensorInfo) -> str:
    return str(t.shape) if not t.dynamic else show(t.shape)


def _check_loaded_shapes(inputs: list[TensorInfo], shapes: InputShapes) -> None:
    """The loaded network has the input shapes asked for (a loadable's are fixed when compiling)."""
    named = shapes.named if isinstance(shapes, GivenShapes) else PARAMETER
    loaded = {t.name: t.shape for t in inputs}
    for name, dims in shapes.items():
        if name not in loaded:
            raise DlaError(NvError.BadParameter, f"{quoted(named, name)}: the model has no input '{name}' "
                                                 f"(its inputs: {', '.join(loaded) or 'none'})")
        if loaded[name] != dims:
            raise DlaError(NvError.BadParameter,
                           f"{quoted(named, name, dims)}: the loadable's input '{name}' has shape "
                           f"{loaded[name]}, fixed when it was compiled (compile the ONNX model with the "
                           "shapes you want)")


def _model_name(model: Any) -> str | None:
    """What errors about the model's loadable call it: its file (a compiled ONNX model says so)."""
    if isinstance(model, (str, Path)):
        path = Path(model)
        return str(path) if path.suffix.lower() != ".onnx" else f"{path} (compiled)"
    return None

