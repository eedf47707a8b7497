"""A run recipe on its own (XRT's recipe.json): the JSON names external files, relative to its
own directory, instead of carrying them as a loadable does:

- a kernel's ``ctrlcode`` is a control-code ELF file (:mod:`pydla.elf.controlcode`);
- a buffer's ``file`` gives its initial contents (weights, or any created buffer's start value); a
  buffer without a ``size`` takes the file's size, and a file larger than ``size`` is refused. A
  buffer with a size or a file is created by the runner whatever its type; binding one replaces it.

File paths are relative and may not contain ``..`` unless the caller allows it, and what they name
(symbolic links followed) must lie inside the recipe's directory, so a recipe cannot reach outside it.
A path holding a character no file name can (a NUL byte, a lone surrogate from a JSON escape) or a
control character is refused as such, never handed to the operating system. Only regular files are
read (never a FIFO or a device, which could block or never end). Every file is read once, when the
recipe is opened.

Usage::

    source = RecipeFile("build/recipe.json")
    runner = Runner(rt, source)          # or simply Runner(rt, "build/recipe.json")
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from pydla.elf.controlcode import ControlCode
from pydla.errors import DlaError, NvError
from pydla.loadable.recipe import Recipe, load_recipe
from pydla.logconfig import printable

MAX_FILE_BYTES = 1 << 32


class RecipeFile:
    """A checked standalone recipe and the files it names; offers what the runner needs of a loadable."""

    def __init__(self, path: str | Path, *, allow_unsafe_paths: bool = False) -> None:
        self.path = Path(path)
        self.source = printable(str(self.path))
        check_path_text(str(self.path), "the recipe's path")
        self.allow_unsafe_paths = allow_unsafe_paths
        # The device configuration is not loaded here: the runner opens recipes too, and it learns
        # its device through its port (``check_device``), never from pydla.hw's configuration.
        self.recipe: Recipe = load_recipe(self.path, allow_unsafe_paths=allow_unsafe_paths,
                                          check_config=False)
        self._controls = {name: ControlCode(self._read(k.ctrlcode, f"kernel '{name}' ctrlcode"),
                                            f"{self.source}: kernel '{name}' ({k.ctrlcode})")
                          for name, k in self.recipe.kernels.items()}
        self._files: dict[str, bytes] = {}
        for name, buf in self.recipe.buffers.items():
            if buf.file is None:
                continue
            data = self._read(buf.file, f"buffer '{name}' file")
            if buf.size is None and not data:
                raise DlaError(NvError.InvalidSize, f"{self.source}: buffer '{name}': file '{buf.file}' is "
                                                    "empty and no size is given")
            if buf.size is not None and len(data) > buf.size:
                raise DlaError(NvError.InvalidSize,
                               f"{self.source}: buffer '{name}': file '{buf.file}' holds {len(data)} bytes, "
                               f"more than its size {buf.size}")
            self._files[name] = data

    def _read(self, relative: str, what: str) -> bytes:
        real = resolve_file(self.path, relative, what, allow_unsafe_paths=self.allow_unsafe_paths)
        try:
            return real.read_bytes()
        except OSError as e:
            raise DlaError(NvError.FileReadFailed,
                           f"{self.source}: {what} '{printable(relative)}': {e.strerror}") from e

    # -- what the runner asks of a recipe source ----------------------------------------------------

    def control_code(self, kernel: str) -> ControlCode:
        if kernel not in self._controls:
            raise DlaError(NvError.BadParameter, f"{self.source}: no kernel '{kernel}'")
        return self._controls[kernel]

    def created_size(self, name: str) -> int | None:
        """Bytes of a buffer the runner creates (one with a size or a file, whatever its type, as
        XRT's runner does), or None for one the application binds."""
        buf = self.recipe.buffers[name]
        if buf.size is not None:
            return buf.size
        return len(self._files[name]) if name in self._files else None

    def initial_contents(self, name: str) -> bytes | memoryview | None:
        return self._files.get(name)

    def external_size(self, name: str) -> int | None:
        """Bytes a bound buffer must have at least (unknown for a standalone recipe: the arguments'
        sizes and offsets are checked against the bound memory instead)."""
        return None

    def check_device(self, config: Any) -> None:
        """The device the runner runs on (a port's NvDlaDeviceInfo) is the one the header names and
        has what the recipe uses; DlaError NotSupported naming what differs."""
        from pydla.loadable.container import check_blocks, check_instances
        from pydla.loadable.recipe_config import check_header_device

        check_header_device(self.recipe, self.path, config, allow_unsafe_paths=self.allow_unsafe_paths)
        check_blocks(self._controls.values(), config, self.source)
        check_instances(self.recipe.kernels.values(), config, self.source)


def resolve_file(recipe: Path, relative: str, what: str, *, allow_unsafe_paths: bool = False) -> Path:
    """The regular file ``relative`` names next to ``recipe`` (a recipe file's path), checked: a
    path the system can hold, no absolute path or '..', nothing outside the recipe's directory
    (symbolic links followed), at most MAX_FILE_BYTES, unless ``allow_unsafe_paths``. DlaError
    naming ``what`` otherwise."""
    source = printable(str(recipe))
    shown = printable(relative)
    check_path_text(relative, f"{source}: {what}")
    p = PurePosixPath(relative.replace("\\", "/"))
    if not allow_unsafe_paths and (p.is_absolute() or ".." in p.parts):
        raise DlaError(NvError.BadParameter, f"{source}: {what} '{shown}': absolute paths and "
                                             "'..' are not allowed (paths are relative to the recipe)")
    full = Path(relative) if p.is_absolute() else recipe.parent / Path(*p.parts)
    try:
        real = full.resolve(strict=True)
        if not allow_unsafe_paths and not real.is_relative_to(recipe.parent.resolve()):
            raise DlaError(NvError.BadParameter,
                           f"{source}: {what} '{shown}' leads to {printable(str(real))}, outside the "
                           "recipe's directory (a symbolic link)")
        if not real.is_file():
            raise DlaError(NvError.BadParameter, f"{source}: {what} '{shown}' is not a regular file")
        size = real.stat().st_size
    except FileNotFoundError:
        raise DlaError(NvError.FileNotFound, f"{source}: {what} '{shown}' not found "
                                             f"(looked for {printable(str(full))})") from None
    except OSError as e:
        raise DlaError(NvError.FileReadFailed, f"{source}: {what} '{shown}': {e.strerror}") from e
    if size > MAX_FILE_BYTES:
        raise DlaError(NvError.InvalidSize, f"{source}: {what} '{shown}' has {size} bytes "
                                            f"(at most {MAX_FILE_BYTES})")
    return real


def check_path_text(path: str, what: str) -> None:
    """DlaError BadParameter when ``path`` holds what no file name can (a NUL byte; a lone
    surrogate, which the file system's encoding refuses) or a control character (a newline, an
    escape sequence: a recipe's file names are plain text); the operating system would otherwise
    raise ValueError."""
    bad = next((c for c in path if c == "\0" or not c.isprintable() or "\ud800" <= c <= "\udfff"), None)
    if bad is not None:
        kind = "a NUL byte" if bad == "\0" else "a lone surrogate" if "\ud800" <= bad <= "\udfff" else \
            f"the unprintable character {printable(bad)}"
        raise DlaError(NvError.BadParameter, f"{what} '{printable(path)}' holds {kind}: not a file name")
