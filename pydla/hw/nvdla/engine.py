"""What an NVDLA device computes when its register file launches an operation: the launch decoded into
the block kernel's parameters, run on the memory of the operation's IOMMU context, and the pipelines
NVDLA forms on the fly (a convolution's result into the SDP, the SDP's output into the PDP).

The register file launches each processor on its own (:mod:`pydla.hw.nvdla.regfile`). A consumer
that takes its input on the fly (an SDP with ``FLYING_MODE`` ON, a PDP with ``FLYING_MODE`` 0) waits
for its producer; a producer whose output goes on (every convolution; an SDP with ``OUTPUT_DST`` PDP)
keeps it until its consumer is launched, as the hardware's pipeline stalls. NVIDIA's firmware enables
the consumer first; either order works. The producer completes when its output is taken, then the
consumer: :meth:`NvdlaEngine.run` returns the completions in that order (a :class:`Done` each), and
the device applies them to the register file.

An operation fails (its Done has ``ok`` False: no done interrupt, the firmware's wait times out) when
its registers are refused by the block (a DlaError naming the field), when a DMA access faults
(``fault``: the MmuFault, for the SMMU's registers), or when its on-the-fly producer failed. Nothing
raises out of :meth:`NvdlaEngine.run`.

The decoded parameters of a launch depend only on its registers (its groups' bytes, its LUT, its
queued transfers), never on memory: they are kept by those bytes (:class:`DecodedLaunches`), so a
network's operations, programmed with the same bytes at every run, are decoded once. Memory is
reached, translated and checked at every execution. A convolution's weights, prepared for its GEMM,
are kept too (:class:`pydla.hw.nvdla.conv_gemm.WeightCache`), checked against the bytes read at every
execution.

Usage::

    engine = NvdlaEngine(by_name("nv_small"), iommu, sram=None)
    for done in engine.run(launch, ctx):
        regfile.complete(done.processor, done.group, done.ok, done.status)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError
from pydla.hw.memory import Iommu, MmuFault
from pydla.hw.nvdla import bdma, cdp, conv, pdp, rubik, sdp
from pydla.hw.nvdla.blas import single_threaded
from pydla.hw.nvdla.conv_gemm import WeightCache
from pydla.hw.nvdla.memory import NvdlaMemory
from pydla.hw.nvdla.regfile_decode import decode
from pydla.hw.nvdla.regfile_units import Launch
from pydla.hw.nvdla.sdp_params import DST_PDP
from pydla.hw.nvdla.smmu import IommuMemory
from pydla.hw.nvdla.target import NvdlaTarget

DECODED_CAPACITY = 1024  # decoded launches kept per device; past it the cache starts again
UNIT = {"BDMA": 0, "CONV": 1, "SDP": 2, "PDP": 3, "CDP": 4, "RUBIK": 5}  # DLA_OP_* (SMMU FAULT_UNIT)
WORD = 0xFFFFFFFF
Flying = npt.NDArray[np.generic]


@dataclass
class Done:
    """One completion for the register file: ``status`` holds the read-only registers of the operation's
    groups (counters) by NVDLA's register names."""

    processor: str
    group: int
    ok: bool = True
    status: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    fault: MmuFault | None = None


class DecodedLaunches:
    """The block kernels' parameters of launches, by the launch's register bytes (see the module
    docstring). A launch whose registers a block refuses is not kept: it is refused again."""

    def __init__(self, capacity: int = DECODED_CAPACITY) -> None:
        self.capacity = capacity
        self._entries: dict[tuple[object, ...], Any] = {}
        self.hits = self.misses = 0

    @staticmethod
    def key(launch: Launch) -> tuple[object, ...]:
        return (launch.processor, tuple((name, bytes(view)) for name, view in launch.views.items()),
                tuple(bytes(t) for t in launch.transfers), launch.lut_le, launch.lut_lo)

    def get(self, launch: Launch) -> Any:
        """``decode(launch)``, kept (DlaError as decode raises it)."""
        key = self.key(launch)
        params = self._entries.get(key)
        if params is not None:
            self.hits += 1
            return params
        self.misses += 1
        params = decode(launch)
        if len(self._entries) >= self.capacity:
            self._entries.clear()
        self._entries[key] = params
        return params

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class _Held:
    launch: Launch
    ctx: int
    params: Any = None
    output: Flying | None = None  # a producer's output for its consumer (None: the producer failed)
    done: Done | None = None


class NvdlaEngine:
    """The computing part of an NVDLA device of ``target`` (see the module docstring)."""

    def __init__(self, target: NvdlaTarget, iommu: Iommu, sram: NvdlaMemory | None) -> None:
        self.target = target
        self.iommu = iommu
        self.sram = sram
        self._waiting: dict[str, _Held] = {}  # consumer processor -> its launch, waiting for its input
        self._ready: dict[str, _Held] = {}  # consumer processor -> its producer, holding the output
        self.decoded = DecodedLaunches()
        self.weights = WeightCache()  # convolutions' prepared weights, checked against their bytes each run

    def reset(self) -> None:
        """Drop the operations waiting for their partner (a reset abandons them)."""
        self._waiting.clear()
        self._ready.clear()
        self.decoded.clear()
        self.weights.clear()

    @property
    def waiting(self) -> list[str]:
        """The processors whose launch waits for an on-the-fly partner (for tests and messages)."""
        return sorted({*self._waiting, *(h.launch.processor for h in self._ready.values())})

    def run(self, launch: Launch, ctx: int) -> list[Done]:
        """Execute ``launch`` through IOMMU context ``ctx``; the completions this makes due, in order."""
        out: list[Done] = []
        try:
            params = self.decoded.get(launch)
        except DlaError as e:
            out.append(Done(launch.processor, launch.group, False, error=e.message))
            return out
        self._step(_Held(launch, ctx, params), None, out)
        return out

    # -- the pipeline ---------------------------------------------------------------------------------

    @staticmethod
    def _source(processor: str, params: Any) -> str | None:
        """The producer whose output ``processor`` takes on the fly, if it does."""
        if processor == "SDP" and params.flying_mode:
            return "CONV"
        if processor == "PDP" and params.flying_mode == pdp.ON_FLYING:
            return "SDP"
        return None

    @staticmethod
    def _consumer(processor: str, params: Any) -> str | None:
        """The processor that takes ``processor``'s output on the fly, if one does."""
        if processor == "CONV":
            return "SDP"
        if processor == "SDP" and params.output_dst == DST_PDP:
            return "PDP"
        return None

    def _step(self, held: _Held, flying: Flying | None, out: list[Done]) -> None:
        processor = held.launch.processor
        if flying is None and self._source(processor, held.params) is not None:
            producer = self._ready.pop(processor, None)
            if producer is None:
                self._waiting[processor] = held
                return
            if producer.done is not None:  # None: the producer failed, and said so when it did
                out.append(producer.done)
            if producer.output is None:
                self._fail(held, f"its on-the-fly input ({producer.launch.processor}) failed", None, out)
                return
            flying = producer.output
        try:
            output, status = self._execute(held, flying)
        except MmuFault as e:
            self._fail(held, str(e), e, out)
            return
        except DlaError as e:
            self._fail(held, e.message, None, out)
            return
        except Exception as e:  # a kernel's bug must not escape into the thread that wrote the register
            self._fail(held, f"internal error: {type(e).__name__}: {e}", None, out)
            return
        done = Done(processor, held.launch.group, status=status)
        consumer = self._consumer(processor, held.params)
        if consumer is None:
            out.append(done)
            return
        waiting = self._waiting.pop(consumer, None)
        if waiting is None:
            held.output, held.done = output, done
            self._ready[consumer] = held
            return
        out.append(done)
        self._step(waiting, output, out)

    def _fail(self, held: _Held, error: str, fault: MmuFault | None, out: list[Done]) -> None:
        out.append(Done(held.launch.processor, held.launch.group, False, error=error, fault=fault))
        consumer = self._consumer(held.launch.processor, held.params)
        if consumer is None:
            return
        waiting = self._waiting.pop(consumer, None)
        if waiting is not None:
            self._fail(waiting, f"its on-the-fly input ({held.launch.processor}) failed", None, out)
        else:  # the consumer, when it comes, fails at once
            self._ready[consumer] = _Held(held.launch, held.ctx, held.params)

    def _execute(self, held: _Held, flying: Flying | None) -> tuple[Flying | None, dict[str, int]]:
        """Run the block kernel, its GEMMs on this thread (pydla.hw.nvdla.blas); (its on-the-fly output,
        its status registers)."""
        with single_threaded():
            return self._kernel(held, flying)

    def _kernel(self, held: _Held, flying: Flying | None) -> tuple[Flying | None, dict[str, int]]:
        p, target, sram = held.params, self.target, self.sram
        memory = IommuMemory(self.iommu, held.ctx)
        processor = held.launch.processor
        if processor == "BDMA":
            bdma.execute(p, memory, target, sram=sram)
            return None, {}
        if processor == "RUBIK":
            rubik.execute(p, memory, target, sram=sram)
            return None, {}
        if processor == "PDP":
            pdp.execute(p, memory, target, sram=sram, flying_input=flying)
            return None, {}
        if processor == "CDP":
            c = cdp.execute(p, memory, target, sram=sram)
            lut = c.lut
            return None, _words({"CDP_D_OUT_SATURATION": c.saturations, "CDP_D_NAN_INPUT_NUM": c.nan_input,
                                 "CDP_D_INF_INPUT_NUM": c.inf_input, "CDP_D_PERF_LUT_UFLOW": lut.uflow,
                                 "CDP_D_PERF_LUT_OFLOW": lut.oflow, "CDP_D_PERF_LUT_HYBRID": lut.hybrid,
                                 "CDP_D_PERF_LUT_LE_HIT": lut.le_hit, "CDP_D_PERF_LUT_LO_HIT": lut.lo_hit})
        if processor == "SDP":
            s = sdp.execute(p, memory, target, sram=sram, flying_input=flying)  # type: ignore[arg-type]
            return s.to_pdp, _words({"SDP_D_STATUS": int(s.unequal)})
        result = conv.execute(p, memory, target, sram=sram, weights=self.weights)
        return result.to_sdp, _words({"CACC_D_OUT_SATURATION": result.saturations,
                                      "CDMA_D_NAN_INPUT_DATA_NUM": result.nan_input_data,
                                      "CDMA_D_INF_INPUT_DATA_NUM": result.inf_input_data,
                                      "CDMA_D_NAN_INPUT_WEIGHT_NUM": result.nan_input_weight,
                                      "CDMA_D_INF_INPUT_WEIGHT_NUM": result.inf_input_weight})


def _words(values: dict[str, int]) -> dict[str, int]:
    """Counters as their registers hold them: NVDLA's names, saturated at 32 bits."""
    return {f"NVDLA_{name}_0": min(int(v), WORD) for name, v in values.items()}
