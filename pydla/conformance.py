"""``pydla conformance nvdla DIR``: run NVIDIA's NVDLA regression tests and compare with their goldens.

DIR is laid out as nvdla/sw's regression: one folder per test holding ``<TEST>_fbuf`` (the NVDLA
Loadable) and its golden, ``lead.md5`` (the md5 of the expected image, NVIDIA's pass criterion) and/or
``o_000000.dimg`` (the image itself); the golden may also be in ``<TEST>_<hash>/dla/`` anywhere under
DIR, as in nvdla/sw's ``regression/golden`` (so DIR can be an nvdla/sw checkout's ``regression``).
Each test runs on the hardware configuration its name says (``_small``: nv_small, ``_large``:
nv_large, else nv_full) as NVIDIA's runtime application runs it (no input image, zeroed outputs), and
passes when its first output's ``.dimg`` has the golden's md5 (and bytes). A failure names the first
differing byte when the golden image is there. Exit code 0 only when every test passes.

Usage: ``pydla conformance nvdla ../nvdla-regression``
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydla.errors import DlaError, NvError

FBUF_SUFFIX = "_fbuf"
GOLDEN_IMAGE = "o_000000.dimg"
GOLDEN_MD5 = "lead.md5"
HEADED_SUFFIX = "-headed"


@dataclass(frozen=True)
class RegressionTest:
    name: str
    loadable: Path
    golden: Path  # the folder with lead.md5 and/or o_000000.dimg


def configuration_of(name: str, headed: bool = False) -> str:
    """The NVDLA configuration a regression test runs on, from its name; ``headed``: its headed
    variant (``nv_full-headed``...: the engine scheduler on the device's microcontroller)."""
    suffix = HEADED_SUFFIX if headed else ""
    if re.search(r"_small(_|$)", name):
        return "nv_small" + suffix
    if re.search(r"_large(_|$)", name):
        return "nv_large" + suffix
    return "nv_full" + suffix


def _has_golden(folder: Path) -> bool:
    return (folder / GOLDEN_MD5).is_file() or (folder / GOLDEN_IMAGE).is_file()


def find_tests(root: Path) -> list[RegressionTest]:
    """Every ``*_fbuf`` under ``root`` with its golden folder, by test name."""
    if not root.is_dir():
        raise DlaError(NvError.FileReadFailed, f"{root}: not a directory of NVDLA regression tests")
    goldens: dict[str, Path] = {}
    for md5 in sorted(root.rglob(GOLDEN_MD5)):
        folder = md5.parent
        named = folder.parent if folder.name == "dla" else folder
        goldens.setdefault(named.name, folder)
    tests = []
    for fbuf in sorted(root.rglob(f"*{FBUF_SUFFIX}")):
        if not fbuf.is_file():
            continue
        name = fbuf.name[:-len(FBUF_SUFFIX)]
        if _has_golden(fbuf.parent):
            golden = fbuf.parent
        else:  # nvdla/sw's golden folders are <TEST>_<hash>
            found = [g for key, g in goldens.items() if re.fullmatch(re.escape(name) + r"(_[0-9a-f]+)?", key)]
            golden = found[0] if found else fbuf.parent
        tests.append(RegressionTest(name, fbuf, golden))
    return sorted(tests, key=lambda t: t.name)


def _expected(test: RegressionTest) -> tuple[str | None, bytes | None]:
    """(md5, image bytes) of a test's golden; either may be missing."""
    md5 = image = None
    if (test.golden / GOLDEN_MD5).is_file():
        words = (test.golden / GOLDEN_MD5).read_text(errors="replace").split()
        if not words or not re.fullmatch(r"[0-9a-fA-F]{32}", words[0]):
            raise DlaError(NvError.BadValue, f"{test.golden / GOLDEN_MD5}: not an md5 line")
        md5 = words[0].lower()
    if (test.golden / GOLDEN_IMAGE).is_file():
        image = (test.golden / GOLDEN_IMAGE).read_bytes()
        if md5 is None:
            md5 = hashlib.md5(image).hexdigest()
    return md5, image


def compare(got: bytes, md5: str | None, image: bytes | None) -> str | None:
    """None when ``got`` matches the golden, else why not (the first differing byte when known)."""
    if md5 is None:
        return f"no golden ({GOLDEN_MD5} or {GOLDEN_IMAGE})"
    if hashlib.md5(got).hexdigest() == md5:
        return None
    if image is None:
        return (f"md5 {hashlib.md5(got).hexdigest()}, golden {md5} ({len(got)} bytes; no "
                f"{GOLDEN_IMAGE} to compare)")
    for i, (a, b) in enumerate(zip(got, image, strict=False)):
        if a != b:
            return f"byte {i} of {len(image)} is {a:#04x}, golden {b:#04x}"
    return f"{len(got)} bytes, golden {len(image)} (equal up to byte {min(len(got), len(image))})"


def run_test(test: RegressionTest, port: Any, config: str | None, out_dir: Path | None,
             headed: bool = False, ran_on: list[str] | None = None) -> str | None:
    """Run one test; None when it passes, else why not. ``ran_on`` gets the configuration of the
    device that ran it (a KMD daemon's, through the Linux port)."""
    import pydla
    from pydla.umd.nvdla_app import run_app

    md5, image = _expected(test)
    with pydla.createRuntime(port, config=config or configuration_of(test.name, headed)) as rt:
        if ran_on is not None:
            ran_on.append(rt.port.NvDlaGetDeviceInfo(rt.device).name)
        rt.load(test.loadable)
        if rt.nvdla is None:
            return f"{test.loadable} is not an NVDLA Loadable"
        outputs = run_app(rt)
    if not outputs:
        return "the loadable has no output"
    got = outputs[0][1]
    if out_dir is not None:
        (out_dir / test.name).mkdir(parents=True, exist_ok=True)
        (out_dir / test.name / GOLDEN_IMAGE).write_bytes(got)
    return compare(got, md5, image)


def conformance(root: Path, *, port: Any = None, config: str | None = None, out_dir: Path | None = None,
                select: str | None = None, out: TextIO | None = None, headed: bool = False) -> int:
    """Run every test under ``root`` (or those whose name matches ``select``), print one line each and
    a summary to ``out`` (sys.stdout as it is at the call); the number of failures. ``headed``: on
    the headed variant of each test's configuration (not with ``config``, which names one)."""
    out = sys.stdout if out is None else out
    if headed and config is not None:
        raise DlaError(NvError.BadParameter, "--headed picks the headed variant of each test's "
                                             f"configuration; with --config {config} name a headed "
                                             "configuration instead")
    tests = [t for t in find_tests(root) if select is None or re.search(select, t.name)]
    if not tests:
        raise DlaError(NvError.FileReadFailed, f"{root}: no NVDLA regression tests "
                                               f"(<TEST>/<TEST>{FBUF_SUFFIX})"
                                               + (f" matching {select!r}" if select else ""))
    failed = []
    for test in tests:
        named = config or configuration_of(test.name, headed)
        print(f"{test.name} ({named}) ... ", end="", file=out, flush=True)
        t0 = time.perf_counter()
        ran_on: list[str] = []
        try:
            why = run_test(test, port, config, out_dir, headed, ran_on)
        except DlaError as e:
            why = f"error: {e.message} ({e.code.name})"
        seconds = time.perf_counter() - t0
        where = f" on {ran_on[0]}" if ran_on and ran_on[0] != named else ""  # a daemon's own device
        print("pass" if why is None else f"FAIL: {why}", f"({seconds:.2f} s{where})", file=out, flush=True)
        if why is not None:
            failed.append(test.name)
    print(f"{len(tests) - len(failed)} of {len(tests)} passed" +
          (f"; failed: {', '.join(failed)}" if failed else ""), file=out)
    return len(failed)


NVDLA_DESCRIPTION = (
    "Run NVIDIA's NVDLA KMD regression tests under DIR, laid out as nvdla/sw's regression: "
    "<TEST>/<TEST>_fbuf "
    "with lead.md5 and/or o_000000.dimg, or goldens in <TEST>_<hash>/dla/ anywhere under DIR. Each test runs "
    "on the configuration its name says (_small: nv_small, _large: nv_large, else nv_full) as NVIDIA's "
    "runtime application runs it (no input image, zeroed outputs). Prints pass or FAIL per test as it goes "
    "(on failure the first differing byte of the image), then a summary; exit code 0 only when all pass.")


def register(commands: Any) -> None:
    p = commands.add_parser(
        "conformance", help="run a conformance suite: NVIDIA's NVDLA regression tests",
        description="Run a conformance suite and compare its outputs with the suite's goldens.")
    suites = p.add_subparsers(dest="suite", metavar="SUITE", required=True)
    n = suites.add_parser("nvdla", help="NVIDIA's NVDLA regression tests (nvdla/sw regression layout)",
                          description=NVDLA_DESCRIPTION)
    n.add_argument("dir", type=Path, metavar="DIR", help="the tests: <TEST>/<TEST>_fbuf and its golden")
    n.add_argument("--port", default=None, metavar="inprocess|linux:DIR",
                   help="portability layer (default: $PYDLA_PORT, else inprocess)")
    from pydla.target.config import bundled_configs

    n.add_argument("--config", default=None,
                   help=f"run every test on this configuration ({', '.join(bundled_configs())} or a "
                        "JSON file) instead of the one its name says")
    n.add_argument("--headed", action="store_true",
                   help="run each test on the headed variant of its configuration (nv_full-headed, "
                        "nv_small-headed, nv_large-headed: the engine scheduler on the device's "
                        "microcontroller, reached through the device-API mailbox)")
    n.add_argument("-k", dest="select", default=None, metavar="REGEX", help="only the tests whose "
                   "name matches")
    n.add_argument("--output-dir", type=Path, metavar="DIR", help="write each test's image as DIR/<TEST>/"
                                                                  f"{GOLDEN_IMAGE}")
    n.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    failures = conformance(args.dir, port=args.port, config=args.config, out_dir=args.output_dir,
                           select=args.select, headed=args.headed)
    return 1 if failures else 0
