"""The barrier registers the engine scheduler uses for DLA operations (dla_regs 1.8.0): bar_produce
and bar_consume act as a task's end does, bar_ready shows what has fired; a misuse is the DMA's
BAD_BARRIER error, as a bad configuration is."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.device import VirtualDevice
from pydla.target.config import load_config

E = R.shave_error_e
DMA_ERROR, NOTIFY = 1 << 16, 1 << 17


@pytest.fixture
def dev() -> Iterator[VirtualDevice]:
    d = VirtualDevice("full")
    yield d
    d.close()


def configure(dev: VirtualDevice, barrier: int, producers: int, consumers: int) -> None:
    dev.reg_write(R.SHAVE_BAR_SELECT, barrier)
    dev.reg_write(R.SHAVE_BAR_CONFIG, producers | consumers << 16)


def test_produce_fires_after_its_count_and_consume_resets(dev: VirtualDevice) -> None:
    configure(dev, 3, producers=2, consumers=1)
    dev.reg_write(R.SHAVE_BAR_PRODUCE, 1 << 3)
    assert dev.reg_read(R.SHAVE_BAR_READY) == 0  # one of two producers
    dev.reg_write(R.SHAVE_BAR_PRODUCE, 1 << 3)
    assert dev.reg_read(R.SHAVE_BAR_READY) == 1 << 3
    assert dev.reg_read(R.SHAVE_BAR_FIRED) == 1 << 3
    assert dev.reg_read(R.SHAVE_BAR_PRODUCE) == 0 and dev.reg_read(R.SHAVE_BAR_CONSUME) == 0
    dev.reg_write(R.SHAVE_BAR_CONSUME, 1 << 3)  # its one consumer: reset for its next use
    assert dev.reg_read(R.SHAVE_BAR_READY) == 0
    dev.reg_write(R.SHAVE_BAR_SELECT, 3)
    assert dev.reg_read(R.SHAVE_BAR_STATE) == 2 | 1 << 16  # producers and consumers left, not fired
    assert dev.reg_read(R.SHAVE_INTR_STATUS) == 0


def test_a_notify_barrier_produced_raises_bit_17(dev: VirtualDevice) -> None:
    configure(dev, 0, producers=1, consumers=0)
    dev.reg_write(R.SHAVE_BAR_NOTIFY, 1)
    dev.reg_write(R.SHAVE_BAR_PRODUCE, 1)
    assert dev.reg_read(R.SHAVE_INTR_STATUS) == NOTIFY
    assert dev.reg_read(R.GLB_INTR_STATUS) >> 29 & 1


@pytest.mark.parametrize(("register", "mask"), [
    (R.SHAVE_BAR_PRODUCE, 1 << 5),  # no producers configured
    (R.SHAVE_BAR_CONSUME, 1 << 1),  # configured, not fired
    (R.SHAVE_BAR_PRODUCE, 1 << 20),  # beyond the device's 8 barriers
])
def test_a_misuse_is_the_dmas_bad_barrier(register: int, mask: int) -> None:
    config = load_config("full")
    assert config.shave is not None
    dev = VirtualDevice(dataclasses.replace(config, shave=dataclasses.replace(config.shave, barriers=8)))
    try:
        configure(dev, 1, producers=1, consumers=1)
        dev.reg_write(register, mask)
        assert dev.reg_read(R.SHAVE_INTR_STATUS) & DMA_ERROR
        assert dev.reg_read(R.SHAVE_DMA_ERROR) == E.BAD_BARRIER
        assert dev.reg_read(R.SHAVE_BAR_READY) == 0
    finally:
        dev.close()
