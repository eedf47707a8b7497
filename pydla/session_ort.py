"""onnxruntime's session methods on :class:`pydla.Session`: descriptions (``get_inputs``,
``get_modelmeta``), OrtValues (``run_with_ort_values``, ``create_ortvalue_from_shape_and_type``),
IOBinding (``io_binding``, ``run_with_iobinding``), profiling (``end_profiling``), ``run_async``,
and the methods that have no meaning here, which say so (DlaError NotSupported), never
AttributeError: code written for onnxruntime runs, or tells why not.

Usage::

    meta = sess.get_modelmeta()                      # producer_name, graph_name, ..., custom_metadata_map
    binding = sess.io_binding(); ...; sess.run_with_iobinding(binding)
    path = sess.end_profiling()                      # the trace file ("" when not tracing)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.loadable.metadata import ModelMetadata
from pydla.ort_values import (
    ORT_TYPES,
    IOBinding,
    NodeArg,
    OrtValue,
    check_session_device,
    element_dtype,
    shape_of,
)

if TYPE_CHECKING:

    from pydla.model_info import TensorInfo
    from pydla.session_loaded import Loaded
    from pydla.session_trace import SessionTrace
    from pydla.trace.capture import TraceResult

# onnxruntime's session methods that have no meaning on pydla's device, with why.
_NOT_SUPPORTED = {
    "get_input_memory_infos": "pydla has no onnxruntime memory infos (inputs are in the device's memory)",
    "get_output_memory_infos": "pydla has no onnxruntime memory infos (outputs are in the device's memory)",
    "get_input_epdevices": "pydla has no onnxruntime execution-provider devices",
    "get_provider_graph_assignment_info": "the whole model runs on pydla's device",
    "set_ep_dynamic_options": "pydla's execution provider has no dynamic options",
    "get_tuning_results": "pydla has no kernel tuning",
    "set_tuning_results": "pydla has no kernel tuning",
    "release_captured_graph": "pydla captures no graphs (a loaded network is replayed as it is)",
    "run_with_ortvaluevector": "use run_with_ort_values or run_with_iobinding",
}


def forms(model_inputs: list[str], what: str) -> str:
    ort = "run(None, {name: array}) or run([output names], {name: array}) -> [array, ...]"
    if what.startswith("InferenceSession"):  # onnxruntime's run only
        return (f"the accepted form: {ort} (pydla.Session's run({{name: array}}) returns a dict); the "
                f"model's inputs: {model_inputs}")
    return (f"the accepted forms: run({{name: array}}) -> {{name: array}}; {ort} (onnxruntime's form); "
            f"the model's inputs: {model_inputs}")


def short(value: Any) -> str:
    """``value`` for a message: arrays by shape, never pages of numbers."""
    if isinstance(value, np.ndarray):
        return f"array{value.shape}"
    if isinstance(value, dict):
        inner = ", ".join(f"{k!r}: {short(v)}" for k, v in list(value.items())[:4])
        return "{" + inner + (", ...}" if len(value) > 4 else "}")
    if isinstance(value, (list, tuple)):
        inner = ", ".join(short(v) for v in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class OrtMethods:
    """The methods of the module docstring, mixed into :class:`pydla.Session`."""

    if TYPE_CHECKING:  # what they use of the session
        inputs: list[TensorInfo]
        outputs: list[TensorInfo]
        metadata: ModelMetadata
        _trace: SessionTrace | None
        _lock: threading.RLock
        _loaded: dict[Any, Loaded]

        @property
        def dynamic(self) -> bool: ...
        def _run_ort(self, output_names: Any, input_feed: Any, run_options: Any, what: str,
                     outputs: Any = None) -> list[np.ndarray]: ...
        def _check_feeds(self, feeds: Mapping[Any, Any]) -> dict[str, np.ndarray]: ...
        def _device_memory(self, arrays: Mapping[str, np.ndarray]) -> Loaded: ...
        def _bind_and_run(self, ins: Mapping[str, np.ndarray], place: Any) -> None: ...
        def _check_open(self) -> None: ...
        def stop_trace(self) -> TraceResult | None: ...

    # -- descriptions ------------------------------------------------------------------------------

    def get_inputs(self) -> list[NodeArg]:
        """The inputs as onnxruntime describes them (``.name``, ``.shape`` a list, a dynamic
        dimension by its name, ``.type`` such as "tensor(float)").

        Usage: ``feeds = {a.name: np.zeros(a.shape, np.float32) for a in sess.get_inputs()}``
        """
        return [NodeArg(t.name, list(t.shape), ORT_TYPES[t.dtype]) for t in self.inputs]

    def get_outputs(self) -> list[NodeArg]:
        """The outputs, as :meth:`get_inputs` describes the inputs."""
        return [NodeArg(t.name, list(t.shape), ORT_TYPES[t.dtype]) for t in self.outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        """None: a loadable carries its weights compiled in (as onnxruntime lists none)."""
        return []

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata as onnxruntime's (producer_name, graph_name, domain, description,
        graph_description, version, custom_metadata_map).

        Usage: ``sess.get_modelmeta().producer_name``
        """
        return self.metadata

    def get_providers(self) -> list[str]:
        """Where the model runs, in onnxruntime's terms: ``["PydlaExecutionProvider"]``."""
        return ["PydlaExecutionProvider"]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {"PydlaExecutionProvider": {}}

    def get_session_options(self) -> Any:
        """The onnxruntime SessionOptions given to :class:`pydla.InferenceSession` (a new one when
        none was given)."""
        options = getattr(self, "_sess_options", None)
        if options is not None:
            return options
        try:
            import onnxruntime  # type: ignore[import-untyped]
        except ImportError:
            raise DlaError(NvError.NotSupported, "get_session_options: no SessionOptions was given and "
                                                 "onnxruntime, whose class it is, is not installed") from None
        return onnxruntime.SessionOptions()

    def disable_fallback(self) -> None:
        """Nothing to disable: pydla has no fallback provider."""

    def enable_fallback(self) -> None:
        """Nothing to enable: pydla has no fallback provider."""

    def set_providers(self, providers: Sequence[str | tuple[str, dict[Any, Any]]] | None = None,
                      provider_options: Sequence[dict[Any, Any]] | None = None) -> None:
        """Accepted as onnxruntime's is, with no effect (the model stays on pydla's device)."""
        check_providers(providers, provider_options)

    # -- profiling ---------------------------------------------------------------------------------

    def end_profiling(self) -> str:
        """Stop tracing and write the trace file; its path ("" when the session does not trace:
        ``trace=``, or onnxruntime's SessionOptions.enable_profiling), as onnxruntime's.

        Usage: ``path = sess.end_profiling()`` (open it at https://ui.perfetto.dev)
        """
        if self._trace is None or self._trace.written:  # as onnxruntime's: "" once ended
            return ""
        self.stop_trace()
        return str(self._trace.path)

    def get_profiling_start_time_ns(self) -> int:
        """When tracing started, on the monotonic clock (time.monotonic_ns()) the trace's times use;
        0 when the session does not trace."""
        return self._trace.start_ns if self._trace is not None else 0

    # -- OrtValues ---------------------------------------------------------------------------------

    def run_with_ort_values(self, output_names: Sequence[str] | None,
                            input_dict_ort_values: Mapping[str, Any],
                            run_options: Any = None) -> list[OrtValue]:
        """onnxruntime's run on OrtValues (pydla's, or onnxruntime's on the CPU): host OrtValues of
        the outputs named (None or [] for all), in that order.

        Usage: ``y, = sess.run_with_ort_values(None, {"input": pydla.OrtValue.ortvalue_from_numpy(x)})``
        """
        if not isinstance(input_dict_ort_values, Mapping):
            raise DlaError(NvError.BadParameter,
                           "run_with_ort_values: the inputs must be a dict {input name: OrtValue}, not "
                           f"{type(input_dict_ort_values).__name__}")
        feeds = {}
        for name, value in input_dict_ort_values.items():
            numpy = getattr(value, "numpy", None)
            if not callable(numpy):
                raise DlaError(NvError.BadParameter, f"run_with_ort_values: input '{name}': an OrtValue is "
                                                     f"expected, not {short(value)}")
            feeds[name] = numpy()
        results = self._run_ort(output_names, feeds, run_options, "run_with_ort_values")
        return [OrtValue(r) for r in results]

    def create_ortvalue_from_shape_and_type(self, shape: Sequence[int], element_type: Any,
                                            device_type: str = "pydla", device_id: int = 0,
                                            vendor_id: int = -1) -> OrtValue:
        """A value in this session's device memory (zeros): ``numpy()`` is a view of the device
        buffer, written where the device reads it; bound with ``bind_ortvalue_input`` (or
        ``bind_input(..., buffer_ptr=v.data_ptr())``) a run reads it in place, as an output it is
        written in place. For a model with dynamic axes, the shape must be its one input's (it
        chooses the network whose memory it is).

        Usage: ``x = sess.create_ortvalue_from_shape_and_type((1, 3, 32, 32), np.float32, "pydla")``
        """
        what = "create_ortvalue_from_shape_and_type"
        check_session_device(device_type, what)
        dims, dtype = shape_of(shape, what), element_dtype(element_type, what)
        if not self.dynamic:
            loaded = self._device_memory({})
        elif len(self.inputs) == 1:
            loaded = self._device_memory({self.inputs[0].name: np.empty(dims, dtype)})
        else:
            raise DlaError(NvError.NotSupported,
                           f"{what}: the model's inputs {[t.name for t in self.inputs]} have dynamic "
                           "dimensions: each input shapes run in device memory of their own, which a shape "
                           "alone does not choose; bind host data (io_binding().bind_cpu_input, copied "
                           "once) or give the session input_shapes")
        with self._lock:
            mem, array = loaded.allocate(dims, dtype)
            array[...] = 0
            return OrtValue(array, mem, loaded)

    def _owns(self, value: OrtValue) -> bool:
        return value._owner is not None and any(value._owner is loaded for loaded in self._loaded.values())

    def _value_at(self, buffer_ptr: Any, device_type: Any, element_type: Any, shape: Any,
                  what: str) -> OrtValue:
        """The device value of this session at ``buffer_ptr`` (its data_ptr()), of that type and shape."""
        check_session_device(device_type, what)
        dims, dtype = shape_of(shape, what), element_dtype(element_type, what)
        for loaded in list(self._loaded.values()):
            for value in list(loaded.users):
                if value.numpy().size and value.data_ptr() == buffer_ptr:
                    if (tuple(value.shape()), value.numpy().dtype) != (dims, dtype):
                        raise DlaError(NvError.BadParameter,
                                       f"{what}: the value at buffer_ptr {buffer_ptr:#x} is "
                                       f"{value.numpy().dtype} {value.shape()}, not {dtype} {list(dims)}")
                    return value
        raise DlaError(NvError.BadParameter,
                       f"{what}: buffer_ptr {buffer_ptr!r} is not the data_ptr() of a device value of this "
                       "session (sess.create_ortvalue_from_shape_and_type(shape, type, 'pydla')): the device "
                       "reads and writes its own memory only; bind host data with bind_cpu_input")

    # -- IOBinding -----------------------------------------------------------------------------------

    def io_binding(self) -> IOBinding:
        """onnxruntime's IOBinding for this session (:class:`pydla.ort_values.IOBinding`).

        Usage: ``b = sess.io_binding(); b.bind_cpu_input("x", x); b.bind_output("y");
        sess.run_with_iobinding(b); y, = b.copy_outputs_to_cpu()``
        """
        self._check_open()
        return IOBinding(self)

    def _to_device(self, binding: IOBinding, name: str, a: np.ndarray) -> OrtValue:
        """A copy of ``a`` (input ``name``) in device memory, the binding's own (reused while the
        shape stays); for a model with dynamic axes whose network is not chosen yet by the bound
        shapes, a host copy, moved to the device at the run."""
        shapes = {n: v.numpy() for n, v in binding.inputs.items() if n != name}
        shapes[name] = a
        if self.dynamic and any(t.name not in shapes for t in self.inputs if t.dynamic):
            return OrtValue(a.copy())
        loaded = self._device_memory(shapes)
        return self._own(binding, "input", name, a, loaded)

    def _own(self, binding: IOBinding, kind: str, name: str, data: np.ndarray | None,
             loaded: Loaded, shape: tuple[int, ...] | None = None, dtype: Any = None) -> OrtValue:
        """The binding's device value for ``kind`` ``name`` in ``loaded``'s memory (reused when it
        fits), holding a copy of ``data`` when given."""
        shape = data.shape if data is not None else shape
        dtype = data.dtype if data is not None else dtype
        with self._lock:
            old = binding.own.get((kind, name))
            if old is None or not old._on(loaded) or old.numpy().shape != shape or old.numpy().dtype != dtype:
                if old is not None:
                    old._release()
                mem, array = loaded.allocate(shape, np.dtype(dtype))  # type: ignore[arg-type]
                old = binding.own[(kind, name)] = OrtValue(array, mem, loaded)
            if data is not None:
                old.numpy()[...] = data
            return old

    def _unbind(self, binding: IOBinding, kind: str) -> None:
        with self._lock:
            (binding.inputs if kind == "input" else binding.outputs).clear()
            for key in [k for k in binding.own if k[0] == kind]:
                binding.own.pop(key)._release()
            if kind == "output":
                binding.results = []

    def run_with_iobinding(self, iobinding: IOBinding, run_options: Any = None) -> None:
        """Run with the binding's inputs and outputs, in device memory: nothing is copied (but into
        the outputs bound to host OrtValues, after the run). ``get_outputs()`` then gives the
        outputs bound, in the order they were bound.

        Usage: ``sess.run_with_iobinding(binding); binding.get_outputs()``
        """
        self._check_open()
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise DlaError(NvError.BadParameter, "run_with_iobinding: an IOBinding of this session "
                                                 "(sess.io_binding()) is expected")
        missing = [t.name for t in self.inputs if t.name not in iobinding.inputs]
        if missing:
            raise DlaError(NvError.BadParameter, f"run_with_iobinding: input(s) {missing} are not bound "
                                                 "(bind_cpu_input, bind_ortvalue_input or bind_input)")
        if not iobinding.outputs:
            raise DlaError(NvError.BadParameter, "run_with_iobinding: no output is bound: bind at least one "
                                                 "(bind_output(name) has the session allocate it)")
        arrays = {n: v.numpy() for n, v in iobinding.inputs.items()}
        self._check_feeds(arrays)

        def place(loaded: Loaded) -> tuple[list[Any], list[Any], Callable[[Loaded], None]]:
            ins = []
            for t in loaded.inputs:
                value = iobinding.inputs[t.name]
                if not value._on(loaded):  # a host copy waiting for its network, or another network's
                    # The binding's own copy moves to this network's memory for good; a value of the
                    # application's in another network's memory is copied for each run.
                    mine = value._owner is None or iobinding.own.get(("input", t.name)) is value
                    value = self._own(iobinding, "input", t.name, value.numpy(), loaded)
                    if mine:
                        iobinding.inputs[t.name] = value
                ins.append(value._mem)
            outs, copies = [], []
            for t in loaded.outputs:
                bound = iobinding.outputs.get(t.name)
                if bound is not None and bound._on(loaded):
                    if (tuple(bound.shape()), bound.numpy().dtype) != (t.shape, t.dtype):
                        raise DlaError(NvError.BadParameter,
                                       f"run_with_iobinding: output '{t.name}' is {t.dtype} {list(t.shape)}, "
                                       f"the value bound is {bound.numpy().dtype} {bound.shape()}")
                    outs.append(bound._mem)
                    continue
                value = self._own(iobinding, "output", t.name, None, loaded, t.shape, t.dtype)  # type: ignore[arg-type]
                if bound is not None:
                    copies.append((value, bound))
                outs.append(value._mem)

            def after(loaded: Loaded) -> None:
                for value, bound in copies:
                    bound.update_inplace(value.numpy())
                iobinding.results = [iobinding.outputs.get(n) or iobinding.own[("output", n)]
                                     for n in iobinding.outputs]
            return ins, outs, after

        self._bind_and_run(arrays, place)

    # -- the rest of onnxruntime's -------------------------------------------------------------------

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Callable[[Any, Any, str], None], user_data: Any, run_options: Any = None) -> None:
        """onnxruntime's run_async: run in another thread, then ``callback(results, user_data, err)``
        (``err`` "" on success; else results None and the error's text).

        Usage: ``sess.run_async(None, feeds, lambda results, data, err: ..., None)``
        """
        if not callable(callback):
            raise DlaError(NvError.BadParameter, f"run_async: callback {short(callback)} is not callable")

        def work() -> None:
            try:
                results = self._run_ort(output_names, input_feed, run_options, "run_async")
            except DlaError as e:
                callback(None, user_data, str(e))
                return
            callback(results, user_data, "")

        threading.Thread(target=work, daemon=True, name="pydla-run-async").start()



def _not_supported(name: str, why: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise DlaError(NvError.NotSupported, f"{name}: {why}")

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"onnxruntime's {name}: not supported on pydla ({why}); raises DlaError NotSupported."
    return method


for _name, _why in _NOT_SUPPORTED.items():
    setattr(OrtMethods, _name, _not_supported(_name, _why))


def check_providers(providers: Any, provider_options: Any) -> None:
    """onnxruntime's provider arguments, by form only: they select nothing here."""
    if providers is not None and (not isinstance(providers, (list, tuple)) or not all(
            isinstance(p, str) or (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                   and isinstance(p[1], dict)) for p in providers)):
        raise DlaError(NvError.BadParameter, f"providers {short(providers)}: None or a list of provider "
                                             "names or (name, options dict) pairs is expected")
    if provider_options is not None and (not isinstance(provider_options, (list, tuple))
                                         or not all(isinstance(o, dict) for o in provider_options)):
        raise DlaError(NvError.BadParameter, f"provider_options {short(provider_options)}: None or a list "
                                             "of dicts is expected")
