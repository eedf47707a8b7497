"""One compute unit: the AXI4-Lite control block of XRT's kernel execution models around a model.

Registers (``cu_ctrl_regs_t`` in the register spec; offsets inside the unit's window):

====== ======= ===========================================================================
0x0    CTRL    bit 0 ap_start: the host writes 1; reads 1 until the unit accepts the start (a
               start written while the unit cannot accept waits, as HLS's level ap_start does).
               bit 1 ap_done: HS: set when an execution completes, cleared by the read of CTRL
               that returns it (clear on read). CHAIN: set while the oldest execution has
               completed and waits for ap_continue (not cleared by reading).
               bit 2 ap_idle: no execution in flight and no start waiting.
               bit 3 ap_ready: a start written now is accepted at once (HS: nothing in flight;
               CHAIN: fewer than pipeline_depth in flight and one initiation interval,
               latency_cycles / pipeline_depth, since the last start).
               bit 4 ap_continue: CHAIN: the host writes 1 to acknowledge the done it read (the
               execution leaves the pipeline; the next one's done shows if it has completed).
0x4    GIE     bit 0: global interrupt enable.
0x8    IER     bit 0: interrupt on ap_done; bit 1: on ap_ready (a start accepted).
0xC    ISR     bit 0 ap_done, bit 1 ap_ready: set on the event when IER allows; toggle on write.
0x10   args    32-bit words; a 64-bit device address is a lo, hi pair. Latched when a start is
               accepted: the host may write the next execution's arguments once ap_start reads 0.
0xF00  ctx     the IOMMU context of the unit's memory accesses (latched with the arguments).
0xF04  error   dla_hw_error_e of the last failed execution (write to clear); error_exec its
               number, fault_addr_lo/hi the address of an MMU fault; execs counts executions.
====== ======= ===========================================================================

AP_CTRL_NONE units have no control signals: CTRL, GIE, IER and ISR read 0 and ignore writes;
they convert their input stream to their output stream whenever there is input and room.

Every method runs under the device's lock, given the device's clock ``now`` (cycles).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.cu.models import CuMemory
from pydla.hw.memory import Iommu, MmuFault
from pydla.target.cu_model import ARGS_END, ARGS_OFFSET, ComputeUnitModel, CuArgs, CuError
from pydla.target.ip_layout import ComputeUnitInfo

AP_START, AP_DONE, AP_IDLE, AP_READY, AP_CONTINUE = (int(R.cu_ctrl_e.AP_START), int(R.cu_ctrl_e.AP_DONE),
                                                     int(R.cu_ctrl_e.AP_IDLE), int(R.cu_ctrl_e.AP_READY),
                                                     int(R.cu_ctrl_e.AP_CONTINUE))
_F: dict[str, int] = {f[0]: getattr(R.cu_ctrl_regs_t, f[0]).offset for f in R.cu_ctrl_regs_t._fields_}
CTRL, GIE, IER, ISR = _F["ctrl"], _F["gie"], _F["ier"], _F["isr"]
CTX, ERROR, ERROR_EXEC, EXECS = _F["ctx"], _F["error"], _F["error_exec"], _F["execs"]
FAULT_LO, FAULT_HI = _F["fault_addr_lo"], _F["fault_addr_hi"]
IN_LEVEL, OUT_LEVEL = _F["in_level"], _F["out_level"]
REG_NAMES = {CTRL: "CTRL", GIE: "GIE", IER: "IER", ISR: "ISR", CTX: "CTX", ERROR: "ERROR",
             ERROR_EXEC: "ERROR_EXEC", EXECS: "EXECS", FAULT_LO: "FAULT_ADDR_LO", FAULT_HI: "FAULT_ADDR_HI",
             IN_LEVEL: "IN_LEVEL", OUT_LEVEL: "OUT_LEVEL"}
assert ARGS_OFFSET == _F["args"] and ARGS_END == CTX
ISR_DONE, ISR_READY = 1, 2
MAX_EVENTS = 1 << 16


@dataclass(frozen=True)
class CuEvent:
    """One control event of a unit, at device cycle ``cycle``: START n (execution n accepted),
    READY (ap_ready rose), DONE n (execution n's ap_done), CONTINUE n (the host acknowledged it)."""

    kind: str
    n: int | None
    cycle: int

    def __str__(self) -> str:
        return self.kind if self.n is None else f"{self.kind}{self.n}"


@dataclass
class Execution:
    n: int
    args: bytes
    ctx: int
    finish: int
    computed: bool = False
    visible: bool = False  # its ap_done has been shown
    taken: bool = False  # a worker is computing it (threaded mode)
    error: tuple[int, str, int] | None = None  # code, detail, fault address


class ComputeUnit:
    """The control block's state and timing (see the module docstring)."""

    def __init__(self, info: ComputeUnitInfo, model: ComputeUnitModel, index: int, iommu: Iommu,
                 lock: threading.RLock, inline: bool) -> None:
        self.info = info
        self.model = model
        self.index = index
        self.iommu = iommu
        self.control = info.m_ip_control[len("AP_CTRL_"):]  # HS, CHAIN or NONE
        self.depth = info.pipeline_depth
        self.latency = info.latency_cycles
        self.interval = max(1, self.latency // self.depth)  # cycles between starts (CHAIN)
        self.inline = inline  # compute at acceptance, in the accepting thread (not threaded mode)
        self.wake = threading.Condition(lock)  # its worker waits here (threaded mode)
        self.stream = threading.Condition(lock)  # stream readers and writers wait here
        self.events: collections.deque[CuEvent] = collections.deque(maxlen=MAX_EVENTS)
        # Told of each START and DONE (unit, kind, execution, cycle): the device's trace ring.
        self.traced: Callable[[ComputeUnit, str, int, int], None] | None = None
        self.trace_starts: dict[int, int] = {}  # execution -> its START cycle, while traced
        self.epoch = 0
        self.log: collections.deque[str] = collections.deque(maxlen=64)
        self.reset(0)

    def reset(self, now: int) -> None:
        self.epoch += 1
        self.regs = bytearray(ARGS_END)
        self.words = memoryview(self.regs).cast("I")
        self.arg_words = 0
        for i, v in self.model.reset_args().items():
            self.words[ARGS_OFFSET // 4 + i] = v & 0xFFFFFFFF
            self.arg_words = max(self.arg_words, i + 1)
        self.gie = self.ier = self.isr = 0
        self.ctx = 0
        self.error = self.error_exec = self.execs = self.fault_addr = 0
        self.start_pending = False
        self.hs_done = False
        self.inflight: collections.deque[Execution] = collections.deque()
        self.accepted = 0
        self.next_accept = now
        self.last_finish = now
        self.last_continue = now
        self.time = now  # the unit's own time: events are dated from it, never backwards
        self.ready_seen = self.control != "NONE"
        self.fifo_in = bytearray()
        self.fifo_out = bytearray()
        self.chunk: tuple[int, bytes] | None = None
        self.busy_until = now

    # -- the host's register access -------------------------------------------------------------

    def peek(self, offset: int, now: int) -> int:
        """The register's value, without a read's side effect (clear on read)."""
        if offset >= ARGS_OFFSET:
            if offset < ARGS_END:
                value: int = self.words[offset >> 2]
                return value
            return {CTX: self.ctx, ERROR: self.error, ERROR_EXEC: self.error_exec,
                    EXECS: self.execs & 0xFFFFFFFF, FAULT_LO: self.fault_addr & 0xFFFFFFFF,
                    FAULT_HI: self.fault_addr >> 32 & 0xFFFFFFFF, IN_LEVEL: len(self.fifo_in),
                    OUT_LEVEL: len(self.fifo_out)}.get(offset, 0)
        if self.control == "NONE":
            return 0
        if offset == CTRL:
            return self.ctrl(now)
        return {GIE: self.gie, IER: self.ier, ISR: self.isr}.get(offset, 0)

    def ctrl(self, now: int) -> int:
        value = AP_START if self.start_pending else 0
        if (self.control == "HS" and self.hs_done) or (self.control == "CHAIN" and self.inflight \
                and self.inflight[0].visible):
            value |= AP_DONE
        if not self.inflight and not self.start_pending:
            value |= AP_IDLE
        if self.ready_level(now):
            value |= AP_READY
        return value

    def read(self, offset: int, now: int) -> int:
        value = self.peek(offset, now)
        if offset == CTRL and self.control == "HS":
            self.hs_done = False  # ap_done is clear on read (HLS's ap_ctrl_hs)
        return value

    def write(self, offset: int, value: int, now: int) -> None:
        self.advance(now)
        if ARGS_OFFSET <= offset < ARGS_END:
            self.words[offset >> 2] = value
            self.arg_words = max(self.arg_words, (offset - ARGS_OFFSET) // 4 + 1)
        elif offset == CTX:
            self.ctx = value
        elif offset == ERROR:
            self.error = 0
        elif self.control == "NONE":
            return  # no control signals
        elif offset == CTRL:
            if value & AP_CONTINUE and self.control == "CHAIN" and self.inflight and self.inflight[0].visible:
                done = self.inflight.popleft()
                self.last_continue = now  # the next done shows from now on, not before
                self._event("CONTINUE", done.n, now)
            if value & AP_START and not self.start_pending:
                self.start_pending = True
                self.next_accept = max(self.next_accept, now)  # not accepted before it was written
        elif offset == GIE:
            self.gie = value & 1
        elif offset == IER:
            self.ier = value & (ISR_DONE | ISR_READY)
        elif offset == ISR:
            self.isr ^= value & (ISR_DONE | ISR_READY)  # toggle on write
        self.advance(now)
        self._track_ready(now)

    def irq_out(self) -> bool:
        """The unit's interrupt output: wired (m_int_enable), enabled (GIE) and an ISR bit set."""
        return bool(self.info.m_int_enable and self.gie and self.isr)

    # -- timing -----------------------------------------------------------------------------

    def ready_level(self, now: int) -> bool:
        return (self.control != "NONE" and not self.start_pending and len(self.inflight) < self.depth
                and now >= self.next_accept)

    def next_time(self, now: int) -> int | None:
        """The cycle of this unit's next event (at or after ``now``), or None if none is coming."""
        if self.control == "NONE":
            if self.chunk is not None:
                return self.chunk[0]
            return max(now, self.busy_until) if self._chunk_size() else None
        times = []
        if self.inflight and not self.inflight[0].visible and self.inflight[0].computed:
            times.append(max(now, self.inflight[0].finish, self.last_continue))
        if len(self.inflight) < self.depth and (self.start_pending or not self.ready_seen):
            times.append(max(now, self.next_accept))
        return min(times) if times else None

    def advance(self, now: int) -> None:
        """Fire every event due at or before ``now``, in time order; then the unit is at ``now``
        (what the host does next happens then: an event it enables is not dated earlier)."""
        while True:
            t = self.next_time(self.time)
            if t is None or t > now:
                break
            self.time = t
            self._fire(t)
        self.time = max(self.time, now)

    def _fire(self, t: int) -> None:
        if self.control == "NONE":
            self._fire_stream(t)
            return
        head = self.inflight[0] if self.inflight else None
        if head is not None and not head.visible and head.computed \
                and max(head.finish, self.last_continue) <= t:
            head.visible = True
            self.execs += 1
            if head.error is not None:
                self.error, detail, self.fault_addr = head.error
                self.error_exec = head.n
                self.log.append(f"execution {head.n}: {detail}")
            self._event("DONE", head.n, t)
            if self.ier & ISR_DONE:
                self.isr |= ISR_DONE
            if self.control == "HS":
                self.inflight.popleft()  # an HS execution leaves at its done
                self.hs_done = True
        elif self.start_pending and len(self.inflight) < self.depth and t >= self.next_accept:
            self._accept(t)
        self._track_ready(t)

    def _accept(self, t: int) -> None:
        self.start_pending = False
        self.accepted += 1
        self.next_accept = t + self.interval
        self.last_finish = max(t + self.latency, self.last_finish)
        args = bytes(self.regs[ARGS_OFFSET:ARGS_OFFSET + 4 * self.arg_words])
        ex = Execution(self.accepted, args, self.ctx, self.last_finish)
        self.inflight.append(ex)
        self._event("START", ex.n, t)
        if self.ier & ISR_READY:
            self.isr |= ISR_READY
        if self.inline:
            self.compute(ex)
            ex.computed = True

    def compute(self, ex: Execution) -> None:
        """Run the model for one execution; whatever goes wrong becomes the execution's error."""
        try:
            self.model.execute(CuArgs(ex.args), CuMemory(self.iommu, ex.ctx))
        except MmuFault as e:
            ex.error = (int(R.dla_hw_error_e.MMU_FAULT), str(e), e.address)
        except CuError as e:
            ex.error = (e.code, e.detail, 0)
        except Exception as e:  # a device never throws into the host: a model's bug is an error
            ex.error = (int(R.dla_hw_error_e.BAD_CONFIG), f"model error: {type(e).__name__}: {e}", 0)

    def take_uncomputed(self) -> Execution | None:
        for ex in self.inflight:
            if not ex.computed and not ex.taken:
                ex.taken = True
                return ex
        return None

    def _track_ready(self, t: int) -> None:
        level = self.ready_level(t)
        if level and not self.ready_seen:
            self._event("READY", None, t)
            # HLS raises the ready interrupt when inputs are taken (see _accept), not here.
        self.ready_seen = level

    def _event(self, kind: str, n: int | None, t: int) -> None:
        self.events.append(CuEvent(kind, n, t))
        if self.traced is not None and n is not None and kind in ("START", "DONE"):
            self.traced(self, kind, n, t)

    # -- streams (AP_CTRL_NONE) ---------------------------------------------------------------

    def stream_write(self, data: bytes, now: int) -> int:
        """Append what fits of ``data`` to the input stream; the bytes taken."""
        n = min(len(data), self.info.fifo_bytes - len(self.fifo_in))
        if n:
            self.advance(now)
            if self.chunk is None:
                self.busy_until = max(self.busy_until, now)  # input arriving now is not converted earlier
            self.fifo_in += data[:n]
            self.advance(now)
        return n

    def stream_read(self, nbytes: int, now: int) -> bytes:
        """Take up to ``nbytes`` from the output stream."""
        self.advance(now)
        out = bytes(self.fifo_out[:nbytes])
        del self.fifo_out[:len(out)]
        if out:
            if self.chunk is None:
                self.busy_until = max(self.busy_until, now)
            self.advance(now)  # room for a waiting chunk's output
        return out

    def _chunk_size(self) -> int:
        """Input bytes the next chunk takes (0: no whole element, or no room for its output)."""
        g = self.model.granule
        k = min(self.info.chunk_bytes, len(self.fifo_in)) // g * g
        room = self.info.fifo_bytes - len(self.fifo_out)
        while k > 0 and self.model.output_bytes(k) > room:
            k = min(k - g, room * k // max(1, self.model.output_bytes(k)) // g * g)
        return max(k, 0)

    def _fire_stream(self, t: int) -> None:
        if self.chunk is not None and self.chunk[0] <= t:
            self.fifo_out += self.chunk[1]
            self.chunk = None
            self.execs += 1
            self.busy_until = t
            self.stream.notify_all()
            return
        k = self._chunk_size()
        if self.chunk is not None or not k or t < self.busy_until:
            return
        data = bytes(self.fifo_in[:k])
        del self.fifo_in[:k]
        self.stream.notify_all()  # room in the input stream
        self._event("START", self.execs + 1, t)
        try:
            args = CuArgs(bytes(self.regs[ARGS_OFFSET:ARGS_OFFSET + 4 * self.arg_words]))
            out = self.model.process(data, args)
            want = self.model.output_bytes(k)
            if len(out) != want:
                raise CuError(int(R.dla_hw_error_e.BAD_CONFIG),
                              f"process() returned {len(out)} bytes for {k}, not {want}")
        except Exception as e:  # a model's failure drops the chunk and is the unit's error
            code = e.code if isinstance(e, CuError) else int(R.dla_hw_error_e.BAD_CONFIG)
            self.error, self.error_exec = code, self.execs + 1
            self.log.append(f"chunk {self.execs + 1}: {type(e).__name__}: {e}")
            out = b""
        self.chunk = (t + self.latency, bytes(out))
