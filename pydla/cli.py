"""The ``pydla`` command. Each component adds its subcommands through a ``register`` function.

The options every command takes (``-v``, ``--log-level``) are added here to every subcommand,
nested ones included, so that they work before or after the command's name.

Usage: ``pydla --help``; ``pydla deviceapi generate --check``; ``pydla run m.onnx --log-level info``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from pydla import __version__
from pydla.errors import DlaError, NvError
from pydla.logconfig import ENV, LEVELS, cli_logging, error_lines

VERBOSE_HELP = ("show the whole error when a command fails (its traceback and every detail; without -v an "
                "error is one line), and log at level info (unless --log-level)")
LOG_LEVEL_HELP = (f"log the pydla stack (runtime, KMD, daemon) to stderr at LEVEL: {', '.join(LEVELS)} "
                  f"(default: ${ENV}, else warning)")


class UsageError(DlaError):
    """A command line argparse refuses (an unknown option, a value of the wrong type or not among
    the choices), as one line naming the option and the value, like every other error."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusals are errors like the commands' own: one line naming the
    option and the value, exit code 1 (argparse prints its usage and exits 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(NvError.BadParameter, usage_message(message, self.prog))

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """As argparse's; arguments no command takes are named with the command they were given to."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = [getattr(parsed, "command", None)] + [
                value for name, value in sorted(vars(parsed).items()) if name.endswith("_command")]
            prog = " ".join([self.prog, *(c for c in command if isinstance(c, str))])
            raise UsageError(NvError.BadParameter,
                             f"unrecognized arguments: {' '.join(extra)} ({prog} --help shows the usage)")
        return parsed


# argparse's wording -> the command line's ("argument --seed: invalid int value: 'abc'").
_ARGUMENT = re.compile(r"argument (?P<flag>[^:]+): (?P<what>.*)", re.S)
_INVALID_VALUE = re.compile(r"invalid (?P<type>\w+) value: (?P<value>.*)", re.S)
_INVALID_CHOICE = re.compile(r"invalid choice: (?P<value>.*?) \(choose from (?P<choices>.*)\)", re.S)
_TYPE_NAMES = {"int": "an integer", "float": "a number", "Path": "a path"}


def usage_message(message: str, prog: str) -> str:
    """argparse's ``message`` as the command line words an error: the option (or COMMAND) and the
    value first, then what it must be; a hint to ``PROG --help`` where the usage says more."""
    found = _ARGUMENT.fullmatch(message)
    if found is None:  # "the following arguments are required: X", "unrecognized arguments: X"
        return f"{message} ({prog} --help shows the usage)"
    flag, what = found["flag"].split("/")[-1], found["what"]
    if flag in ("COMMAND", "SUBCOMMAND") and (choice := _INVALID_CHOICE.fullmatch(what)) is not None:
        choices = ", ".join(c.strip(" '") for c in choice["choices"].split(","))
        return f"{choice['value']} is not a {prog} command: choose from {choices}"
    if (value := _INVALID_VALUE.fullmatch(what)) is not None:
        kind = _TYPE_NAMES.get(value["type"], f"a {value['type']} value")
        return f"{flag} {value['value']}: not {kind}"
    if (choice := _INVALID_CHOICE.fullmatch(what)) is not None:
        choices = ", ".join(c.strip(" '") for c in choice["choices"].split(","))
        return f"{flag} {choice['value']}: choose from {choices}"
    return f"{flag}: {what} ({prog} --help shows the usage)"


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
    parser = Parser(
        prog="pydla",
        description="pydla: an NVDLA-style accelerator software stack in Python.",
        epilog="Run 'pydla COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"pydla {__version__}")
    add_common_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    from pydla import cache, conformance, demo, devices, run, runner_cli
    from pydla.compiler import cli as compiler_cli
    from pydla.compiler.onnx_check import check_onnx_content
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
    loadable_cli.register(commands, check_content=check_onnx_content)  # the loadable side knows no ONNX
    deviceapi_cli.register(commands)
    trace_cli.register(commands)
    conformance.register(commands)
    runner_cli.register(commands)
    for sub in _subcommands(parser):
        add_common_options(sub, top=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:  # building the parser imports the commands' modules: a Ctrl-C there is an interrupt too
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("pydla: interrupted", file=sys.stderr)
        return 130
    except UsageError as e:
        verbose = any(a in ("-v", "--verbose") for a in (sys.argv[1:] if argv is None else argv))
        print("\n".join(error_lines(e, verbose=verbose)), file=sys.stderr)
        return 1
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
