"""The SHAVE contracts: the generated MemRefData and ClampParams have exactly the byte layout of the
VPUX software layers' packed C structs (written out below as the design document declares them),
in C (compiled with cc against the generated header) and in the ctypes the compiler packs with."""

from __future__ import annotations

import ctypes
import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

from pydla.deviceapi import generate
from pydla.deviceapi.generated import shave as S

# The design's structs, verbatim but for C (f16 is its binary16 bits; C++ references become C).
SEED = """
#include <stdint.h>
typedef uint16_t f16;
struct __attribute__((packed)) SeedMemRefData {
    uint32_t dataAddr;
    uint32_t isStatic;
    uint32_t numDims;
    uint32_t dimsAddr;
    uint32_t stridesAddr;
    uint32_t dataType;
    uint64_t dimsOrder;
};
struct __attribute__((packed)) SeedClampParams {
    struct SeedMemRefData input;
    struct SeedMemRefData output;
    f16 minVal;
    f16 maxVal;
};
"""
FIELDS = {
    "MemRefData": ["dataAddr", "isStatic", "numDims", "dimsAddr", "stridesAddr", "dataType", "dimsOrder"],
    "ClampParams": ["input", "output", "minVal", "maxVal"],
}


def test_ctypes_layout_is_the_seed_layout() -> None:
    assert ctypes.sizeof(S.MemRefData) == 32 and ctypes.sizeof(S.ClampParams) == 68
    assert [getattr(S.MemRefData, f).offset for f in FIELDS["MemRefData"]] == [0, 4, 8, 12, 16, 20, 24]
    assert [getattr(S.ClampParams, f).offset for f in FIELDS["ClampParams"]] == [0, 32, 64, 66]
    assert S.WIN_F == 0x1F000000
    assert len({S.WIN_D, S.WIN_E, S.WIN_F, S.RT_WIN}) == 4
    windows = sorted([(S.WIN_D, S.WIN_D_BYTES), (S.WIN_E, S.WIN_E_BYTES), (S.RT_WIN, S.RT_WIN_BYTES),
                      (S.RT_CTRL, 0x1000), (S.WIN_F, S.WIN_F_MAX_BYTES)])
    assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(windows))  # no window overlaps another


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")
def test_c_header_matches_the_seed_structs(tmp_path: Path) -> None:
    lines = [SEED, "#include <stdio.h>", "#include <stddef.h>", '#include "pydla/shave.h"',
             "int main(void) {"]
    for name, fields in FIELDS.items():
        lines.append(f'printf("{name} %zu %zu\\n", sizeof({name}), sizeof(struct Seed{name}));')
        for f in fields:
            lines.append(f'printf("{name}.{f} %zu %zu\\n", offsetof({name}, {f}), '
                         f"offsetof(struct Seed{name}, {f}));")
    lines += ['printf("WIN_F %u\\n", SHAVE_WIN_F);', "return 0;", "}"]
    (tmp_path / "layout.c").write_text("\n".join(lines) + "\n")
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-I", str(generate.include_dir()),
                    str(tmp_path / "layout.c"), "-o", str(tmp_path / "layout")], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([str(tmp_path / "layout")], check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()]
    for row in rows[:-1]:
        assert row[1] == row[2], row  # the generated layout is the seed's
    assert rows[-1] == ["WIN_F", str(0x1F000000)]
    python = {r[0]: int(r[1]) for r in rows[:-1]}
    assert python["MemRefData"] == ctypes.sizeof(S.MemRefData)
    assert python["ClampParams.maxVal"] == S.ClampParams.maxVal.offset


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")
def test_every_shave_struct_matches_ctypes_in_c(tmp_path: Path) -> None:
    structs = [v for v in vars(S).values() if isinstance(v, type) and issubclass(v, ctypes.Structure)
               and v.__module__ == S.__name__]
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "pydla/shave.h"', "int main(void) {"]
    expected = []
    for cls in structs:
        lines.append(f'printf("%zu\\n", sizeof({cls.__name__}));')
        expected.append(ctypes.sizeof(cls))
        for entry in cls._fields_:
            lines.append(f'printf("%zu\\n", offsetof({cls.__name__}, {entry[0]}));')
            expected.append(getattr(cls, entry[0]).offset)
    lines += ["return 0;", "}"]
    (tmp_path / "all.c").write_text("\n".join(lines) + "\n")
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-I", str(generate.include_dir()),
                    str(tmp_path / "all.c"), "-o", str(tmp_path / "all")], check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "all")], check=True, capture_output=True, text=True).stdout
    assert [int(v) for v in out.split()] == expected
