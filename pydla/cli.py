"""The ``pydla`` command. Each component adds its subcommands through a ``register`` function.

Usage: ``pydla --help``; ``pydla deviceapi generate --check``.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from pydla import __version__
from pydla.errors import DlaError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pydla",
        description="pydla: an NVDLA-style accelerator software stack in Python.",
        epilog="Run 'pydla COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"pydla {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show a traceback when a command fails")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    from pydla import demo, run
    from pydla.compiler import cli as compiler_cli
    from pydla.deviceapi import cli as deviceapi_cli
    from pydla.loadable import cli as loadable_cli

    demo.register(commands)
    run.register(commands)
    if sys.platform.startswith("linux"):
        from pydla.linux import daemon

        daemon.register(commands)
    compiler_cli.register(commands)
    loadable_cli.register(commands)
    deviceapi_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.func(args)
        return result
    except DlaError as e:
        if args.verbose:
            traceback.print_exc()
        print(f"pydla: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pydla: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
