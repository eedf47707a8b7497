"""The ``pydla`` console script's entry point: the command line (:func:`pydla.cli.main`) with Ctrl-C
answered at any point, the imports of the commands' modules included (they run before
``pydla.cli.main`` could catch anything), and the process ended at once after it.

This module imports nothing of pydla's beyond the package itself, so that the window in which a
Ctrl-C would still print a traceback is Python's own start-up.

Usage (pyproject.toml): ``pydla = "pydla.entry:main"``
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C


def main() -> None:
    """Run the command line and exit with its status; 130 after Ctrl-C, without a traceback and
    without the interpreter's own clean-up (the exit functions registered with atexit still run),
    which for a large model's arrays takes a while: the operating system frees the process's memory
    and closes its files at once."""
    try:
        from pydla.cli import main as cli_main

        status = cli_main()
    except KeyboardInterrupt:
        print("pydla: interrupted", file=sys.stderr)
        status = INTERRUPTED
    if status == INTERRUPTED:
        atexit._run_exitfuncs()  # what must be undone still is (a FUSE mount the daemon made)
        _flush()
        os._exit(INTERRUPTED)
    sys.exit(status)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe: nothing more to say
            stream.flush()


if __name__ == "__main__":
    main()
