"""A test host for the SHAVE tiles: it drives them as a KMD would, through registers and device
memory only (the protocol of pydla.hw.shave), and packs kernel arguments with the generated ctypes.

Usage::

    host = Host(VirtualDevice("full"))
    host.start_tile(0)
    host.barrier(0, producers=1, consumers=1)
    host.dma(src=host.put(x), dst=cmx(0), size=x.nbytes, update=1)
    host.kernel(0, "clamp", clamp_args(...), wait=1, update=2)
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.hw.device import VirtualDevice
from pydla.kernels.build import kernel_elf

TILE_STRIDE = R.SHAVE_T1_CTRL - R.SHAVE_T0_CTRL
DATA_OFFSET = S.ARGS_MAX_BYTES  # where the tests put an invocation's data section in WIN_E
DTYPES = {np.dtype(np.float32): S.shave_data_type_e.FP32, np.dtype(np.float16): S.shave_data_type_e.FP16}


def treg(tile: int, name: str) -> int:
    return R.REGISTERS[f"SHAVE_T0_{name.upper()}"] + tile * TILE_STRIDE


def entry_offset(elf: bytes) -> int:
    """e_entry - WIN_D, as a compiler computes it (0 for an image too short to have one: the fuzz
    test's, which the device refuses)."""
    if len(elf) < 28:
        return 0
    entry: int = struct.unpack_from("<I", elf, 24)[0]
    return (entry - S.WIN_D) & 0xFFFFFFFF


class Args:
    """An argument buffer (the params struct, exactly sizeof(Params) bytes) and the invocation's data
    section holding the static dims and strides arrays it points at (WIN_E + DATA_OFFSET)."""

    def __init__(self, params_type: type[Any]) -> None:
        self.params = params_type()
        self.data = bytearray()

    def _place(self, data: bytes) -> int:
        while len(self.data) % 8:
            self.data.append(0)
        at = S.WIN_E + DATA_OFFSET + len(self.data)
        self.data += data
        return at

    def memref(self, name: str, data_addr: int, shape: tuple[int, ...], dtype: Any,
               strides: tuple[int, ...] | None = None, dynamic_at: int | None = None) -> None:
        """Field ``name`` describes an array at ``data_addr`` (WIN_F). Static: dims and strides here;
        dynamic: they are written by the kernel at ``dynamic_at`` (WIN_F: dims, then strides at +64)."""
        dtype = np.dtype(dtype)
        if strides is None:
            strides = tuple(int(s) for s in np.empty(shape, dtype).strides)
        m = getattr(self.params, name)
        m.dataAddr = data_addr
        m.numDims = len(shape)
        m.dataType = DTYPES[dtype]
        m.dimsOrder = sum(i << (4 * (len(shape) - 1 - i)) for i in range(len(shape)))
        if dynamic_at is None:
            m.isStatic = 1
            m.dimsAddr = self._place(np.array(shape, np.int32).tobytes())
            m.stridesAddr = self._place(np.array([s * 8 for s in strides], np.int64).tobytes())
        else:
            m.isStatic = 0
            m.dimsAddr = dynamic_at
            m.stridesAddr = dynamic_at + 64

    def __bytes__(self) -> bytes:
        return bytes(self.params)


class Host:
    def __init__(self, dev: VirtualDevice) -> None:
        self.dev = dev
        self.ctx = dev.iommu.create_context()
        self.irqs = 0
        dev.connect_irq(self._irq)
        dev.reg_write(R.SHAVE_CTX, self.ctx)
        self.kernels: dict[str, tuple[int, int, int]] = {}  # name -> iova, size, entry offset
        self.kernel_ids: dict[str, int] = {}
        self.seq = 0
        self.last_dma_dst = 0
        self.buffers: list[tuple[int, Any]] = []

    def _irq(self) -> None:
        self.irqs += 1

    # -- memory ------------------------------------------------------------------------------------

    def alloc(self, size: int) -> int:
        bo = self.dev.memory.allocate(max(size, 1))
        iova = self.dev.iommu.map(self.ctx, bo)
        self.buffers.append((iova, bo))
        return iova

    def release(self) -> None:
        """Unmap and free every buffer (after a SHAVE_RESET: no task refers to them any more)."""
        for iova, bo in self.buffers:
            self.dev.iommu.unmap(self.ctx, iova)
            self.dev.memory.free(bo)
        self.buffers.clear()
        self.kernels.clear()

    def put(self, data: bytes | np.ndarray) -> int:
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        iova = self.alloc(len(raw))
        self.write(iova, raw)
        return iova

    def write(self, iova: int, raw: bytes) -> None:
        bo, off = self.dev.iommu.translate(self.ctx, iova, len(raw))
        bo.array[off:off + len(raw)] = np.frombuffer(raw, np.uint8)

    def read(self, iova: int, size: int) -> bytes:
        bo, off = self.dev.iommu.translate(self.ctx, iova, size)
        return bo.array[off:off + size].tobytes()

    # -- registers -----------------------------------------------------------------------------------

    def w(self, address: int, value: int) -> None:
        self.dev.reg_write(address, value)

    def r(self, address: int) -> int:
        return self.dev.reg_read(address)

    def start_tile(self, tile: int, runtime: bytes | None = None, stack: int = 16384) -> None:
        image = kernel_elf("runtime") if runtime is None else runtime
        iova = self.put(image)
        self.w(treg(tile, "rt_addr_lo"), iova & 0xFFFFFFFF)
        self.w(treg(tile, "rt_addr_hi"), iova >> 32)
        self.w(treg(tile, "rt_size"), len(image))
        self.w(treg(tile, "stack_size"), stack)
        self.w(treg(tile, "ctrl"), 1)

    def barrier(self, index: int, producers: int, consumers: int) -> None:
        self.w(R.SHAVE_BAR_SELECT, index)
        self.w(R.SHAVE_BAR_CONFIG, producers | consumers << 16)

    def dma(self, src: int, dst: int, size: int, *, src_tile: int = S.DDR, dst_tile: int = S.DDR,
            wait: int = 0, update: int = 0, lines: int = 1, src_stride: int = 0, dst_stride: int = 0) -> int:
        t = S.DmaTask(src_addr=src, dst_addr=dst, src_tile=src_tile, dst_tile=dst_tile, line_size=size,
                      line_repeat=lines, src_line_stride=src_stride, dst_line_stride=dst_stride,
                      surf_repeat=1, wait_mask=wait, update_mask=update)
        iova = self.put(bytes(t))
        self.last_dma_dst = dst
        self.w(R.SHAVE_DMA_PUSH_LO, iova & 0xFFFFFFFF)
        self.w(R.SHAVE_DMA_PUSH_HI, iova >> 32)
        return iova

    def kernel_data(self, name: str, image: bytes | None = None) -> tuple[int, int, int]:
        if name not in self.kernels:
            elf = kernel_elf(name) if image is None else image
            self.kernels[name] = (self.put(elf), len(elf), entry_offset(elf))
            self.kernel_ids[name] = len(self.kernel_ids) + 1
        return self.kernels[name]

    def kernel(self, tile: int, name: str, args: Args | bytes, *, wait: int = 0, update: int = 0,
               image: bytes | None = None, push: bool = True) -> int:
        iova, size, entry = self.kernel_data(name, image)
        raw = bytes(args)
        data = bytes(args.data) if isinstance(args, Args) else b""
        inv = S.ActKernelInvocation(kernel_addr=iova, kernel_size=size, entry_offset=entry,
                                    args_addr=self.put(raw), args_size=len(raw), tile=tile,
                                    kernel_id=self.kernel_ids[name])
        if data:
            inv.data_addr, inv.data_size, inv.data_offset = self.put(data), len(data), DATA_OFFSET
        task = S.ActKernelTask(invocation=inv, wait_mask=wait, update_mask=update)
        desc = self.put(bytes(task))
        if push:
            self.w(treg(tile, "push_lo"), desc & 0xFFFFFFFF)
            self.w(treg(tile, "push_hi"), desc >> 32)
        return desc

    def tile_error(self, tile: int) -> dict[str, int]:
        return {n: self.r(treg(tile, n)) for n in ("state", "error", "error_pc", "error_addr",
                                                  "error_kernel", "error_task", "done", "level")}


def cmx(offset: int) -> int:
    return S.WIN_F + offset


# -- hand-made kernels (no toolchain needed): RV32I machine code in a minimal ELF ------------------

def tiny_elf(words: list[int], base: int = S.WIN_D) -> bytes:
    """An ELF32 RISC-V executable with one read + execute segment at ``base`` holding ``words``."""
    code = b"".join(struct.pack("<I", w) for w in words)
    ehdr = struct.pack("<16sHHIIIIIHHHHHH", b"\x7fELF\x01\x01\x01" + bytes(9), 2, 243, 1, base, 52, 0, 0,
                       52, 32, 1, 0, 0, 0)
    phdr = struct.pack("<IIIIIIII", 1, 84, base, base, len(code), len(code), 5, 4)
    return ehdr + phdr + code


def lw(rd: int, rs1: int, imm: int) -> int:
    return (imm & 0xFFF) << 20 | rs1 << 15 | 2 << 12 | rd << 7 | 0x03


def sw(rs2: int, rs1: int, imm: int) -> int:
    return ((imm >> 5) & 0x7F) << 25 | rs2 << 20 | rs1 << 15 | 2 << 12 | (imm & 0x1F) << 7 | 0x23


AUIPC_T0 = 0x00000297  # auipc t0, 0
RET = 0x00008067  # jalr x0, 0(ra)
LOOP = 0x0000006F  # jal x0, 0: a loop forever
EBREAK_WORD = 0x00100073
