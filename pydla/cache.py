"""``pydla cache``: where pydla's cache is, what it holds and how big it is; ``pydla cache clear``
empties it (of pydla's files only; :mod:`pydla.cachedir` says which those are).

Usage::

    pydla cache                   # where, what, how big
    pydla cache --json            # the same, one JSON document
    pydla cache clear --yes       # remove the compiled models, the BLAS copy, unfinished writes
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydla.cachedir import BLAS, MODELS, UNFINISHED, Contents, chosen_by, clear, contents
from pydla.errors import DlaError, NvError

WHAT = {
    MODELS: "ONNX models pydla.Session and pydla run compiled, by content: not compiled again",
    BLAS: "numpy's OpenBLAS, copied to load it for this CPU's own kernels",
    UNFINISHED: "temporary files of writes that were interrupted",
}
EPILOG = """\
what is there:
  compiled models    <sha256>.dla: an ONNX model's loadable, keyed by the model (and its external
                     data, custom kernels), the configuration, precision, input shapes and pydla's
                     compiler; pydla.Session, pydla run and pydla.InferenceSession reuse it
  BLAS copy          blas/: numpy's OpenBLAS, copied once so that the device's CONV can load it for
                     this CPU's own kernels (on CPUs where numpy's choice is slower)
  unfinished writes  *.tmp of a write that was interrupted

where it is: $PYDLA_CACHE_DIR, else $XDG_CACHE_HOME/pydla, else ~/.cache/pydla. Everything in it is
made again when needed; `pydla cache clear` removes pydla's files and leaves anything else there.

examples:
  pydla cache
  pydla cache clear --yes
  PYDLA_CACHE_DIR=/tmp/pydla-cache pydla run model.onnx    # another cache for one command
"""


def register(commands: Any) -> None:
    p = commands.add_parser(
        "cache", help="the compile cache: where it is, what it holds, how big; clear it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Show pydla's cache: its directory, the compiled models and other files pydla keeps "
                    "there, and their sizes (the same as `pydla cache show`).",
        epilog=EPILOG)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_show)
    sub = p.add_subparsers(dest="cache_command", metavar="SUBCOMMAND")
    show = sub.add_parser("show", help="where the cache is, what it holds, how big (the default)",
                          description="Where pydla's cache is, what it holds and how big it is.")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS,  # keeps `cache --json show`
                      help="print JSON instead of text")
    show.set_defaults(func=_show)
    c = sub.add_parser("clear", help="remove pydla's files from the cache (asks first, or --yes)",
                       description="Remove the compiled models, the BLAS copy and unfinished writes from "
                                   "pydla's cache; files that are not pydla's stay. Asks first on a "
                                   "terminal; --yes does not ask (needed when stdin is not a terminal).")
    c.add_argument("-y", "--yes", action="store_true", help="remove without asking")
    c.set_defaults(func=_clear)


def _size(n: int) -> str:
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _others(found: Contents) -> str:
    n = len(found.other.files)
    return f"{_files(n)} ({_size(found.other.size)}) that {'is' if n == 1 else 'are'} not pydla's"


def as_dict(found: Contents) -> dict[str, Any]:
    """The cache's contents as ``pydla cache --json`` prints them."""
    return {"path": str(found.root), "chosen_by": chosen_by(), "exists": found.exists,
            "kinds": {k.name: {"files": len(k.files), "bytes": k.size} for k in found.kinds},
            "not_pydlas": {"files": len(found.other.files), "bytes": found.other.size},
            "files": found.files, "bytes": found.size}


def _show(args: argparse.Namespace) -> int:
    found = contents()
    if args.json:
        print(json.dumps(as_dict(found), indent=2))
        return 0
    print(f"pydla's cache: {found.root} ({chosen_by()})")
    if not found.exists:
        print("  empty: the directory does not exist yet (it is made when a model is first compiled)")
        return 0
    for kind in found.kinds:
        print(f"  {kind.name:<18} {_files(len(kind.files)):>10} {_size(kind.size):>10}   {WHAT[kind.name]}")
    print(f"  {'total':<18} {_files(found.files):>10} {_size(found.size):>10}")
    if found.other.files:
        print(f"  also {_others(found)}: `pydla cache clear` leaves them")
    if found.files:
        print("remove them with `pydla cache clear --yes`: all is made again when needed")
    return 0


def _clear(args: argparse.Namespace) -> int:
    found = contents()
    if not found.files:
        print(f"pydla's cache ({found.root}) holds nothing of pydla's: nothing to remove")
        return 0
    what = f"{_files(found.files)} ({_size(found.size)}) from {found.root}"
    if not args.yes:
        if not sys.stdin.isatty():
            raise DlaError(NvError.BadParameter, f"pydla cache clear would remove {what}: add --yes to "
                                                 "confirm (there is no terminal to ask)")
        answer = input(f"remove {what}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing removed")
            return 1
    try:
        removed = clear(found.root)
    except OSError as e:
        raise DlaError(NvError.FileOperationFailed,
                       f"{e.filename or found.root}: cannot remove: {e.strerror or e}") from None
    print(f"removed {_files(len(removed.files))} ({_size(removed.size)}) from {found.root}")
    if found.other.files:
        print(f"left {_others(found)}")
    return 0
