"""A compute unit named by its IP_LAYOUT index (XRT's cu_index), as by its name, on the in-process port."""

from __future__ import annotations

import pytest

from pydla import DlaError, NvError
from pydla.platform import open_port
from pydla.target.config import load_config


def test_a_unit_opens_reads_and_closes_by_index() -> None:
    names = [cu.name for cu in load_config("small").ip_layout]
    scale = names.index("scale_i16:scale")
    with open_port("inprocess", "small") as port:
        h, other = port.NvDlaOpen(0), port.NvDlaOpen(0)
        port.NvDlaOpenCuContext(h, scale, exclusive=True)  # type: ignore[arg-type]
        with pytest.raises(DlaError) as e:
            port.NvDlaOpenCuContext(other, "scale", exclusive=True)  # the same unit, by name
        assert e.value.code == NvError.Busy
        port.NvDlaRegWrite(h, scale, 0x10, 0x40400000)  # type: ignore[arg-type]
        assert port.NvDlaRegRead(h, "scale_i16:scale", 0x10) == 0x40400000
        port.NvDlaCloseCuContext(h, "scale")  # closed by name: the same context
        port.NvDlaOpenCuContext(other, scale, exclusive=True)  # type: ignore[arg-type]
        port.NvDlaCloseCuContext(other, scale)  # type: ignore[arg-type]


@pytest.mark.parametrize("index", [5, -1, 1 << 40])
def test_an_index_past_the_layout_is_refused(index: int) -> None:
    with open_port("inprocess", "small") as port:
        h = port.NvDlaOpen(0)
        with pytest.raises(DlaError) as e:
            port.NvDlaOpenCuContext(h, index, exclusive=False)  # type: ignore[arg-type]
        assert e.value.code == NvError.BadParameter
        assert e.value.message == (f"NvDlaOpenCuContext: compute unit index {index}: the device has 5 "
                                   "(0..4)")
