"""A file that looks like an ONNX model, judged by its content where a loadable was wanted: ``pydla
info`` and ``pydla validate`` (on the loadable side, which imports nothing of the compiler) are
handed this check by the command line. Imports nothing of onnx until a file needs parsing.

Usage: ``check_onnx_content(Path("model.onnx"))``  (DlaError: empty, does not parse, or compile it)
"""

from __future__ import annotations

from pathlib import Path

from pydla.errors import file_error

# An ONNX model larger than this is taken for one by its name and first bytes (parsing it whole only
# to say "compile it" would take seconds).
ONNX_CONTENT_CHECK_BYTES = 256 << 20


def check_onnx_content(path: Path, wanted: str = "a loadable") -> None:
    """A file that is no ELF file but looks like an ONNX model (its name, or its first bytes) is
    judged by its content: DlaError saying it is empty, or does not parse as ONNX (a truncated
    download, say), worded as ``pydla compile`` and ``pydla run`` word it; for a whole model the
    error that says to compile it. Without the onnx extra (or for a very large file) its name and
    first bytes decide, as :func:`pydla.loadable.sections.check_is_loadable` does."""
    from pydla.elf.reader import ELF_MAGIC
    from pydla.loadable.sections import is_onnx, not_a_loadable, read_head

    head = read_head(path)
    if head[:4] == ELF_MAGIC or not (is_onnx(path, head) or not head):
        return
    try:
        from pydla.compiler.onnx_model import parse_model
    except ImportError:
        return
    try:
        size = path.stat().st_size
        data = path.read_bytes() if size <= ONNX_CONTENT_CHECK_BYTES else None
    except OSError as e:
        raise file_error(path, e) from e
    if data is not None:
        parse_model(data, str(path))  # DlaError: what is wrong with it
    error = not_a_loadable(path, head, wanted)
    if error is not None:
        raise error
