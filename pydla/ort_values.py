"""onnxruntime's value and binding types on pydla: :class:`OrtValue` (a tensor on the host, or in a
session's device memory), :class:`IOBinding` (inputs and outputs bound once, runs without copies),
and :class:`NodeArg` (how ``get_inputs()`` describes a tensor).

A value in device memory is what PYNQ's buffers are: a numpy array over the buffer the device reads
or writes (``numpy()`` is a view, no copy), which knows where the device sees it
(``device_address``). Host data bound to a session (``bind_cpu_input``, a host OrtValue) is copied
into device memory when it is bound, as onnxruntime does for a device's session; the runs then copy
nothing.

Usage::

    binding = sess.io_binding()
    binding.bind_cpu_input("input", x)          # copied into device memory, once
    binding.bind_output("probabilities")        # the session allocates it in device memory
    sess.run_with_iobinding(binding)            # no copy in, no copy out
    y = binding.get_outputs()[0].numpy()        # a view of the device buffer
    y = binding.copy_outputs_to_cpu()[0]        # or a copy

    x_dev = sess.create_ortvalue_from_shape_and_type((1, 3, 32, 32), np.float32, "pydla")
    x_dev.numpy()[...] = frame                  # written where the device reads it
    binding.bind_ortvalue_input("input", x_dev)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.model_info import Dim, TensorInfo

if TYPE_CHECKING:
    from pydla.portability.interface import NvDlaMemHandle

# onnxruntime's names of the element types (NodeArg.type, OrtValue.data_type()) and ONNX's
# TensorProto numbers (OrtValue.element_type()), by numpy type.
ORT_TYPES = {np.dtype(t): f"tensor({n})" for t, n in (
    (np.float32, "float"), (np.float16, "float16"), (np.float64, "double"), (np.int8, "int8"),
    (np.int16, "int16"), (np.int32, "int32"), (np.int64, "int64"), (np.uint8, "uint8"),
    (np.uint16, "uint16"), (np.uint32, "uint32"), (np.uint64, "uint64"), (np.bool_, "bool"))}
ONNX_TYPES = {np.dtype(t): n for t, n in (
    (np.float32, 1), (np.uint8, 2), (np.int8, 3), (np.uint16, 4), (np.int16, 5), (np.int32, 6),
    (np.int64, 7), (np.bool_, 9), (np.float16, 10), (np.float64, 11), (np.uint32, 12), (np.uint64, 13))}
_BY_ONNX_TYPE = {n: t for t, n in ONNX_TYPES.items()}
HOST_DEVICES = ("cpu",)
DEVICE = "pydla"  # what device_name() says of a value in a session's device memory


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime's ``get_inputs()`` / ``get_outputs()`` describe it: a
    dynamic dimension is its name (None when unnamed).

    Usage: ``[(a.name, a.shape, a.type) for a in sess.get_inputs()]`` ->
    ``[("input", [1, 3, 32, 32], "tensor(float)")]``
    """

    name: str
    shape: list[Dim]
    type: str

    __hash__ = None  # type: ignore[assignment]  # a list inside: equal by value, not hashable


def element_dtype(element_type: Any, what: str) -> np.dtype[Any]:
    """A numpy dtype from onnxruntime's ``element_type`` (a numpy type, or an ONNX TensorProto
    number); refused when pydla has no such tensors."""
    if isinstance(element_type, int) and not isinstance(element_type, bool):
        dtype = _BY_ONNX_TYPE.get(element_type)
    else:
        try:
            dtype = np.dtype(element_type)
        except TypeError:
            dtype = None
    if dtype is None or dtype not in ORT_TYPES:
        raise DlaError(NvError.BadParameter, f"{what}: element_type {element_type!r}: one of "
                                             f"{', '.join(sorted(d.name for d in ORT_TYPES))} (or its ONNX "
                                             "number)")
    return dtype


def check_host_device(device_type: Any, what: str) -> None:
    """``device_type`` of a value made without a session: the host's only."""
    if not isinstance(device_type, str) or device_type.lower() not in HOST_DEVICES:
        raise DlaError(NvError.NotSupported,
                       f"{what}: device_type {device_type!r}: a value made without a session is on the "
                       "host ('cpu'); device memory is a session's: sess.create_ortvalue_from_shape_and_type("
                       "shape, type, 'pydla'), or bind host data with io_binding().bind_cpu_input")


def check_session_device(device_type: Any, what: str) -> None:
    """``device_type`` of a binding or a session's allocation: pydla's device (its memory is mapped
    into the host, so 'cpu', onnxruntime's default, means it too)."""
    if not isinstance(device_type, str) or device_type.lower() not in (DEVICE, *HOST_DEVICES):
        raise DlaError(NvError.NotSupported, f"{what}: device_type {device_type!r}: pydla binds to its own "
                                             f"device, '{DEVICE}' (or 'cpu': the device's memory is mapped "
                                             "into the host)")


def shape_of(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise DlaError(NvError.BadParameter, f"{what}: shape {shape!r}: a list of sizes (ints, 0 or more)")
    return tuple(int(d) for d in shape)


class OrtValue:
    """onnxruntime's OrtValue: a tensor on the host ('cpu'), or in a session's device memory
    ('pydla'), where ``numpy()`` is a view of the device buffer (no copy) and ``device_address``
    says where the device sees it.

    Usage: ``v = pydla.OrtValue.ortvalue_from_numpy(x); v.numpy()``;
    ``v = sess.create_ortvalue_from_shape_and_type((1, 8), np.float32, "pydla")``
    """

    def __init__(self, array: np.ndarray, mem: NvDlaMemHandle | None = None, owner: Any = None) -> None:
        # array: the data (host memory, or the view of ``mem``); owner: the session's loaded network
        # whose device context holds ``mem``. Made by the class methods and by sessions.
        if array.dtype not in ORT_TYPES:
            raise DlaError(NvError.BadParameter, f"OrtValue of dtype {array.dtype}: one of "
                                                 f"{', '.join(sorted(d.name for d in ORT_TYPES))}")
        self._array = array
        self._mem = mem
        self._owner = owner
        self._free: Callable[[], Any] | None = None
        self._released = False
        if mem is not None and owner is not None:
            # Freed by the session when the value is gone (a finalizer may run in any thread, at any
            # point: it only hands the memory back, to be freed at the session's next call).
            self._free = weakref.finalize(self, owner.defer_free, mem)
            owner.users.add(self)

    @classmethod
    def ortvalue_from_numpy(cls, numpy_obj: Any, /, device_type: str = "cpu", device_id: int = 0,
                            vendor_id: int = -1) -> OrtValue:
        """A host value over ``numpy_obj`` (shared, not copied, when it is contiguous), as
        onnxruntime's for 'cpu'.

        Usage: ``v = pydla.OrtValue.ortvalue_from_numpy(np.ones((1, 8), np.float32))``
        """
        check_host_device(device_type, "OrtValue.ortvalue_from_numpy")
        return cls(np.ascontiguousarray(numpy_obj))

    @classmethod
    def ortvalue_from_shape_and_type(cls, shape: Sequence[int], element_type: Any, device_type: str = "cpu",
                                     device_id: int = 0, vendor_id: int = -1,
                                     memory_info: Any = None) -> OrtValue:
        """A host value of zeros of ``shape`` and ``element_type`` (a numpy type or an ONNX number).

        Usage: ``v = pydla.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)``
        """
        what = "OrtValue.ortvalue_from_shape_and_type"
        check_host_device(device_type, what)
        if memory_info is not None:
            raise DlaError(NvError.NotSupported, f"{what}: memory_info: pydla has no onnxruntime memory "
                                                 "infos; device memory comes from "
                                                 "sess.create_ortvalue_from_shape_and_type")
        return cls(np.zeros(shape_of(shape, what), element_dtype(element_type, what)))

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(cls, data: np.ndarray, /, onnx_element_type: int) -> OrtValue:
        """``data`` as ONNX type ``onnx_element_type`` (of the same element size; no copy)."""
        dtype = element_dtype(onnx_element_type, "OrtValue.ortvalue_from_numpy_with_onnx_type")
        data = np.ascontiguousarray(data)
        if dtype.itemsize != data.dtype.itemsize:
            raise DlaError(NvError.BadParameter, f"OrtValue.ortvalue_from_numpy_with_onnx_type: {data.dtype} "
                                                 f"elements are {data.dtype.itemsize} bytes, {dtype} "
                                                 f"{dtype.itemsize}")
        return cls(data.view(dtype))

    @classmethod
    def from_dlpack(cls, data: Any, /) -> OrtValue:
        """A host value over a DLPack capsule's or exporter's data (no copy)."""
        return cls(np.ascontiguousarray(np.from_dlpack(data)))

    @classmethod
    def ort_value_from_sparse_tensor(cls, sparse_tensor: Any) -> OrtValue:
        raise DlaError(NvError.NotSupported, "OrtValue.ort_value_from_sparse_tensor: pydla runs dense "
                                             "tensors")

    # -- what it holds -----------------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """The data: the host array, or for a device value a view of its device buffer (no copy)."""
        self._check()
        return self._array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __dlpack__(self, *, stream: Any = None) -> Any:
        return self.numpy().__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU: the device's memory is mapped into the host

    def update_inplace(self, data: Any) -> None:
        """Copy ``data`` (an array of the same shape and dtype) into the value, where it lies."""
        self._check()
        a = np.asarray(data)
        if a.shape != self._array.shape or a.dtype != self._array.dtype:
            raise DlaError(NvError.BadParameter, f"OrtValue.update_inplace: {a.dtype} of shape {a.shape} "
                                                 f"into a value of {self._array.dtype} {self._array.shape}")
        self._array[...] = a

    def data_ptr(self) -> int:
        """The address of the first element, as this process maps it (for a device value, its
        mapping of the device buffer; :attr:`device_address` is where the device sees it)."""
        return int(self.numpy().ctypes.data)

    @property
    def device_address(self) -> int | None:
        """Where the device sees the data (PYNQ's ``physical_address``); None for a host value."""
        return None if self._mem is None else self._mem.device_address

    def device_name(self) -> str:
        return DEVICE if self._owner is not None else "cpu"

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def data_type(self) -> str:
        return ORT_TYPES[self._array.dtype]

    def element_type(self) -> int:
        return ONNX_TYPES[self._array.dtype]

    def tensor_size_in_bytes(self) -> int:
        return int(self._array.nbytes)

    def has_value(self) -> bool:
        return True

    def is_tensor(self) -> bool:
        return True

    def is_sparse_tensor(self) -> bool:
        return False

    def is_tensor_sequence(self) -> bool:
        return False

    def as_sparse_tensor(self) -> Any:
        raise DlaError(NvError.NotSupported, "OrtValue.as_sparse_tensor: pydla's values are dense tensors")

    def __repr__(self) -> str:
        return f"OrtValue({self._array.dtype} {list(self._array.shape)} on {self.device_name()})"

    # -- the session's side --------------------------------------------------------------------------

    def _check(self) -> None:
        if self._released or (self._owner is not None and self._owner.closed):
            raise DlaError(NvError.InvalidState,
                           "OrtValue: its device memory was freed (its session is closed, or the binding it "
                           "came from was cleared or ran with other input shapes)")

    def _on(self, owner: Any) -> bool:
        """Whether the value is in ``owner``'s device memory (so a run of it reads it in place)."""
        return self._owner is owner and self._mem is not None and not self._released

    def _release(self) -> None:
        """Hand the device memory back (freed at the session's next call; the caller holds its lock)."""
        if self._free is not None and not self._released:
            self._released = True
            self._owner.users.discard(self)
            self._free()


class BindingSession(Protocol):
    """What an :class:`IOBinding` uses of its session (:class:`pydla.Session` has it): declared here,
    so that the values and the binding import nothing of the session's modules above them."""

    inputs: list[TensorInfo]
    outputs: list[TensorInfo]

    def _owns(self, value: OrtValue) -> bool: ...

    def _value_at(self, buffer_ptr: Any, device_type: Any, element_type: Any, shape: Any,
                  what: str) -> OrtValue: ...

    def _to_device(self, binding: IOBinding, name: str, a: np.ndarray) -> OrtValue: ...

    def _unbind(self, binding: IOBinding, kind: str) -> None: ...


class IOBinding:
    """onnxruntime's IOBinding: inputs and outputs bound once to a session, in its device memory;
    :meth:`Session.run_with_iobinding` then runs without copying (see the module docstring).

    Usage: ``b = sess.io_binding(); b.bind_cpu_input("x", x); b.bind_output("y");
    sess.run_with_iobinding(b); y, = b.copy_outputs_to_cpu()``
    """

    def __init__(self, session: BindingSession) -> None:
        self._session = session
        self.inputs: dict[str, OrtValue] = {}          # bound: the value a run reads
        self.outputs: dict[str, OrtValue | None] = {}  # None: the session allocates it
        self.own: dict[tuple[str, str], OrtValue] = {}  # device values this binding allocated
        self.results: list[OrtValue] = []

    def _info(self, name: Any, kind: str) -> Any:
        infos = self._session.inputs if kind == "input" else self._session.outputs
        for t in infos:
            if t.name == name:
                return t
        raise DlaError(NvError.BadParameter, f"IOBinding: '{name}' is not an {kind} of the model (its "
                                             f"{kind}s: {', '.join(t.name for t in infos)})")

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind input ``name`` to a copy of ``arr_on_cpu`` in device memory (copied now, once)."""
        t = self._info(name, "input")
        a = np.asarray(arr_on_cpu)
        if a.dtype != t.dtype:
            raise DlaError(NvError.BadParameter, f"IOBinding.bind_cpu_input('{name}'): expected {t.dtype}, "
                                                 f"got {a.dtype}")
        self.inputs[name] = self._session._to_device(self, name, a)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind input ``name`` to ``ortvalue``: read in place when it is in this session's device
        memory, else copied there now."""
        if not isinstance(ortvalue, OrtValue):
            raise DlaError(NvError.BadParameter, f"IOBinding.bind_ortvalue_input('{name}'): a pydla.OrtValue "
                                                 f"is expected, not {type(ortvalue).__name__}")
        if self._session._owns(ortvalue):
            t = self._info(name, "input")
            if ortvalue.numpy().dtype != t.dtype:
                raise DlaError(NvError.BadParameter, f"IOBinding.bind_ortvalue_input('{name}'): expected "
                                                     f"{t.dtype}, got {ortvalue.numpy().dtype}")
            self.inputs[name] = ortvalue
            return
        self.bind_cpu_input(name, ortvalue.numpy())

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any, shape: Sequence[int],
                   buffer_ptr: int) -> None:
        """Bind input ``name`` to the device value of this session whose ``data_ptr()`` is
        ``buffer_ptr`` (other memory is not the device's: bind host data with bind_cpu_input)."""
        self.bind_ortvalue_input(name, self._session._value_at(buffer_ptr, device_type, element_type, shape,
                                                               f"IOBinding.bind_input('{name}')"))

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        """Bind output ``name``: without ``buffer_ptr``, to device memory the session allocates
        (``get_outputs()`` then gives it); with it, to the device value whose ``data_ptr()`` it is."""
        self._info(name, "output")
        what = f"IOBinding.bind_output('{name}')"
        check_session_device(device_type, what)
        if buffer_ptr is None:
            self.outputs[name] = None
            return
        if element_type is None or shape is None:
            raise DlaError(NvError.BadParameter, f"{what}: element_type and shape are to be given with "
                                                 "buffer_ptr")
        self.outputs[name] = self._session._value_at(buffer_ptr, device_type, element_type, shape, what)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind output ``name`` to ``ortvalue``: written in place when it is in this session's
        device memory; a host value gets the output copied into it after each run."""
        self._info(name, "output")
        if not isinstance(ortvalue, OrtValue):
            raise DlaError(NvError.BadParameter, f"IOBinding.bind_ortvalue_output('{name}'): a "
                                                 f"pydla.OrtValue is expected, not {type(ortvalue).__name__}")
        self.outputs[name] = ortvalue

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: bound inputs are in device memory when bind_* returns."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: run_with_iobinding returns when the outputs are written."""

    def get_outputs(self) -> list[OrtValue]:
        """The outputs of the last run, in the order they were bound (device values: numpy() is a
        view of the device buffer)."""
        return list(self.results)

    def get_outputs_as_ortvaluevector(self) -> list[OrtValue]:
        """onnxruntime's raw vector of the outputs: here the list :meth:`get_outputs` returns."""
        return self.get_outputs()

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        """The outputs of the last run, copied into host arrays."""
        return [v.numpy().copy() for v in self.results]

    def clear_binding_inputs(self) -> None:
        self._session._unbind(self, "input")

    def clear_binding_outputs(self) -> None:
        self._session._unbind(self, "output")
