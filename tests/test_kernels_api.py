"""Custom SHAVE kernels from Python: ``pydla kernel build`` (and build_kernel) and
``pydla.ShaveKernel`` on numpy arrays through the runtime, against numpy; the argument convention
(MemRefData per input, per output, then the parameter bytes); the errors a kernel author meets."""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path

import numpy as np
import pytest

import pydla
from pydla.cli import main
from pydla.hw.shave import build
from pydla.kernels import MEMREF_BYTES, ShaveKernel, check_elf, loadable

ROOT = Path(__file__).resolve().parent.parent
SCALE_ADD = ROOT / "examples" / "kernels" / "scale_add.c"
RNG = np.random.default_rng(18)

needs_toolchain = pytest.mark.skipif(build.compiler() is None,
                                     reason="riscv64-unknown-elf-gcc is not installed (apt-get install "
                                            "gcc-riscv64-unknown-elf): custom kernels cannot be built")

# Two inputs (x, y) and a parameter a: out = a * x + y. Its own RW data too (a .bss table and an
# initialised .data word), which pydla's dims and strides must not overwrite.
AXPY = r"""
#include "memref.h"

typedef struct __attribute__((packed)) {
    MemRefData x, y, out;
    float a;
} AxpyParams;

static float scratch[512];      /* .bss in WIN_E, after the argument area */
static volatile uint32_t magic = 0x5eed;  /* .data */

void axpy(uint32_t argsAddr, uint32_t argsSize) {
    KERNEL_CHECK(argsSize == sizeof(AxpyParams));
    KERNEL_CHECK(magic == 0x5eed);
    const AxpyParams *p = (const AxpyParams *)(uintptr_t)argsAddr;
    view_t x, y, out;
    view_of(&p->x, &x);
    view_of(&p->y, &y);
    output_view(&p->out, &x, &out);
    int32_t n = 1;
    for (uint32_t i = 0; i < x.ndims; i++) n *= x.dims[i];
    const float *xs = (const float *)x.data, *ys = (const float *)y.data;
    float *os = (float *)out.data;
    for (int32_t i = 0; i < n; i++) {   /* dense tensors: pydla's MemRefData are */
        scratch[i % 512] = p->a * xs[i];
        os[i] = scratch[i % 512] + ys[i];
    }
}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if build.compiler() is None:
        pytest.skip("riscv64-unknown-elf-gcc is not installed (apt-get install gcc-riscv64-unknown-elf)")
    d = tmp_path_factory.mktemp("kernels")
    (d / "axpy.c").write_text(AXPY)
    out = {}
    for src in (SCALE_ADD, d / "axpy.c"):
        out[src.stem] = d / f"{src.stem}.elf"
        out[src.stem].write_bytes(build.build_kernel(src))
    return out


# -- building -------------------------------------------------------------------------------------------

@needs_toolchain
def test_the_build_command_writes_the_elf_the_api_builds(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "k.elf"
    assert main(["kernel", "build", str(SCALE_ADD), "-o", str(out)]) == 0
    assert "entry 'scale_add'" in capsys.readouterr().out
    assert out.read_bytes() == build.build_kernel(SCALE_ADD)  # reproducible, whoever builds it
    assert check_elf(out.read_bytes(), "k").entry_offset == 0
    src = tmp_path / "copy.c"
    src.write_text(SCALE_ADD.read_text().replace("void scale_add(", "void copy("))
    assert main(["kernel", "build", str(src), "--quiet"]) == 0  # default: beside the source
    assert (tmp_path / "copy.elf").is_file() and capsys.readouterr().out == ""


@needs_toolchain
def test_build_errors_name_the_cause(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.c"
    bad.write_text("void bad(unsigned a, unsigned b) { undeclared(a, b); }\n")
    failed = r"(?s)kernel bad: the build failed:\n.*bad\.c:1.*undeclared"  # the compiler's own words
    with pytest.raises(pydla.DlaError, match=failed) as e:
        build.build_kernel(bad)
    assert e.value.code == pydla.NvError.BadValue
    with pytest.raises(pydla.DlaError, match="no function 'nope' to enter") as e:
        build.build_kernel(SCALE_ADD, entry="nope")
    with pytest.raises(pydla.DlaError, match="no such file") as e:
        build.build_kernel(tmp_path / "missing.c")
    assert e.value.code == pydla.NvError.FileNotFound
    with pytest.raises(pydla.DlaError, match="not a C identifier"):
        build.build_kernel(SCALE_ADD, entry="a-b")
    with pytest.raises(pydla.DlaError, match="no such directory"):
        build.build_kernel(SCALE_ADD, include_dirs=[tmp_path / "nowhere"])
    # The command line says it in one line, with the compiler's output.
    assert main(["kernel", "build", str(bad)]) == 1
    assert "undeclared" in capsys.readouterr().err


def test_without_the_toolchain_the_error_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(pydla.DlaError, match="apt-get install gcc-riscv64-unknown-elf") as e:
        build.build_kernel(SCALE_ADD, cc=str(tmp_path / "no-such-gcc"))
    assert e.value.code == pydla.NvError.NotSupported


def test_the_help_says_what_a_kernel_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["kernel", "build", "--help"])
    text = capsys.readouterr().out
    for fragment in ("MemRefData", "--entry", "apt-get install gcc-riscv64-unknown-elf", "ai.pydla"):
        assert fragment in text


# -- running ------------------------------------------------------------------------------------------

def test_scale_add_on_arrays_agrees_with_numpy(kernels: dict[str, Path]) -> None:
    x = RNG.standard_normal((3, 5, 40)).astype(np.float32)
    with ShaveKernel(kernels["scale_add"]) as k:
        y = k(x, params=np.array([2.5, -1.0], np.float32))
        # gcc fuses x * a + b into one fmadd (one rounding): within an ulp of numpy's two.
        np.testing.assert_allclose(y, x * np.float32(2.5) + np.float32(-1.0), rtol=1e-6, atol=1e-6)
        # A ctypes struct, bytes: the same parameter bytes.
        class P(ctypes.LittleEndianStructure):
            _pack_ = 1
            _fields_ = [("a", ctypes.c_float), ("b", ctypes.c_float)]

        np.testing.assert_allclose(k(x, params=P(0.5, 3.0)), x * np.float32(0.5) + np.float32(3.0), atol=1e-6)
        np.testing.assert_array_equal(k(x, params=struct.pack("<ff", 1, 1)), x + 1)
        # A strided view is made dense first; a shape of one dimension works as well.
        np.testing.assert_array_equal(k(x[:, ::2, 1:], params=struct.pack("<ff", 1, 1)), x[:, ::2, 1:] + 1)
        v = RNG.standard_normal(1000).astype(np.float32)
        np.testing.assert_array_equal(k(v, params=struct.pack("<ff", -1, 0)), -v)


def test_two_inputs_and_the_kernels_own_rw_data(kernels: dict[str, Path]) -> None:
    x, y = (RNG.standard_normal((64, 33)).astype(np.float32) for _ in range(2))
    with ShaveKernel(kernels["axpy"]) as k:
        out, = k.run([x, y], outputs=[(x.shape, np.float32)], params=np.float32(3.0).tobytes())
        np.testing.assert_allclose(out, np.float32(3.0) * x + y, rtol=1e-6, atol=1e-6)  # fmadd


def test_loadables_are_cached_per_shapes_and_params(kernels: dict[str, Path]) -> None:
    x = RNG.standard_normal((8, 8)).astype(np.float32)
    p = struct.pack("<ff", 2, 0)
    with ShaveKernel(kernels["scale_add"]) as k:
        k(x, params=p)
        first = dict(k._sessions)
        for _ in range(3):
            np.testing.assert_array_equal(k(x * 2, params=p), x * 4)
        assert dict(k._sessions) == first  # same loadable, loaded once
        k(x[:4], params=p)
        k(x, params=struct.pack("<ff", 3, 0))
        assert len(k._sessions) == 3


def test_the_loadable_lists_the_kernel_and_its_task_list(kernels: dict[str, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    image = check_elf(kernels["scale_add"].read_bytes(), "scale_add")
    f32 = np.dtype(np.float32)
    blob = loadable(image, [((4, 4), f32)], [((4, 4), f32)], b"\0" * 8, name="scale_add")
    (tmp_path / "k.dla").write_bytes(blob)
    assert main(["info", str(tmp_path / "k.dla")]) == 0
    out = capsys.readouterr().out
    assert "shave kernels: shave_scale_add" in out
    assert f"{2 * MEMREF_BYTES + 8} argument bytes" in out


def test_errors_name_the_kernel_and_the_thing(kernels: dict[str, Path], tmp_path: Path) -> None:
    k = ShaveKernel(kernels["scale_add"])
    p = struct.pack("<ff", 1, 0)
    with pytest.raises(pydla.DlaError, match=r"kernel 'scale_add': .*need \d+ bytes of CMX") as e:
        k(np.zeros((1024, 1024), np.float32), params=p)
    assert e.value.code == pydla.NvError.InsufficientMemory
    with pytest.raises(pydla.DlaError, match="input 0 is float64") as e:
        k(np.zeros(4), params=p)
    assert e.value.code == pydla.NvError.NotSupported
    with pytest.raises(pydla.DlaError, match=r"output 0 of shape \(2, 0\)"):
        k(np.zeros(4, np.float32), params=p, output=((2, 0), np.float32))
    with pytest.raises(pydla.DlaError, match="params must be bytes"):
        k(np.zeros(4, np.float32), params=1.5)
    with pytest.raises(pydla.DlaError, match="no such file") as e:
        ShaveKernel(tmp_path / "missing.elf")
    assert e.value.code == pydla.NvError.FileNotFound
    (tmp_path / "text.elf").write_text("not an ELF at all, though named like one and long enough to be read")
    with pytest.raises(pydla.DlaError, match="kernel 'text': not a SHAVE kernel ELF: magic") as e:
        ShaveKernel(tmp_path / "text.elf")
    assert e.value.code == pydla.NvError.BadValue
    with pytest.raises(pydla.DlaError, match="no symbol table"):
        ShaveKernel(kernels["scale_add"], entry="scale_add")  # stripped: --entry at build time instead
    with pytest.raises(pydla.DlaError, match="'small' has no SHAVE tiles") as e:
        ShaveKernel(kernels["scale_add"], config="small")(np.zeros(4, np.float32), params=p)
    assert e.value.code == pydla.NvError.NotSupported
    k.close()


def test_a_kernel_fault_is_an_error_naming_it_and_the_kernel_runs_again(kernels: dict[str, Path]) -> None:
    x = np.ones((4, 4), np.float32)
    with ShaveKernel(kernels["scale_add"]) as k:
        # Four parameter bytes where the kernel checks for eight: its KERNEL_CHECK stops the tile.
        with pytest.raises(pydla.DlaError, match=r"kernel 'scale_add': .*TRAP"):
            k(x, params=b"\0" * 4)
        np.testing.assert_array_equal(k(x, params=struct.pack("<ff", 2, 1)), x * 3)


def test_the_pages_show_the_example_kernel_as_it_is() -> None:
    """The README's and the kernel authors' guide's C block is examples/kernels/scale_add.c (which
    the tests and the pages' Python blocks build and run)."""
    source = SCALE_ADD.read_text()
    for page in (ROOT / "README.md", ROOT / "docs" / "guide" / "kernel-authors.md"):
        text = page.read_text()
        start = text.index("```c\n") + len("```c\n")
        assert text[start:text.index("```", start)] == source, page
