"""Compute-unit models of a driver developer's own, named in configurations of the tests as
``python:tests.hw.cu_user_models:ClassName``."""

from __future__ import annotations

import numpy as np

from pydla.hw.cu import ComputeUnitModel, CuArgs, CuError, CuMemory


class Saxpy(ComputeUnitModel):
    """y = a * x + y on float32: x (words 0-1), y (2-3), n (4), a (5, float32 bits)."""

    def execute(self, args: CuArgs, memory: CuMemory) -> None:
        n = args.u32(4)
        if n > self.params.get("max_n", 1 << 20):
            raise CuError(2, f"n = {n} is more than max_n")
        y = memory.array(args.u64(2), n, np.float32)
        y += np.float32(args.f32(5)) * memory.array(args.u64(0), n, np.float32)


class XorStream(ComputeUnitModel):
    """Each byte of the stream XOR the key in argument word 0; a 2-byte granule for the test."""

    memory_mapped = False
    granule = 2

    def process(self, data: bytes, args: CuArgs) -> bytes:
        return (np.frombuffer(data, np.uint8) ^ np.uint8(args.u32(0) & 0xFF)).tobytes()


class NotAModel:
    pass


class Broken(ComputeUnitModel):
    def __init__(self, *args: object) -> None:
        raise RuntimeError("no licence")
