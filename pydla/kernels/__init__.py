"""SHAVE kernels: the interface a kernel is called through, planning a call, and building kernels
(the toolchain and pydla's shipped kernels); :class:`pydla.ShaveKernel` runs one on tensors through
the whole stack.

A kernel is C built with ``pydla kernel build mykernel.c`` (:func:`build_kernel`) into an ELF
whose entry point is called as ``entry(argsAddr, argsSize)`` on a SHAVE tile. pydla calls it with
one argument convention, here and for the ONNX custom operator (``ai.pydla`` ``ShaveKernel``, see
:mod:`pydla.compiler.custom_kernel`):

    the argument buffer (at WIN_E) holds one ``MemRefData`` (32 bytes) per input, in order, then
    one per output, then the caller's parameter bytes as they are given;

so a kernel declares ``typedef struct __attribute__((packed)) { MemRefData input, output; float a,
b; } MyParams;`` and checks ``argsSize == sizeof(MyParams)``. Each MemRefData is static and dense:
its data in the tile's CMX (WIN_F), its dims and strides (in bits) in WIN_E after the kernel's own
RW data; ``dataType`` says the element type. The whole of every tensor is in CMX at once (a kernel
of unknown semantics cannot be cut into chunks), one invocation on tile 0, between a DMA of the
inputs into CMX and a DMA of the outputs back.

Modules: :mod:`.image` (a kernel ELF, checked as the device will load it), :mod:`.memref`
(MemRefData and the CMX layout), :mod:`.invocation` (one call laid out), :mod:`.build` (building
kernels, the shipped ones in ``shipped/``), :mod:`.toolchain` (the RISC-V C compiler), :mod:`.cli`
(``pydla kernel build``). This package imports only :mod:`pydla.elf`, :mod:`pydla.deviceapi` (the
generated contracts and headers) and :mod:`pydla.errors`.

Usage::

    elf = build_kernel("scale_add.c", output="scale_add.elf")      # pydla kernel build
    k = pydla.ShaveKernel("scale_add.elf")                  # path or ELF bytes
    y = k(x, params=struct.pack("<ff", 2.0, 1.0))           # one output, shaped and typed like x
    y, = k.run([x], outputs=[(x.shape, np.float32)], params=b"...")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from pydla.kernels.build import RUNTIME, build_kernel, runtime_elf
    from pydla.kernels.image import check_elf
    from pydla.kernels.invocation import plan_invocation
    from pydla.kernels.memref import MEMREF_BYTES

__all__ = ["MEMREF_BYTES", "RUNTIME", "build_kernel", "check_elf", "plan_invocation", "runtime_elf"]

# Imported on first use, so that the device (the shipped kernels' files) and the command line
# (``pydla kernel``) load only the module they use: name -> module.
_LAZY = {"RUNTIME": "build", "build_kernel": "build", "runtime_elf": "build", "check_elf": "image",
         "plan_invocation": "invocation", "MEMREF_BYTES": "memref"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pydla.kernels' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"pydla.kernels.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {"__doc__", "__name__", "__file__"})
