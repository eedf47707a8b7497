"""The register maps' generated structs declare what each field reads as (int, float, a nested
struct, a ctypes array, a bit-field view), so that the device's blocks are type-checked register by
register; each annotation must be what ctypes really returns."""

from __future__ import annotations

import ctypes
import typing
from types import ModuleType

import pytest

from pydla.deviceapi.generated import dla_regs, nvdla_smmu, nvdla_v1_regs, nvdla_v2_regs
from pydla.deviceapi.registers import RegisterBits
from pydla.deviceapi.runtime import Record


def _structs(module: ModuleType) -> list[type[Record]]:
    return [v for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, Record) and not issubclass(v, RegisterBits)
            and v.__module__ == module.__name__]


def _field_hints(cls: type[Record], module: ModuleType) -> dict[str, typing.Any]:
    """The class's own annotations, evaluated where it was generated."""
    names = vars(module) | {"ctypes": ctypes, "RegisterBits": RegisterBits}
    return {name: eval(hint, names) if isinstance(hint, str) else hint
            for name, hint in vars(cls).get("__annotations__", {}).items()}


@pytest.mark.parametrize("module", [dla_regs, nvdla_smmu, nvdla_v1_regs, nvdla_v2_regs],
                         ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_register_field_reads_as_its_annotation(module: ModuleType) -> None:
    structs = _structs(module)
    assert structs
    for cls in structs:
        hints = _field_hints(cls, module)
        names = [f[0] for f in cls._fields_]
        assert [n for n in names if n not in hints] == [], cls.__name__
        record = cls()
        for name in names:
            value = getattr(record, name)
            hint = hints[name]
            expected = typing.get_origin(hint) or hint
            assert isinstance(value, expected), f"{cls.__name__}.{name}: {type(value)} is not {hint}"


def test_a_block_reads_its_registers_typed() -> None:
    """The blocks' decoders take their block's struct: a CONV group's bytes read as conv_regs_t."""
    regs = dla_regs.conv_regs_t()
    regs.d_src.channels = 3
    hints = _field_hints(dla_regs.conv_regs_t, dla_regs)
    assert hints["d_src"] is dla_regs.cube_regs_t and hints["d_wt_kernels"] is int
    assert regs.d_src.channels == 3
