"""What generated contract modules build on: records, messages, and encode / decode / dispatch.

Only the standard library: the core layers import generated modules, never the code generator.

Usage::

    from pydla.deviceapi.generated import device_api as api
    from pydla.deviceapi.runtime import decode, Dispatcher

    wire = bytes(api.version_query_cmd.new(tag=7))
    msg = decode(api.API, wire)              # -> a version_query_cmd, checked against the header
    reply = api.version_query_rsp.answer(msg, hw_version=0x10)
"""

from __future__ import annotations

import ctypes
import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from pydla.errors import DlaError, NvError

Buffer = bytes | bytearray | memoryview


class Record(ctypes.LittleEndianStructure):
    """A generated struct: little-endian, packed, with its fields' enums and f16s recorded."""

    _enums_: ClassVar[dict[str, type[enum.IntEnum]]] = {}
    _f16_: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_buffer_checked(cls: type[R], buf: Buffer, offset: int = 0, *, copy: bool = False) -> R:
        """A view of (or, with ``copy``, a copy of) the record at ``offset``, bounds-checked."""
        size = ctypes.sizeof(cls)
        if offset < 0 or offset + size > len(buf):
            raise DlaError(NvError.InvalidSize,
                           f"{cls.__name__}: needs {size} bytes at offset {offset}, "
                           f"buffer holds {len(buf)}")
        if not copy and not isinstance(buf, bytes) and not memoryview(buf).readonly:
            return cls.from_buffer(buf, offset)
        return cls.from_buffer_copy(buf, offset)

    def to_dict(self) -> dict[str, Any]:
        """Field values as plain Python: enums by member name where known, nested records as dicts."""
        out: dict[str, Any] = {}
        for entry in self._fields_:
            name = entry[0]
            out[name] = self._value(name, getattr(self, name))
        return out

    def _value(self, name: str, value: Any) -> Any:
        if isinstance(value, Record):
            return value.to_dict()
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        if isinstance(value, ctypes.Array):
            return [self._value(name, v) for v in value]
        if name in self._f16_:
            return struct.unpack("<e", struct.pack("<H", value))[0]
        enum_type = self._enums_.get(name)
        if enum_type is not None:
            try:
                return enum_type(value).name
            except ValueError:
                return value
        return value

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"{type(self).__name__}({body})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and bytes(self) == bytes(other)

    __hash__ = None  # type: ignore[assignment]


R = TypeVar("R", bound=Record)
M = TypeVar("M", bound="Message")


class MessageType(enum.IntEnum):
    """The ``type`` byte of the common header (``msg_type_e``)."""

    COMMAND = 1
    RESPONSE = 2
    EVENT = 3


class Message(Record):
    """A generated message: its first field ``header`` is the header for its type."""

    MSG_ID: ClassVar[int] = 0
    SIZE: ClassVar[int] = 0
    MSG_TYPE: ClassVar[MessageType] = MessageType.COMMAND
    COMMAND: ClassVar[type[Message] | None] = None

    @classmethod
    def new(cls: type[M], tag: int = 0, timestamp_ns: int = 0, **fields: Any) -> M:
        """A message with its header filled in (size, id, type, and tag or timestamp)."""
        msg = cls()
        common = msg.header.common
        common.size = ctypes.sizeof(cls)
        common.id = cls.MSG_ID
        common.type = int(cls.MSG_TYPE)
        if cls.MSG_TYPE == MessageType.COMMAND:
            msg.header.tag = tag
        elif cls.MSG_TYPE == MessageType.EVENT:
            msg.header.timestamp_ns = timestamp_ns
        _assign(msg, fields)
        return msg

    @classmethod
    def answer(cls: type[M], command: Message, **fields: Any) -> M:
        """The response to ``command``: its header embeds the command's header."""
        if cls.MSG_TYPE != MessageType.RESPONSE or cls.COMMAND is None:
            raise DlaError(NvError.BadParameter, f"{cls.__name__} is not a Response")
        if not isinstance(command, cls.COMMAND):
            raise DlaError(NvError.BadParameter,
                           f"{cls.__name__} answers {cls.COMMAND.__name__}, "
                           f"not {type(command).__name__}")
        msg = cls.new(**fields)
        ctypes.memmove(ctypes.addressof(msg.header.command), ctypes.addressof(command.header),
                       ctypes.sizeof(command.header))
        return msg

    @property
    def payload(self) -> dict[str, Any]:
        """The fields after the header."""
        values = self.to_dict()
        values.pop("header")
        return values


def _assign(record: Record, fields: dict[str, Any]) -> None:
    names = {entry[0] for entry in record._fields_}
    for name, value in fields.items():
        if name not in names or name == "header":
            raise DlaError(NvError.BadParameter,
                           f"{type(record).__name__} has no field '{name}' "
                           f"(fields: {', '.join(sorted(names - {'header'}))})")
        if isinstance(value, str):
            value = value.encode()
        try:
            setattr(record, name, value)
        except (TypeError, ValueError) as e:
            raise DlaError(NvError.BadValue, f"{type(record).__name__}.{name}: {e}") from e


@dataclass(frozen=True)
class ApiInfo:
    """A generated contract: name, version, layout hash, and its messages and trace events by id."""

    name: str
    version: tuple[int, int, int]
    layout_hash: str
    layout_hash64: int
    messages: dict[int, type[Message]] = field(default_factory=dict)
    trace_events: dict[int, type[Record]] = field(default_factory=dict)

    @property
    def version_string(self) -> str:
        return ".".join(map(str, self.version))


# The common header's first fields (size u32, id u16, type u8), read without building a record:
# decoding is on the hot path of every message. A test checks this against the generated header.
_COMMON = struct.Struct("<IHB")
COMMON_HEADER_SIZE = 8


def decode(api: ApiInfo, buf: Buffer, *, copy: bool = False, allow_longer: bool = False) -> Message:
    """The message in ``buf``: checked against its header, zero-copy when ``buf`` is writable.

    ``allow_longer`` accepts a message longer than this side knows (a peer with a newer minor
    version appends fields); the known prefix is decoded.
    """
    n = len(buf)
    if n < COMMON_HEADER_SIZE:
        raise DlaError(NvError.InvalidSize, f"{api.name} message: {n} bytes is shorter than "
                                            f"the {COMMON_HEADER_SIZE}-byte header")
    size, msg_id, msg_type = _COMMON.unpack_from(buf)
    cls = api.messages.get(msg_id)
    if cls is None:
        raise DlaError(NvError.NotSupported,
                       f"{api.name} {api.version_string}: unknown message id {msg_id}")
    if msg_type != cls.MSG_TYPE:
        raise DlaError(NvError.BadValue,
                       f"{api.name} message {cls.__name__} (id {msg_id}): header type "
                       f"{msg_type}, expected {int(cls.MSG_TYPE)} ({cls.MSG_TYPE.name})")
    expected = cls.SIZE
    if size != expected or size > n:
        if size > n:
            raise DlaError(NvError.InvalidSize,
                           f"{api.name} message {cls.__name__}: header says {size} bytes, "
                           f"buffer holds {n}")
        if not (allow_longer and size > expected):
            raise DlaError(NvError.InvalidSize,
                           f"{api.name} message {cls.__name__}: header says {size} bytes, "
                           f"{api.name} {api.version_string} defines it as {expected}")
    if copy or type(buf) is bytes:
        return cls.from_buffer_copy(buf)
    return cls.from_buffer_checked(buf)


Handler = Callable[[Any], Any]


class Dispatcher:
    """Calls the handler registered for each decoded message's id.

    Usage::

        d = Dispatcher(api.API)
        d.register(api.version_query_cmd, lambda cmd: api.version_query_rsp.answer(cmd))
        reply = d.dispatch(wire_bytes)
    """

    def __init__(self, api: ApiInfo, *, allow_longer: bool = False) -> None:
        self.api = api
        self.allow_longer = allow_longer
        self._handlers: dict[int, Handler] = {}

    def register(self, cls: type[Message], handler: Handler) -> None:
        if self.api.messages.get(getattr(cls, "MSG_ID", -1)) is not cls:
            raise DlaError(NvError.BadParameter,
                           f"{cls.__name__} is not a message of {self.api.name}")
        self._handlers[cls.MSG_ID] = handler

    def on(self, cls: type[Message]) -> Callable[[Handler], Handler]:
        """Decorator form of :meth:`register`."""

        def wrap(handler: Handler) -> Handler:
            self.register(cls, handler)
            return handler

        return wrap

    def dispatch(self, buf: Buffer) -> Any:
        msg = decode(self.api, buf, allow_longer=self.allow_longer)
        handler = self._handlers.get(msg.MSG_ID)
        if handler is None:
            raise DlaError(NvError.NotSupported,
                           f"{self.api.name}: no handler for {type(msg).__name__} (id {msg.MSG_ID})")
        return handler(msg)
