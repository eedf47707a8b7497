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
from pydla.kernels import MEMREF_BYTES, build, check_elf
from pydla.kernels.toolchain import CC_ENV, GCC, Toolchain, find_toolchain, toolchain_of, ziglang_toolchain
from pydla.shave_kernel import ShaveKernel, loadable

ROOT = Path(__file__).resolve().parent.parent
SCALE_ADD = ROOT / "examples" / "kernels" / "scale_add.c"
RNG = np.random.default_rng(18)

needs_toolchain = pytest.mark.skipif(build.compiler() is None,
                                     reason=f"no RISC-V C compiler: {build.INSTALL_HINT}")
ZIG = ziglang_toolchain()
needs_zig = pytest.mark.skipif(ZIG is None, reason="the ziglang package (pip install 'pydla[kernels]', part "
                                                   "of 'pydla[dev]') is not installed")

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
        pytest.skip(f"no RISC-V C compiler: {build.INSTALL_HINT}")
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


@needs_toolchain
def test_a_failed_build_leaves_no_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.c"
    bad.write_text("void bad(void) { undeclared(); }\n")
    out = tmp_path / "bad.elf"
    with pytest.raises(pydla.DlaError, match="the build failed"):
        build.build_kernel(bad, output=out)
    assert main(["kernel", "build", str(bad)]) == 1
    assert "undeclared" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.c"]  # no empty or partial ELF, no temporary
    # An ELF already there stays as it was when a rebuild fails, and is replaced whole when one succeeds.
    out.write_bytes(b"the previous build")
    with pytest.raises(pydla.DlaError, match="the build failed"):
        build.build_kernel(bad, output=out)
    assert out.read_bytes() == b"the previous build"
    elf = build.build_kernel(SCALE_ADD, output=out)
    assert out.read_bytes() == elf and sorted(p.name for p in tmp_path.iterdir()) == ["bad.c", "bad.elf"]
    with pytest.raises(pydla.DlaError, match=r"nowhere/k\.elf: cannot write the kernel") as e:
        build.build_kernel(SCALE_ADD, output=tmp_path / "nowhere" / "k.elf")
    assert e.value.code == pydla.NvError.FileWriteFailed


def test_the_compiler_is_found_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$PYDLA_RISCV_CC, then riscv64-unknown-elf-gcc on PATH, then zig's from the ziglang package."""
    import importlib.util

    gcc = tmp_path / "bin" / GCC
    gcc.parent.mkdir()
    gcc.write_text("#!/bin/sh\nexit 1\n")
    gcc.chmod(0o755)
    monkeypatch.setenv("PATH", str(gcc.parent))
    monkeypatch.setenv(CC_ENV, "/opt/riscv/bin/my-gcc")
    assert find_toolchain() == Toolchain(("/opt/riscv/bin/my-gcc",), "gcc", CC_ENV)
    monkeypatch.setenv(CC_ENV, "zig cc")
    assert find_toolchain() == Toolchain(("zig", "cc"), "zig", CC_ENV)
    monkeypatch.delenv(CC_ENV)
    assert find_toolchain() == Toolchain((str(gcc),), "gcc", "PATH")
    assert build.reference_toolchain() == Toolchain((str(gcc),), "gcc", "PATH")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_toolchain() == ziglang_toolchain()
    assert build.reference_toolchain() is None  # zig's bytes are not the committed ELFs'
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert find_toolchain() is None
    # With none of them the error names all three and the pip command.
    with pytest.raises(pydla.DlaError) as e:
        build.build_kernel(SCALE_ADD)
    assert e.value.code == pydla.NvError.NotSupported
    for fragment in ("pip install 'pydla[kernels]'", "apt-get install gcc-riscv64-unknown-elf", CC_ENV):
        assert fragment in e.value.message, fragment
    with pytest.raises(pydla.DlaError, match="apt-get install gcc-riscv64-unknown-elf") as e:
        build.stale_kernels()  # the committed ELFs are checked with Debian's gcc only
    assert e.value.code == pydla.NvError.NotSupported


def test_a_compiler_command_takes_its_own_flags() -> None:
    assert toolchain_of("riscv64-unknown-elf-gcc").cflags()[:2] == ["-march=rv32imf", "-mabi=ilp32f"]
    assert toolchain_of("riscv64-unknown-elf-gcc").ldflags()[0] == "-Wl,--no-relax"
    for command, argv in (("zig cc", ("zig", "cc")), ("/opt/zig/zig", ("/opt/zig/zig", "cc")),
                          ("python3 -m ziglang cc", ("python3", "-m", "ziglang", "cc")),
                          ("python3 -m ziglang", ("python3", "-m", "ziglang", "cc"))):
        tc = toolchain_of(command)
        assert (tc.kind, tc.command) == ("zig", argv), command
        assert tc.cflags()[:3] == ["-target", "riscv32-freestanding-none", "-mcpu=generic_rv32+m+f"]
        assert "-mno-relax" in tc.ldflags() and "-Wl,--no-relax" not in tc.ldflags()


def test_gcc_gets_the_options_the_shipped_kernels_were_built_with(tmp_path: Path) -> None:
    """The command line a gcc runs (a stand-in recording its arguments): the committed ELFs are
    Debian's gcc's bytes for exactly these options, which CI checks (tools/build-kernels --check)."""
    record = tmp_path / "argv"
    gcc = tmp_path / GCC
    gcc.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}\n"
                   "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && printf '\\177ELF' > \"$2\"; shift; done\n")
    gcc.chmod(0o755)
    assert build.build(build.SOURCE_DIR / "clamp.c", str(gcc)) == b"\x7fELF"
    argv = record.read_text().splitlines()
    include = str(build.INCLUDE_DIR)
    assert argv[:17] == ["-march=rv32imf", "-mabi=ilp32f", "-O2", "-ffreestanding", "-nostdlib",
                         "-fno-builtin", "-msmall-data-limit=0", "-fno-ident", "-g0", "-std=gnu11", "-Wall",
                         "-Wextra", "-Werror", "-I", include, "-I", "."]
    assert argv[17:19] == ["clamp.c", "-o"]
    assert argv[20].startswith("-Wl,-T,") and argv[20].endswith("link.ld")
    assert argv[21:] == ["-Wl,-e,clamp", "-Wl,--no-relax", "-Wl,--build-id=none", "-s"]


def test_without_the_toolchain_the_error_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(pydla.DlaError, match="cannot run the RISC-V compiler") as e:
        build.build_kernel(SCALE_ADD, cc=str(tmp_path / "no-such-gcc"))
    assert e.value.code == pydla.NvError.NotSupported
    assert "pip install 'pydla[kernels]'" in e.value.message


@needs_zig
def test_zig_from_pypi_builds_kernels_that_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """zig's compiler (the kernels extra), whichever compiler is found first: the example kernel
    built with it runs as numpy says, the same source builds to the same bytes, and the build leaves
    nothing in the user's caches (zig's caches live in the build's temporary directory)."""
    assert ZIG is not None
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    monkeypatch.delenv("ZIG_GLOBAL_CACHE_DIR", raising=False)
    elf = build.build_kernel(SCALE_ADD, cc=ZIG, output=tmp_path / "k.elf")
    assert not (tmp_path / "home").exists()
    assert elf == build.build_kernel(SCALE_ADD, cc=ZIG)
    x = RNG.standard_normal((7, 9)).astype(np.float32)
    with ShaveKernel(tmp_path / "k.elf") as k:
        np.testing.assert_allclose(k(x, params=np.array([3.0, -2.0], np.float32)),
                                   x * np.float32(3.0) - np.float32(2.0), rtol=1e-6, atol=1e-6)
    # The shipped kernels' sources build with it too (-Wall -Wextra -Werror: clang's warnings as well).
    for source in build.sources():
        assert build.build(source, ZIG)[:4] == b"\x7fELF", source.name


def test_the_help_says_what_a_kernel_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["kernel", "build", "--help"])
    text = capsys.readouterr().out
    for fragment in ("MemRefData", "--entry", "apt-get install gcc-riscv64-unknown-elf", "ai.pydla",
                     "pip install 'pydla[kernels]'", "$PYDLA_RISCV_CC"):
        assert fragment in text


# -- running ------------------------------------------------------------------------------------------

def test_scale_add_on_arrays_agrees_with_numpy(kernels: dict[str, Path]) -> None:
    x = RNG.standard_normal((3, 5, 40)).astype(np.float32)
    with ShaveKernel(kernels["scale_add"]) as k:
        y = k(x, params=np.array([2.5, -1.0], np.float32))
        # The compiler may fuse x * a + b into one fmadd (one rounding): within an ulp of numpy's two.
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
