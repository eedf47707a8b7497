"""Building SHAVE kernels: the shipped ones (C in ``shipped/src``) into the committed ELFs
(``shipped/``), and a kernel author's (:func:`build_kernel`).

Each ``shipped/src/<name>.c`` is one kernel whose entry point is the function ``<name>``, linked at
WIN_D (code and read-only data) with any read-write data at WIN_E + ARGS_MAX_BYTES; ``runtime.c`` is
the runtime kernel (entry ``runtime_main``), linked at RT_WIN. The linker scripts are written here
from the generated window constants, so the windows have one definition (pydla/deviceapi/specs/
shave.yaml). Builds are reproducible: no debug information, no build id, no compiler ident, stripped.

The compiler is found as :mod:`pydla.kernels.toolchain` says ($PYDLA_RISCV_CC, Debian's
riscv64-unknown-elf-gcc, zig's from the ``ziglang`` package). ``tools/build-kernels`` rebuilds the
shipped kernels with Debian's gcc, the compiler their committed ELFs come from; ``--check`` fails when
a committed ELF differs from what its source builds to (a test does the same).

Usage::

    built = build_all()                    # {name: ELF bytes}; DlaError without the toolchain
    stale_kernels()                        # names whose committed ELF differs (Debian's gcc)
    elf = build_kernel("scale_add.c", output="scale_add.elf")   # a kernel author's kernel
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pydla.deviceapi
from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError
from pydla.kernels.toolchain import (
    CC_ENV,
    CFLAGS,
    GCC,
    GCC_PACKAGE,
    INSTALL_HINT,
    LDFLAGS,
    Toolchain,
    find_toolchain,
    reference_toolchain,
    toolchain_of,
)

__all__ = ["CC_ENV", "CFLAGS", "GCC", "GCC_PACKAGE", "INSTALL_HINT", "LDFLAGS", "Toolchain", "build",
           "build_all", "build_kernel", "compiler", "kernel_elf", "reference_toolchain", "runtime_elf",
           "stale_kernels", "write_all", "write_atomically"]

KERNELS_DIR = Path(__file__).resolve().parent / "shipped"
SOURCE_DIR = KERNELS_DIR / "src"
# The generated headers (pydla/shave.h); not through pydla.deviceapi.generate, which needs the
# codegen extra: reading a shipped kernel (kernel_elf) needs nothing but the package.
INCLUDE_DIR = Path(pydla.deviceapi.__file__).resolve().parent / "include"
RUNTIME = "runtime"
RUNTIME_ENTRY = "runtime_main"
Compiler = Toolchain | str | None  # a toolchain, a compiler command, or None: find one
COMPILE_TIMEOUT_S = 120
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_DISCARD = "  /DISCARD/ : { *(.comment) *(.note*) *(.riscv.attributes) *(.eh_frame*) }\n"


def kernel_script() -> str:
    """A kernel: code and read-only data in WIN_D, read-write data after the arguments in WIN_E."""
    return (f"SECTIONS {{\n  . = {S.WIN_D:#x};\n  .text : {{ *(.text .text.*) }}\n"
            "  .rodata : { *(.rodata .rodata.* .srodata .srodata.*) }\n"
            f"  . = {S.WIN_E + S.ARGS_MAX_BYTES:#x};\n"
            "  .data : { *(.data .data.* .sdata .sdata.*) }\n"
            "  .bss : { *(.bss .bss.* .sbss .sbss.* COMMON) }\n" + _DISCARD + "}\n")


def runtime_script() -> str:
    """The runtime kernel: everything in RT_WIN."""
    return (f"SECTIONS {{\n  . = {S.RT_WIN:#x};\n  .text : {{ *(.text .text.*) }}\n"
            "  .rodata : { *(.rodata .rodata.* .srodata .srodata.*) }\n"
            "  .data : { *(.data .data.* .sdata .sdata.*) }\n"
            "  .bss : { *(.bss .bss.* .sbss .sbss.* COMMON) }\n" + _DISCARD + "}\n")


def compiler() -> Toolchain | None:
    """The RISC-V compiler kernels are built with: $PYDLA_RISCV_CC, else riscv64-unknown-elf-gcc on
    PATH, else zig's from the ``ziglang`` package; None when there is none."""
    return find_toolchain()


def sources() -> list[Path]:
    return sorted(SOURCE_DIR.glob("*.c"))


def build(source: Path, cc: Compiler = None) -> bytes:
    """The ELF that shipped kernel ``source`` (in shipped/src) builds to."""
    name = source.stem
    entry = RUNTIME_ENTRY if name == RUNTIME else name
    return _link(source, entry, runtime_script() if name == RUNTIME else kernel_script(), (), cc)


def build_kernel(source: str | os.PathLike[str], entry: str | None = None,
                 include_dirs: Sequence[str | os.PathLike[str]] = (), cc: Compiler = None,
                 output: str | os.PathLike[str] | None = None) -> bytes:
    """A kernel author's kernel: C ``source`` built as the shipped kernels are (the same flags,
    linked at WIN_D with its RW data at WIN_E + ARGS_MAX_BYTES), entry point ``entry`` (default: the
    function named like the file). The generated header (``#include "pydla/shave.h"``) and the
    shipped kernels' helpers (``memref.h``, ``mathf.h``) are on the include path, after the source's
    own directory; ``include_dirs`` come last. ``cc``: a compiler command or toolchain (default: found
    as :func:`compiler` says). ``output``: a file the ELF is also written to, whole or not at all
    (nothing is left there when the build fails). Returns the ELF's bytes. DlaError NotSupported
    without a compiler, BadValue naming the compiler's output when the build fails.

    Usage: ``elf = build_kernel("scale_add.c", output="scale_add.elf")``; the command line:
    ``pydla kernel build scale_add.c``
    """
    path = Path(source)
    if path.suffix != ".c":
        raise DlaError(NvError.BadParameter, f"kernel source '{path}': a C file (.c) is expected")
    if not path.is_file():
        raise DlaError(NvError.FileNotFound, f"kernel source '{path}': no such file")
    entry = path.stem if entry is None else entry
    if not _IDENTIFIER.fullmatch(entry):
        raise DlaError(NvError.BadParameter, f"kernel entry '{entry}' is not a C identifier"
                                             + (" (give the entry function's name: --entry NAME)"
                                                if entry == path.stem else ""))
    extra: list[Path] = []
    for d in include_dirs:
        if not Path(d).is_dir():
            raise DlaError(NvError.FileNotFound, f"include directory '{d}': no such directory")
        extra.append(Path(d).resolve())
    elf = _link(path.resolve(), entry, kernel_script(), (SOURCE_DIR, *extra), cc)
    if output is not None:
        write_atomically(Path(output), elf, "the kernel")
    return elf


def write_atomically(path: Path, data: bytes, what: str = "the file") -> None:
    """``data`` written to ``path`` through a temporary file beside it, renamed over it: a reader
    never sees half of it, and a failure leaves no partial file. DlaError FileWriteFailed naming
    ``path`` otherwise.

    Usage: ``write_atomically(Path("k.elf"), elf, "the kernel")``
    """
    tmp: Path | None = None
    try:
        # Created as open(2) creates any file (mode 0666 less the umask), under a name no one else uses.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise DlaError(NvError.FileWriteFailed, f"{path}: cannot write {what}: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _toolchain(cc: Compiler) -> Toolchain:
    if isinstance(cc, Toolchain):
        return cc
    found = toolchain_of(cc, "argument") if cc else compiler()
    if found is None:
        raise DlaError(NvError.NotSupported, f"no RISC-V C compiler to build SHAVE kernels: {INSTALL_HINT}")
    return found


def _link(source: Path, entry: str, script_text: str, include_dirs: Sequence[Path], cc: Compiler) -> bytes:
    tc = _toolchain(cc)
    name = source.stem
    with tempfile.TemporaryDirectory(prefix="pydla-kernel-") as tmp:
        script = Path(tmp) / "link.ld"
        script.write_text(script_text)
        out = Path(tmp) / f"{name}.elf"
        includes = [arg for d in include_dirs for arg in ("-I", str(d))]
        # Relative source paths and a fixed working directory: nothing of this machine in the ELF.
        argv = [*tc.command, *tc.cflags(), "-I", str(INCLUDE_DIR), "-I", ".", *includes, source.name, "-o",
                str(out), f"-Wl,-T,{script}", f"-Wl,-e,{entry}", *tc.ldflags()]
        try:
            result = subprocess.run(argv, cwd=source.parent, capture_output=True, text=True,
                                    env=tc.environment(Path(tmp)), timeout=COMPILE_TIMEOUT_S)
        except OSError as e:
            raise DlaError(NvError.NotSupported, f"cannot run the RISC-V compiler '{tc.name}': "
                                                 f"{e.strerror or e} ({INSTALL_HINT})") from None
        except subprocess.TimeoutExpired:
            raise DlaError(NvError.Timeout, f"kernel {name}: the compiler '{tc.name}' did not finish in "
                                            f"{COMPILE_TIMEOUT_S} s") from None
        output = (result.stderr + result.stdout).strip()
        if result.returncode != 0:
            raise DlaError(NvError.BadValue, f"kernel {name}: the build failed:\n{output}")
        # The linker only warns when the entry symbol is missing, and then starts the kernel elsewhere.
        if "cannot find entry symbol" in output:
            raise DlaError(NvError.BadValue, f"kernel {name}: no function '{entry}' to enter (the entry "
                                             "point is the function named like the file; --entry NAME for "
                                             f"another):\n{output}")
        return out.read_bytes()


def build_all(cc: Compiler = None) -> dict[str, bytes]:
    return {src.stem: build(src, cc) for src in sources()}


def committed(name: str) -> Path:
    return KERNELS_DIR / f"{name}.elf"


def _reference(cc: Compiler) -> Toolchain:
    """The compiler that checks or rewrites the committed ELFs: Debian's gcc unless one is given."""
    if cc is not None:
        return _toolchain(cc)
    tc = reference_toolchain()
    if tc is None:
        raise DlaError(NvError.NotSupported,
                       f"the shipped kernels' committed ELFs are what Debian's {GCC} builds (zig's compiler "
                       f"makes other bytes): apt-get install {GCC_PACKAGE}, or set ${CC_ENV} to that gcc")
    return tc


def stale_kernels(cc: Compiler = None) -> list[str]:
    """The kernels whose committed ELF is missing or differs from a fresh build (by Debian's gcc,
    unless ``cc`` says otherwise)."""
    built = build_all(_reference(cc))
    return [n for n, data in built.items() if not committed(n).is_file() or committed(n).read_bytes() != data]


def write_all(cc: Compiler = None) -> list[str]:
    """Rebuild every kernel (with Debian's gcc, unless ``cc`` says otherwise); write the ELFs that
    changed; return their names."""
    written = []
    for name, data in build_all(_reference(cc)).items():
        path = committed(name)
        if not path.is_file() or path.read_bytes() != data:
            write_atomically(path, data, "the kernel")
            written.append(name)
    return written


def kernel_elf(name: str) -> bytes:
    """A shipped kernel's committed ELF (``runtime``, ``clamp``, ``softmax``)."""
    path = committed(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in KERNELS_DIR.glob("*.elf")))
        raise DlaError(NvError.BadParameter, f"no shipped SHAVE kernel '{name}' (known: {known})")
    return path.read_bytes()


def runtime_elf() -> bytes:
    """pydla's runtime kernel (the ELF each tile runs to take tasks from its FIFO)."""
    return kernel_elf(RUNTIME)
