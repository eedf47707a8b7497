"""The files a user names: whether an output can be written (checked before any work is done, and
never onto one of the command's inputs), and what a file is when it is not what a command takes, so
that the message says what it is and what to do with it.

One wording per problem, for every command and API (a file that cannot be read or written at all:
:func:`pydla.errors.file_error`):

- an output that cannot be written: "FLAG PATH: the directory DIR does not exist", "...: a
  directory, not a file", "...: cannot write: permission denied" (FileWriteFailed);
- an output that is an input: "FLAG PATH: that is the model being run; choose another file"
  (BadParameter);
- a file of another kind: "PATH is a .npy array, not a loadable: it is an input: ..." (BadParameter),
  "PATH: the file is empty (0 bytes), not a loadable" (BadValue).

Usage::

    check_output(args.trace, "--trace", {"the model being run": args.model})
    error = wrong_kind(path, read_head(path), "a trace ring")
    if error is not None:
        raise error
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydla.errors import DlaError, NvError, file_error

ELF_MAGIC = b"\x7fELF"
TRACE_RING_MAGIC = b"PYDLATRC"  # pydla.deviceapi.trace: the ring header's magic, little-endian
NPY_MAGIC = b"\x93NUMPY"
EM_RISCV = 243
HEAD_BYTES = 64

# Field tags (field number << 3 | wire type) a serialized onnx.ModelProto starts with after its
# ir_version (field 1, varint: 0x08): producer_name, producer_version, domain, model_version,
# doc_string, graph, opset_import, metadata_props, training_info, functions.
_ONNX_NEXT_TAGS = {0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0x7A, 0x82}

ONNX = "an ONNX model"
LOADABLE = "a pydla loadable"
SHAVE_KERNEL = "a SHAVE kernel ELF"
ELF = "an ELF file"
TRACE_RING = "a device trace ring"
NPY = "a .npy array"
NPZ = "a .npz archive"
CHROME_TRACE = "a Perfetto / Chrome trace (JSON)"
JSON = "JSON (a run recipe?)"


def read_head(path: str | os.PathLike[str], size: int = HEAD_BYTES, *, flag: str | None = None) -> bytes:
    """The first ``size`` bytes of ``path``; DlaError (:func:`file_error`) when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError as e:
        raise file_error(path, e, flag=flag) from e


def looks_like_onnx(head: bytes) -> bool:
    """Whether ``head`` can start a serialized onnx.ModelProto (ir_version, then a known field)."""
    return len(head) >= 3 and head[0] == 0x08 and 0 < head[1] < 0x80 and head[2] in _ONNX_NEXT_TAGS


def kind_of(head: bytes, path: str | os.PathLike[str] | None = None) -> str | None:
    """What a file is, from its first bytes (at least :data:`HEAD_BYTES` of them when it has that
    many): one of this module's kinds, or None when pydla does not recognize it. A 64-bit ELF file
    is taken for a loadable (the loadable's own checks say more); an ONNX model is also known by
    its name."""
    if head[:4] == ELF_MAGIC:
        if len(head) >= 20 and head[4] == 1 and int.from_bytes(head[18:20], "little") == EM_RISCV:
            return SHAVE_KERNEL
        return LOADABLE if len(head) > 5 and head[4] == 2 and head[5] == 1 else ELF
    if head[:len(TRACE_RING_MAGIC)] == TRACE_RING_MAGIC:
        return TRACE_RING
    if head[:len(NPY_MAGIC)] == NPY_MAGIC:
        return NPY
    if head[:4] == b"PK\x03\x04":
        return NPZ
    text = head.lstrip()
    if text[:1] == b"{":
        return CHROME_TRACE if text[1:].lstrip().startswith(b'"traceEvents"') else JSON
    if looks_like_onnx(head) or (path is not None and Path(path).suffix.lower() == ".onnx" and head):
        return ONNX
    return None


# What a file of each kind is for; {path} is the file (or a placeholder for data without one).
_USES = {
    ONNX: "compile it with `pydla compile {path} -o {dla}`, or run it with `pydla run {path}` or "
          "pydla.Session('{path}'), which compile it",
    LOADABLE: "run it with `pydla run {path}`; `pydla info {path}` describes it",
    SHAVE_KERNEL: "run it on arrays with pydla.ShaveKernel('{path}'), or from a model as a custom operator "
                  "(docs/guide/kernel-authors.md)",
    ELF: "pydla reads 64-bit little-endian loadables and 32-bit RISC-V SHAVE kernels",
    TRACE_RING: "show it with `pydla trace {path}`",
    NPY: "it is a tensor: give it to a model with `pydla run MODEL --input NAME={path}`",
    NPZ: "save each tensor with numpy.save for `pydla run --input NAME=FILE.npy`",
    CHROME_TRACE: "open it at https://ui.perfetto.dev",
    JSON: "check a run recipe with `pydla validate {path}`",
}
_PLACEHOLDERS = {ONNX: "MODEL.onnx", LOADABLE: "MODEL.dla", SHAVE_KERNEL: "KERNEL.elf", TRACE_RING: "RING",
                 NPY: "FILE.npy", JSON: "RECIPE.json"}


def use_of(kind: str, path: str | os.PathLike[str] | None = None) -> str:
    """What to do with a file of ``kind`` (one of this module's kinds) at ``path`` (None: data that
    is no file; the command then shows a placeholder)."""
    shown = str(path) if path is not None else _PLACEHOLDERS.get(kind, "FILE")
    return _USES[kind].format(path=shown, dla=Path(shown).with_suffix(".dla"))


def wrong_kind(head: bytes, wanted: str, *, path: str | os.PathLike[str] | None = None,
               label: str | None = None, accept: tuple[str, ...] = ()) -> DlaError | None:
    """The error for a file (or data) that is not ``wanted`` (e.g. "a loadable"), saying what it is
    and what to do with it; None when it is of a kind in ``accept`` or of no kind pydla knows (the
    reader's own checks then speak). ``head`` is its first bytes; ``path`` the file (its name also
    tells an ONNX model); ``label`` what the message calls it (default: the path, else "the data
    given").

    Usage: ``error = wrong_kind(read_head(p), "a trace ring", path=p, accept=(TRACE_RING,))``
    """
    name = label or (str(path) if path is not None else "the data given")
    if not head:
        return DlaError(NvError.BadValue, f"{name}: the file is empty (0 bytes), not {wanted}")
    kind = kind_of(head, path)
    if kind is None or kind in accept:
        return None
    return DlaError(NvError.BadParameter, f"{name} is {kind}, not {wanted}: {use_of(kind, path)}")


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file (a link, a hard link, another spelling of the same path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): compare where they would be
        return Path(a).resolve() == Path(b).resolve()


def check_output(path: str | os.PathLike[str], flag: str | None = None,
                 inputs: Mapping[str, str | os.PathLike[str] | None] | None = None) -> None:
    """That ``path`` can be written, before any work (a long run should not fail at its end, and a
    user's file is never overwritten by mistake): it is none of ``inputs`` ({what it is: its path},
    e.g. {"the model being run": model}), its directory exists and is writable, and it is not a
    directory. ``flag`` is the option that named it (``--trace``, ``-o``)."""
    label = f"{flag} {path}" if flag else str(path)
    for what, given in (inputs or {}).items():
        if given is not None and not isinstance(given, (bytes, bytearray, memoryview)) and \
                isinstance(given, (str, os.PathLike)) and same_file(path, given):
            raise DlaError(NvError.BadParameter, f"{label}: that is {what}; choose another file")
    out = Path(path)
    directory = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise DlaError(NvError.FileWriteFailed, f"{label}: a directory, not a file")
    if not directory.is_dir():
        why = "is not a directory" if directory.exists() else "does not exist"
        raise DlaError(NvError.FileWriteFailed, f"{label}: the directory {directory} {why}")
    if not os.access(directory, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise DlaError(NvError.FileWriteFailed, f"{label}: cannot write: permission denied")
