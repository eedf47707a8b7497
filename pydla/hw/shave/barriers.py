"""The physical barriers shared by the SHAVE tiles and the DMA.

A barrier is configured with a producer count and a consumer count. Each producing task ends with a
``produce``; when the producers left reach 0 the barrier fires (tasks waiting on it may start, and
its bit of ``fired`` is set for the host). Each consuming task ends with a ``consume``; when the
consumers left reach 0 the barrier resets to its configuration, not fired, ready for its next use.
A barrier with no consumers resets as it fires (the host learns of it through ``fired``).

Usage::

    bars = Barriers(32)
    bars.configure(0, producers=1, consumers=1)
    bars.produce(1 << 0, "DMA task 1")     # fires barrier 0
    bars.ready(1 << 0)                      # True
"""

from __future__ import annotations

from pydla.hw.shave.faults import E, ShaveFault


class Barriers:
    def __init__(self, count: int) -> None:
        self.count = count
        self.all_mask = (1 << count) - 1
        self.reset()

    def reset(self) -> None:
        self.producers = [0] * self.count  # configured counts
        self.consumers = [0] * self.count
        self.prod_left = [0] * self.count
        self.cons_left = [0] * self.count
        self.fired_now = 0  # bit b: barrier b has fired and is not reset yet
        self.fired = 0  # bit b: barrier b fired since the host last cleared it (bar_fired)
        self.notify = 0  # bar_notify
        self.notified = False  # a barrier of notify fired (intr_status bit 17)

    def configure(self, index: int, producers: int, consumers: int) -> None:
        """``index`` is checked by the caller (a register write cannot fail)."""
        self.producers[index] = self.prod_left[index] = producers
        self.consumers[index] = self.cons_left[index] = consumers
        self.fired_now &= ~(1 << index)
        if producers == 0 and consumers:
            self.fired_now |= 1 << index  # nothing to wait for

    def state(self, index: int) -> int:
        return (self.prod_left[index] & 0xFFFF) | (self.cons_left[index] & 0x7FFF) << 16 \
            | (self.fired_now >> index & 1) << 31

    def check_mask(self, mask: int, field: str, who: str) -> None:
        if mask & ~self.all_mask:
            raise ShaveFault(E.BAD_BARRIER, f"{who}: {field} {mask:#x} names barriers beyond the "
                                            f"{self.count} of this device", addr=mask)

    def ready(self, mask: int) -> bool:
        return mask & self.fired_now == mask

    def produce(self, mask: int, who: str) -> None:
        for b in _bits(mask):
            if self.producers[b] == 0 or self.prod_left[b] == 0:
                raise ShaveFault(E.BAD_BARRIER, f"{who}: produces barrier {b}, which has "
                                                f"{self.prod_left[b]} of {self.producers[b]} producers left "
                                                "(not configured, or produced too often)", addr=b)
            self.prod_left[b] -= 1
            if self.prod_left[b] == 0:
                self.fired |= 1 << b
                if self.notify >> b & 1:
                    self.notified = True
                if self.consumers[b] == 0:
                    self.prod_left[b] = self.producers[b]  # nobody consumes it: reset for reuse
                else:
                    self.fired_now |= 1 << b

    def consume(self, mask: int, who: str) -> None:
        for b in _bits(mask):
            if not self.fired_now >> b & 1 or self.cons_left[b] == 0:
                raise ShaveFault(E.BAD_BARRIER, f"{who}: consumes barrier {b}, which has not fired or "
                                                f"has {self.cons_left[b]} of {self.consumers[b]} consumers "
                                                "left", addr=b)
            self.cons_left[b] -= 1
            if self.cons_left[b] == 0:
                self.prod_left[b] = self.producers[b]
                self.cons_left[b] = self.consumers[b]
                if self.producers[b]:  # with no producers it is fired again at once
                    self.fired_now &= ~(1 << b)


def _bits(mask: int) -> list[int]:
    return [b for b in range(mask.bit_length()) if mask >> b & 1]
