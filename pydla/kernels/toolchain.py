"""The RISC-V C compiler that builds SHAVE kernels, found in this order:

1. ``$PYDLA_RISCV_CC``: a compiler command given with gcc's flags (with zig's when it names zig,
   as ``zig cc`` or ``python -m ziglang cc`` do);
2. ``riscv64-unknown-elf-gcc`` on PATH (Debian's ``gcc-riscv64-unknown-elf``), the compiler the
   shipped kernels' committed ELFs come from (:func:`reference_toolchain`);
3. zig's C compiler from the ``ziglang`` package of PyPI (``pip install 'pydla[kernels]'``, part of
   ``dev``), which needs nothing from apt.

Both build freestanding RV32IMF code for the ilp32f ABI with the same options; only the spelling of
the target differs (gcc's ``-march=rv32imf``, zig's ``-target riscv32-freestanding-none
-mcpu=generic_rv32+m+f``) and of "no linker relaxation" (``-Wl,--no-relax``, zig's ``-mno-relax``).
Each builds the same source to the same bytes every time, but gcc's bytes are not zig's.

Usage::

    tc = find_toolchain()          # None when there is none: INSTALL_HINT says what to do
    print(tc.name)                 # "riscv64-unknown-elf-gcc" or "zig cc (ziglang 0.17.1)"
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

CC_ENV = "PYDLA_RISCV_CC"
GCC = "riscv64-unknown-elf-gcc"
GCC_PACKAGE = "gcc-riscv64-unknown-elf"  # Debian's
ZIGLANG = "ziglang"  # the PyPI package with zig's compiler
INSTALL_HINT = (f"pip install 'pydla[kernels]' (zig's C compiler from PyPI), apt-get install {GCC_PACKAGE} "
                f"(Debian's {GCC}), or set ${CC_ENV} to a RISC-V C compiler")

# The options of the shipped kernels (shared/notes: freestanding RV32IMF), plus what makes the code
# window-relative and the build reproducible: no small-data / gp-relative addressing, no ident.
_GCC_TARGET = ["-march=rv32imf", "-mabi=ilp32f"]
_ZIG_TARGET = ["-target", "riscv32-freestanding-none", "-mcpu=generic_rv32+m+f", "-mabi=ilp32f"]
_OPTIONS = ["-O2", "-ffreestanding", "-nostdlib", "-fno-builtin", "-msmall-data-limit=0", "-fno-ident", "-g0",
            "-std=gnu11", "-Wall", "-Wextra", "-Werror"]
_LINK = ["-Wl,--build-id=none", "-s"]
CFLAGS = [*_GCC_TARGET, *_OPTIONS]  # gcc's, as `pydla kernel build --help` shows them
LDFLAGS = ["-Wl,--no-relax", *_LINK]


@dataclass(frozen=True)
class Toolchain:
    """A RISC-V C compiler: the command that runs it, whose options it takes (``gcc`` or ``zig``) and
    where it was found (``$PYDLA_RISCV_CC``, ``PATH`` or ``ziglang``)."""

    command: tuple[str, ...]
    kind: str
    origin: str

    @property
    def name(self) -> str:
        """What messages call it."""
        if self.origin == ZIGLANG:
            return f"zig cc ({ZIGLANG} {_ziglang_version()})"
        return " ".join(self.command)

    def cflags(self) -> list[str]:
        return [*(_ZIG_TARGET if self.kind == "zig" else _GCC_TARGET), *_OPTIONS]

    def ldflags(self) -> list[str]:
        return ["-mno-relax" if self.kind == "zig" else "-Wl,--no-relax", *_LINK]

    def environment(self, scratch: Path) -> dict[str, str] | None:
        """The compiler's environment: zig keeps its caches in ``scratch`` (the build's own temporary
        directory), so a build leaves nothing behind in ~/.cache/zig; gcc's is the caller's."""
        if self.kind != "zig":
            return None
        return {**os.environ, "ZIG_GLOBAL_CACHE_DIR": str(scratch / "zig-cache"),
                "ZIG_LOCAL_CACHE_DIR": str(scratch / "zig-cache")}


def toolchain_of(command: str, origin: str = CC_ENV) -> Toolchain:
    """The toolchain a command names (``riscv64-unknown-elf-gcc``, ``/opt/x/bin/gcc``, ``zig cc``,
    ``python -m ziglang cc``): zig's options when one of its words is zig or ziglang.

    Usage: ``toolchain_of("zig cc").kind  # "zig"``
    """
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = words or [command]
    names = [Path(w).name.lower() for w in words]
    zig = any(n in ("zig", "zig.exe", ZIGLANG) for n in names)
    if zig and names[-1] in ("zig", "zig.exe", ZIGLANG):
        words.append("cc")  # the zig binary itself: its C compiler is `zig cc`
    return Toolchain(tuple(words), "zig" if zig else "gcc", origin)


def ziglang_toolchain() -> Toolchain | None:
    """zig's C compiler from the ``ziglang`` package, when it is installed."""
    try:
        spec = importlib.util.find_spec(ZIGLANG)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    binary = Path(spec.origin).parent / ("zig.exe" if os.name == "nt" else "zig")
    if not binary.is_file():
        return None
    return Toolchain((str(binary), "cc"), "zig", ZIGLANG)


def _ziglang_version() -> str:
    try:
        return importlib.metadata.version(ZIGLANG)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def find_toolchain() -> Toolchain | None:
    """$PYDLA_RISCV_CC, else riscv64-unknown-elf-gcc on PATH, else zig's from the ziglang package;
    None when there is none of them."""
    env = os.environ.get(CC_ENV, "").strip()
    if env:
        return toolchain_of(env)
    gcc = shutil.which(GCC)
    if gcc:
        return Toolchain((gcc,), "gcc", "PATH")
    return ziglang_toolchain()


def reference_toolchain() -> Toolchain | None:
    """The compiler the shipped kernels' committed ELFs were built with, Debian's gcc
    ($PYDLA_RISCV_CC when it names a gcc, else riscv64-unknown-elf-gcc on PATH); None without it:
    zig builds the same sources to other bytes, so it cannot check them."""
    env = os.environ.get(CC_ENV, "").strip()
    if env and toolchain_of(env).kind == "gcc":
        return toolchain_of(env)
    gcc = shutil.which(GCC)
    return Toolchain((gcc,), "gcc", "PATH") if gcc else None
