"""Building the shipped SHAVE kernels (C in ``kernels/src``) into the committed ELFs (``kernels/``).

Each ``kernels/src/<name>.c`` is one kernel whose entry point is the function ``<name>``, linked at
WIN_D (code and read-only data) with any read-write data at WIN_E + ARGS_MAX_BYTES; ``runtime.c`` is
the runtime kernel (entry ``runtime_main``), linked at RT_WIN. The linker scripts are written here
from the generated window constants, so the windows have one definition (pydla/deviceapi/specs/
shave.yaml). Builds are reproducible: no debug information, no build id, no compiler ident, stripped.

``tools/build-kernels`` rebuilds them; ``--check`` fails when a committed ELF differs from what its
source builds to (a test does the same).

Usage::

    built = build_all()                    # {name: ELF bytes}; DlaError without the toolchain
    stale_kernels()                        # names whose committed ELF differs
    elf = build_kernel("scale_add.c")      # a kernel author's kernel, built the same way
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pydla.deviceapi
from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError

KERNELS_DIR = Path(__file__).resolve().parent / "kernels"
SOURCE_DIR = KERNELS_DIR / "src"
# The generated headers (pydla/shave.h); not through pydla.deviceapi.generate, which needs the
# codegen extra: reading a shipped kernel (kernel_elf) needs nothing but the package.
INCLUDE_DIR = Path(pydla.deviceapi.__file__).resolve().parent / "include"
RUNTIME = "runtime"
RUNTIME_ENTRY = "runtime_main"
CC_ENV = "PYDLA_RISCV_CC"  # another compiler than riscv64-unknown-elf-gcc
# The note's flags (shared/notes/shave-riscv.md), plus what makes the code window-relative and the
# build reproducible: no small-data / gp-relative addressing, no linker relaxation.
CFLAGS = ["-march=rv32imf", "-mabi=ilp32f", "-O2", "-ffreestanding", "-nostdlib", "-fno-builtin",
          "-msmall-data-limit=0", "-fno-ident", "-g0", "-std=gnu11", "-Wall", "-Wextra", "-Werror"]
LDFLAGS = ["-Wl,--no-relax", "-Wl,--build-id=none", "-s"]
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


def compiler() -> str | None:
    """The RISC-V compiler: $PYDLA_RISCV_CC, else riscv64-unknown-elf-gcc on PATH; None if absent."""
    return os.environ.get(CC_ENV) or shutil.which("riscv64-unknown-elf-gcc")


def sources() -> list[Path]:
    return sorted(SOURCE_DIR.glob("*.c"))


def build(source: Path, cc: str | None = None) -> bytes:
    """The ELF that shipped kernel ``source`` (in kernels/src) builds to."""
    name = source.stem
    entry = RUNTIME_ENTRY if name == RUNTIME else name
    return _link(source, entry, runtime_script() if name == RUNTIME else kernel_script(), (), cc)


def build_kernel(source: str | os.PathLike[str], entry: str | None = None,
                 include_dirs: Sequence[str | os.PathLike[str]] = (), cc: str | None = None) -> bytes:
    """A kernel author's kernel: C ``source`` built as the shipped kernels are (the same flags,
    linked at WIN_D with its RW data at WIN_E + ARGS_MAX_BYTES), entry point ``entry`` (default: the
    function named like the file). The generated header (``#include "pydla/shave.h"``) and the
    shipped kernels' helpers (``memref.h``, ``mathf.h``) are on the include path, after the source's
    own directory; ``include_dirs`` come last. DlaError NotSupported without the toolchain,
    BadValue naming the compiler's output when the build fails.

    Usage: ``elf = build_kernel("scale_add.c")``; the command line: ``pydla kernel build scale_add.c``
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
    return _link(path.resolve(), entry, kernel_script(), (SOURCE_DIR, *extra), cc)


def _link(source: Path, entry: str, script_text: str, include_dirs: Sequence[Path], cc: str | None) -> bytes:
    cc = cc or compiler()
    if cc is None:
        raise DlaError(NvError.NotSupported, "the RISC-V toolchain is not installed: apt-get install "
                                             f"gcc-riscv64-unknown-elf (or set {CC_ENV})")
    name = source.stem
    with tempfile.TemporaryDirectory(prefix="pydla-kernel-") as tmp:
        script = Path(tmp) / "link.ld"
        script.write_text(script_text)
        out = Path(tmp) / f"{name}.elf"
        includes = [arg for d in include_dirs for arg in ("-I", str(d))]
        # Relative source paths and a fixed working directory: nothing of this machine in the ELF.
        argv = [cc, *CFLAGS, "-I", str(INCLUDE_DIR), "-I", ".", *includes, source.name, "-o", str(out),
                f"-Wl,-T,{script}", f"-Wl,-e,{entry}", *LDFLAGS]
        try:
            result = subprocess.run(argv, cwd=source.parent, capture_output=True, text=True)
        except OSError as e:
            raise DlaError(NvError.NotSupported, f"cannot run the RISC-V compiler '{cc}': {e.strerror or e} "
                                                 "(apt-get install gcc-riscv64-unknown-elf)") from None
        output = (result.stderr + result.stdout).strip()
        if result.returncode != 0:
            raise DlaError(NvError.BadValue, f"kernel {name}: the build failed:\n{output}")
        # ld only warns when the entry symbol is missing, and then starts the kernel elsewhere.
        if "cannot find entry symbol" in output:
            raise DlaError(NvError.BadValue, f"kernel {name}: no function '{entry}' to enter (the entry "
                                             "point is the function named like the file; --entry NAME for "
                                             f"another):\n{output}")
        return out.read_bytes()


def build_all(cc: str | None = None) -> dict[str, bytes]:
    return {src.stem: build(src, cc) for src in sources()}


def committed(name: str) -> Path:
    return KERNELS_DIR / f"{name}.elf"


def stale_kernels(cc: str | None = None) -> list[str]:
    """The kernels whose committed ELF is missing or differs from a fresh build."""
    built = build_all(cc)
    return [n for n, data in built.items() if not committed(n).is_file() or committed(n).read_bytes() != data]


def write_all(cc: str | None = None) -> list[str]:
    """Rebuild every kernel; write the ELFs that changed; return their names."""
    written = []
    for name, data in build_all(cc).items():
        path = committed(name)
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
            written.append(name)
    return written


def kernel_elf(name: str) -> bytes:
    """A shipped kernel's committed ELF (``runtime``, ``clamp``, ``softmax``)."""
    path = committed(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in KERNELS_DIR.glob("*.elf")))
        raise DlaError(NvError.BadParameter, f"no shipped SHAVE kernel '{name}' (known: {known})")
    return path.read_bytes()
