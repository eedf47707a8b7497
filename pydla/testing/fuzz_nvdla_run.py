"""Fuzzing NVDLA Loadables through the whole stack: mutated loadables (a field of a table or a byte,
halfword or word of a firmware descriptor set to a boundary value, or the bytes of the file) are
loaded and submitted on the NVDLA device (``nv_full``: the UMD's NVDLA runner, the KMD, the firmware's
NVDLA front-end, the register-level device). A case must end as a :class:`~pydla.errors.DlaError` or
run; then the device must still be usable: the same runtime runs a witness loadable and gives its
reference output bit for bit, else the case is a :class:`~pydla.testing.fuzz.DeviceUnusable` finding.

Seeds: the ``nv_full`` tests of NVIDIA's regression folder when it is there, and loadables pydla's
writer makes (so the target works without the folder). Each case gets a new device: a case that
wedged one cannot leak into the next.

Usage::

    report = run_campaign([nvdla_run_target()], cases=2_000, seed=1)
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.testing.fuzz import DeviceUnusable, Target
from pydla.testing.fuzz_nvdla import _semantic, nvdla_mutate, regression_loadables

CONFIG = "nv_full"
TIMEOUT_MS = 5_000
MEMORY_CAP = 64 << 20  # a buffer size set to a boundary value is refused, not allocated


def _seeds() -> list[bytes]:
    from pydla.loadable.nvdla.samples import bdma_loadable
    from pydla.loadable.nvdla.writer import write_nvdla_loadable

    found = [data for name, data in regression_loadables().items()
             if not name.endswith(("_small", "_large")) and not name.startswith("NN_")]
    return [*found, write_nvdla_loadable(bdma_loadable())]  # the last: the witness


def _run(rt: Any, data: bytes) -> list[bytes]:
    """Load ``data``, bind zeroed memory to every tensor, submit; the outputs' bytes."""
    rt.load(data)
    outs = []
    for i in range(rt.getNumInputTensors()):
        size = rt.getInputTensorDesc(i).size
        if size > MEMORY_CAP:  # a tensor size set to a boundary value: not worth allocating
            raise DlaError(NvError.InvalidSize, f"input tensor {i}: {size} bytes (the campaign's cap "
                                                f"{MEMORY_CAP})")
        rt.bindInputTensor(i, rt.allocateSystemMemory(max(size, 1)))
    for i in range(rt.getNumOutputTensors()):
        mem = rt.allocateSystemMemory(max(rt.getOutputTensorDesc(i).size, 1))
        rt.bindOutputTensor(i, mem)
        outs.append(mem)
    rt.submit()
    return [bytes(m.bytes_view()) for m in outs]


class NvdlaRunBench:
    """The witness loadable and its reference output (computed once, on a device of its own)."""

    def __init__(self, witness: bytes) -> None:
        import pydla

        self.witness = witness
        with pydla.createRuntime(config=CONFIG, timeout_ms=TIMEOUT_MS) as rt:
            self.reference = _run(rt, witness)

    def run_case(self, data: bytes) -> None:
        import pydla

        with pydla.createRuntime(config=CONFIG, timeout_ms=TIMEOUT_MS) as rt:
            refusal: DlaError | None = None
            try:
                _run(rt, data)
            except DlaError as e:
                refusal = e
            with contextlib.suppress(DlaError):  # nothing loaded (the case was refused at load)
                rt.unload()
            try:
                got = _run(rt, self.witness)
            except DlaError as e:
                raise DeviceUnusable(f"after the case, the witness loadable fails: {e}") from None
            if got != self.reference:
                raise DeviceUnusable("after the case, the witness loadable's output differs from its "
                                     "reference")
            if refusal is not None:
                raise refusal


def nvdla_run_target() -> Target:
    """The fuzz target ``nvdla-run``: seeds as the module says, mostly table and descriptor edits."""
    seeds = _seeds()
    bench: list[NvdlaRunBench] = []

    def mutator(rng: random.Random, seed: bytes) -> bytes:
        if rng.random() < 0.7:
            edited = _semantic(rng, seed)
            if edited is not None:
                return edited
        return nvdla_mutate(rng, seed)

    def check(data: bytes) -> None:
        if not bench:
            try:
                bench.append(NvdlaRunBench(seeds[-1]))
            except DlaError as e:  # the oracle itself must work: not a refusal of the case
                raise DeviceUnusable(f"the witness loadable does not run on {CONFIG}: {e}") from None
        bench[0].run_case(data)

    return Target("nvdla-run", seeds, check, mutator=mutator)
