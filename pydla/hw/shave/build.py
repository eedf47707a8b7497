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
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
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
    """The ELF that ``source`` builds to."""
    cc = cc or compiler()
    if cc is None:
        raise DlaError(NvError.NotSupported, "the RISC-V toolchain is not installed: apt-get install "
                                             f"gcc-riscv64-unknown-elf (or set {CC_ENV})")
    name = source.stem
    entry = RUNTIME_ENTRY if name == RUNTIME else name
    with tempfile.TemporaryDirectory(prefix="pydla-kernel-") as tmp:
        script = Path(tmp) / "link.ld"
        script.write_text(runtime_script() if name == RUNTIME else kernel_script())
        out = Path(tmp) / f"{name}.elf"
        # Relative source paths and a fixed working directory: nothing of this machine in the ELF.
        argv = [cc, *CFLAGS, "-I", str(INCLUDE_DIR), "-I", ".", f"{name}.c", "-o", str(out),
                f"-Wl,-T,{script}", f"-Wl,-e,{entry}", *LDFLAGS]
        result = subprocess.run(argv, cwd=source.parent, capture_output=True, text=True)
        if result.returncode != 0:
            raise DlaError(NvError.BadValue, f"kernel {name}: the build failed:\n{result.stderr.strip()}")
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
