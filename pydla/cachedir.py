"""Where pydla keeps what it can rebuild, and what it keeps there.

``PYDLA_CACHE_DIR``, else ``$XDG_CACHE_HOME/pydla``, else ``~/.cache/pydla``. It holds:

- compiled models: ``<sha256>.dla``, the loadable of an ONNX model that ``pydla.Session`` (and so
  ``pydla run``, ``pydla.InferenceSession``) compiled, keyed by the model's bytes, its external
  data, its kernels, the configuration, the precision, the input shapes and pydla's compiler
  (``pydla.session``); an unchanged model is not compiled again;
- the BLAS copy: ``blas/``, numpy's OpenBLAS copied once so that the virtual device's CONV can load
  it a second time for this CPU's own kernels (``pydla.hw.blas``);
- unfinished writes: ``*.tmp`` files of a write that was interrupted.

Anything else there is not pydla's, and :func:`clear` leaves it alone. Everything pydla keeps there
is made again when needed (``pydla cache clear`` costs a compile the next time a model is opened).

Usage::

    path = cache_dir() / "model.dla"
    for kind in contents().kinds: print(kind.name, len(kind.files), kind.size)
    removed = clear()                                   # what was removed
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

ENV = "PYDLA_CACHE_DIR"
MODELS = "compiled models"
BLAS = "BLAS copy"
UNFINISHED = "unfinished writes"
OTHER = "not pydla's"
BLAS_DIR = "blas"
_MODEL = re.compile(r"[0-9a-f]{64}\.dla")
_MODEL_TMP = re.compile(r"[0-9a-f]{64}\.\d+\.tmp")  # pydla.session's write in progress


def cache_dir() -> Path:
    """The user's pydla cache directory (not created here)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "pydla"


def chosen_by() -> str:
    """Which setting chose :func:`cache_dir`: ``$PYDLA_CACHE_DIR``, ``$XDG_CACHE_HOME`` or the default."""
    if os.environ.get(ENV):
        return f"${ENV}"
    return "$XDG_CACHE_HOME" if os.environ.get("XDG_CACHE_HOME") else "the default, ~/.cache/pydla"


@dataclass
class Kind:
    """The files of one kind: their paths and their total size in bytes."""

    name: str
    files: list[Path] = field(default_factory=list)
    size: int = 0


@dataclass
class Contents:
    """What the cache directory holds, by kind (in a fixed order, empty kinds included), and what
    else is there (``other``: not pydla's)."""

    root: Path
    exists: bool
    kinds: list[Kind]
    other: Kind

    @property
    def files(self) -> int:
        return sum(len(k.files) for k in self.kinds)

    @property
    def size(self) -> int:
        return sum(k.size for k in self.kinds)


def _kind_of(root: Path, path: Path) -> str:
    relative = path.relative_to(root).parts
    if len(relative) == 1:
        name = relative[0]
        return MODELS if _MODEL.fullmatch(name) else UNFINISHED if _MODEL_TMP.fullmatch(name) else OTHER
    if relative[0] == BLAS_DIR and len(relative) == 2:
        # pydla.hw.blas: the copy, named as numpy's library, and ".NAME.PID.tmp" while it is made.
        return UNFINISHED if relative[1].startswith(".") and relative[1].endswith(".tmp") else BLAS
    return OTHER


def contents(root: Path | None = None) -> Contents:
    """What ``root`` (default: :func:`cache_dir`) holds, by kind. Symbolic links are counted as
    files of their own size and never followed.

    Usage: ``c = contents(); print(c.root, c.files, c.size)``
    """
    root = cache_dir() if root is None else root
    kinds = {name: Kind(name) for name in (MODELS, BLAS, UNFINISHED)}
    other = Kind(OTHER)
    exists = root.is_dir()
    if exists:
        for folder, dirs, names in os.walk(root, onerror=None, followlinks=False):
            dirs.sort()
            for name in sorted(names):
                path = Path(folder) / name
                try:
                    size = path.lstat().st_size
                except OSError:  # removed meanwhile (another process's write finished)
                    continue
                kind = kinds.get(_kind_of(root, path), other)
                kind.files.append(path)
                kind.size += size
    return Contents(root, exists, list(kinds.values()), other)


def clear(root: Path | None = None) -> Kind:
    """Remove every file of pydla's kinds from ``root`` (default: :func:`cache_dir`), and ``blas/``
    once empty; leave anything else (a directory given by mistake loses nothing that is not
    pydla's). Returns what was removed (a file another process removed meanwhile is not counted);
    OSError when a file cannot be removed.

    Usage: ``removed = clear(); print(len(removed.files), removed.size)``
    """
    found = contents(root)
    removed = Kind("removed")
    for kind in found.kinds:
        for path in kind.files:
            try:
                size = path.lstat().st_size
                path.unlink()
            except FileNotFoundError:
                continue
            removed.files.append(path)
            removed.size += size
    blas = found.root / BLAS_DIR
    if blas.is_dir() and not blas.is_symlink():
        with contextlib.suppress(OSError):  # only when empty: what is not pydla's stays, with its folder
            blas.rmdir()
    return removed
