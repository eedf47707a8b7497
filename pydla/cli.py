"""The ``pydla`` command. Each component adds its subcommands through a ``register`` function.

The options every command takes (``-v``, ``--log-level``) are added here to every subcommand,
nested ones included, so that they work before or after the command's name.

Usage: ``pydla --help``; ``pydla deviceapi generate --check``; ``pydla run m.onnx --log-level info``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydla import __version__
from pydla.errors import DlaError
from pydla.logconfig import ENV, LEVELS, cli_logging, error_lines

VERBOSE_HELP = ("show the whole error when a command fails (its traceback and every detail; without -v an "
                "error is one line), and log at level info (unless --log-level)")
LOG_LEVEL_HELP = (f"log the pydla stack (runtime, KMD, daemon) to stderr at LEVEL: {', '.join(LEVELS)} "
                  f"(default: ${ENV}, else warning)")


def add_common_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``-v`` and ``--log-level``. On a subcommand their default is SUPPRESS, so a value given before
    the subcommand's name is not overwritten by the subcommand's default."""
    group = parser.add_argument_group("common options")
    group.add_argument("-v", "--verbose", action="store_true",
                       default=False if top else argparse.SUPPRESS, help=VERBOSE_HELP)
    group.add_argument("--log-level", metavar="LEVEL", default=None if top else argparse.SUPPRESS,
                       help=LOG_LEVEL_HELP)


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every subcommand parser under ``parser``, nested ones included, each once (aliases share one)."""
    found: dict[int, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if id(sub) not in found:
                    found[id(sub)] = sub
                    for nested in _subcommands(sub):
                        found.setdefault(id(nested), nested)
    return list(found.values())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pydla",
        description="pydla: an NVDLA-style accelerator software stack in Python.",
        epilog="Run 'pydla COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"pydla {__version__}")
    add_common_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    from pydla import cache, demo, devices, run
    from pydla.compiler import cli as compiler_cli
    from pydla.deviceapi import cli as deviceapi_cli
    from pydla.kernels import cli as kernel_cli
    from pydla.loadable import cli as loadable_cli
    from pydla.trace import cli as trace_cli

    demo.register(commands)
    run.register(commands)
    devices.register(commands)
    if sys.platform.startswith("linux"):
        from pydla.linux import daemon

        daemon.register(commands)
    compiler_cli.register(commands)
    kernel_cli.register(commands)
    cache.register(commands)
    loadable_cli.register(commands)
    deviceapi_cli.register(commands)
    trace_cli.register(commands)
    for sub in _subcommands(parser):
        add_common_options(sub, top=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:  # building the parser imports the commands' modules: a Ctrl-C there is an interrupt too
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("pydla: interrupted", file=sys.stderr)
        return 130
    try:
        with cli_logging(args.log_level, verbose=args.verbose):
            result: int = args.func(args)
        return result
    except DlaError as e:
        print("\n".join(error_lines(e, verbose=args.verbose)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pydla: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
