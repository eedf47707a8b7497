"""``pydla kernel build``: a kernel author's C SHAVE kernel -> a kernel ELF.

Usage: ``pydla kernel build scale_add.c`` (writes scale_add.elf beside it)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EPILOG = """\
what a kernel is:
  A C function `void NAME(uint32_t argsAddr, uint32_t argsSize)` (by default NAME is the file's
  name) run on a SHAVE tile: RISC-V RV32IMF, freestanding (no libc, no libm). pydla calls it with
  an argument buffer holding one MemRefData (32 bytes) per input, then one per output, then the
  caller's parameter bytes. #include "pydla/shave.h" (MemRefData, the windows) and the shipped
  kernels' helpers "memref.h" (view_of, output_view, next_index, KERNEL_CHECK) and "mathf.h"
  (exp_f, ...) are on the include path.

how it is built:
  With the flags of pydla's shipped kernels (-march=rv32imf -mabi=ilp32f -O2 -ffreestanding
  -nostdlib -Wall -Wextra -Werror ...), linked at WIN_D (code and read-only data) with RW data at
  WIN_E + ARGS_MAX_BYTES, stripped; the same source builds to the same bytes. The compiler is the
  first found of:
    1. $PYDLA_RISCV_CC: a RISC-V C compiler command (zig's options when it names zig);
    2. riscv64-unknown-elf-gcc on PATH: apt-get install gcc-riscv64-unknown-elf;
    3. zig's C compiler from PyPI: pip install 'pydla[kernels]' (part of 'pydla[dev]'), nothing
       from apt.

then:
  pydla.ShaveKernel("scale_add.elf")(x, params=...)           # on numpy arrays
  an ONNX node ShaveKernel of domain ai.pydla, kernel="scale_add.elf"  # in a model
  (docs/guide/kernel-authors.md)

examples:
  pydla kernel build scale_add.c
  pydla kernel build kernels/my_op.c -o build/my_op.elf --entry my_op_main -I include/
"""


def register(commands: Any) -> None:
    p = commands.add_parser(
        "kernel", help="custom SHAVE kernels: build a C kernel into a kernel ELF",
        description="Custom SHAVE kernels: C run on the device's SHAVE tiles, from Python "
                    "(pydla.ShaveKernel) or an ONNX model (domain ai.pydla, ShaveKernel).")
    sub = p.add_subparsers(dest="kernel_command", metavar="SUBCOMMAND")
    sub.required = True
    b = sub.add_parser(
        "build", help="build a C kernel into a kernel ELF, as pydla's shipped kernels are built",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build SRC.c into a SHAVE kernel ELF with the RISC-V toolchain, with the flags and "
                    "linker script of pydla's shipped kernels.",
        epilog=EPILOG)
    b.add_argument("source", type=Path, metavar="SRC.c")
    b.add_argument("-o", "--output", type=Path, metavar="OUT.elf",
                   help="where to write the ELF (default: SRC with .elf, beside it)")
    b.add_argument("--entry", metavar="NAME",
                   help="the function the kernel starts in (default: the one named like the file)")
    b.add_argument("-I", "--include", action="append", default=[], type=Path, metavar="DIR",
                   help="another directory of headers (repeatable), searched after the source's own, "
                        "pydla's generated headers and the shipped kernels' helpers")
    b.add_argument("--quiet", action="store_true", help="print nothing but errors")
    b.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    from pydla.files import check_output
    from pydla.kernels.build import build_kernel, compiler, write_atomically
    from pydla.kernels.image import check_elf

    out = args.output if args.output is not None else args.source.with_suffix(".elf")
    # Before the build: the ELF never goes over its C source (`-o k.c`), nor into a missing directory.
    check_output(out, "-o" if args.output is not None else None, {"the kernel's source": args.source})
    toolchain = compiler()
    elf = build_kernel(args.source, args.entry, args.include, cc=toolchain)
    image = check_elf(elf, str(args.source))
    write_atomically(out, elf, "the kernel")  # whole or not at all
    if not args.quiet:
        entry = args.entry or args.source.stem
        by = f"; {toolchain.name}" if toolchain is not None else ""
        print(f"built {out} ({len(elf)} bytes; entry '{entry}' at WIN_D + {image.entry_offset:#x}{by})",
              file=sys.stdout)
    return 0
