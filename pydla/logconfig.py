"""Logging of the ``pydla`` logger hierarchy (UMD, KMD, daemon, FUSE server...) to stderr.

Every pydla module logs to ``logging.getLogger("pydla....")`` and configures nothing itself: an
application decides where its logs go. Two conveniences turn them on without code:

- the command line: ``pydla --log-level debug run ...`` (or ``-v``, which means info);
- the ``PYDLA_LOG`` environment variable (debug, info, warning or error), read by the command line
  (its ``--log-level`` wins) and, when set, by :func:`configure_from_env` for library use.

Both install one handler on the ``pydla`` logger writing ``HH:MM:SS.mmm logger LEVEL: message``
to stderr. Records still propagate, so an application's own handlers see them as well.

How the command line shows an error is decided here too (:func:`error_lines`): one line, control
characters escaped, a long message cut with a hint; the whole of it, and the detail a library
reported behind it (:class:`Detail`), with ``-v``. A tool's own diagnostics that an error carries
(the lines after its first: a C compiler's output, a spec's problems) follow that line, indented.

Usage::

    with cli_logging(args.log_level, verbose=args.verbose):
        run_the_command()
    configure_from_env()        # library: does nothing unless PYDLA_LOG is set
    raise DlaError(NvError.BadValue, f"shape inference failed: {first_line}") from Detail(report)
"""

from __future__ import annotations

import logging
import os
import sys
import textwrap
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pydla.errors import DlaError, NvError

ENV = "PYDLA_LOG"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}
FORMAT = "%(asctime)s.%(msecs)03d %(name)s %(levelname)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"
ROOT = "pydla"


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the current ``sys.stderr`` at each record, not the one there when it was made (a test
    harness or a caller may have replaced it since)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr  # Handler.handle holds self.lock here
        super().emit(record)


def parse_level(text: str, where: str) -> int:
    """The logging level named ``text``; DlaError BadParameter naming ``where`` and the value."""
    level = LEVELS.get(text.strip().lower())
    if level is None:
        raise DlaError(NvError.BadParameter,
                       f"{where} {text!r}: use one of {', '.join(LEVELS)}")
    return level


def cli_level(option: str | None, *, verbose: bool = False,
              environ: Mapping[str, str] | None = None) -> int:
    """The level the command line uses: ``--log-level`` if given (an unknown one is an error), else
    ``PYDLA_LOG`` (an unknown one is warned about, as a library does, and warning used), else
    warning; ``-v`` without ``--log-level`` makes it at least info (never quieter than ``PYDLA_LOG``)."""
    if option is not None:
        return parse_level(option, "--log-level")
    level = env_level(os.environ if environ is None else environ)[0]
    return min(level, logging.INFO) if verbose else level


def env_level(environ: Mapping[str, str]) -> tuple[int, DlaError | None]:
    """``PYDLA_LOG``'s level (warning when unset), and the error of a value that is no level (warning
    is then used: an environment variable set for every program must not stop one)."""
    env = environ.get(ENV)
    if not env:
        return logging.WARNING, None
    try:
        return parse_level(env, f"${ENV}"), None
    except DlaError as e:
        return logging.WARNING, e


_warned: set[str] = set()  # the bad PYDLA_LOG values warned about: each once per process


def warn_bad_env(error: DlaError | None, logger: logging.Logger) -> None:
    """Warn once about a bad ``PYDLA_LOG`` (whoever reads it first: the library's import, the command
    line), naming the variable, the value and what is used instead."""
    if error is not None and error.message not in _warned:
        _warned.add(error.message)
        logger.warning("%s; using warning", error.message)


def _ours(logger: logging.Logger) -> list[logging.Handler]:
    return [h for h in logger.handlers if isinstance(h, StderrHandler)]


@contextmanager
def cli_logging(option: str | None, *, verbose: bool = False,
                environ: Mapping[str, str] | None = None) -> Iterator[int]:
    """Log the ``pydla`` hierarchy to stderr at the command line's level while the block runs, then
    put back what was there (so that ``cli.main`` called in-process leaves logging as it found it)."""
    level = cli_level(option, verbose=verbose, environ=environ)
    logger = logging.getLogger(ROOT)
    before_level, before = logger.level, _ours(logger)
    for h in before:  # the library hook's handler: replaced, not doubled
        logger.removeHandler(h)
    handler = StderrHandler()
    logger.addHandler(handler)
    logger.setLevel(level)
    if option is None:
        warn_bad_env(env_level(os.environ if environ is None else environ)[1], logger)
    try:
        yield level
    finally:
        logger.removeHandler(handler)
        for h in before:
            logger.addHandler(h)
        logger.setLevel(before_level)


def configure_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """For library use: when ``PYDLA_LOG`` is set, log the ``pydla`` hierarchy to stderr at that level;
    otherwise do nothing (a library leaves logging to the application). Never raises: a bad value
    logs a warning and uses warning. Calling it again does not add a second handler. Returns
    whether a handler is installed."""
    env = (os.environ if environ is None else environ).get(ENV)
    if not env:
        return False
    logger = logging.getLogger(ROOT)
    level, bad = env_level({ENV: env})
    if not _ours(logger):
        logger.addHandler(StderrHandler())
    logger.setLevel(level)
    warn_bad_env(bad, logger)
    return True


# -- how the command line shows an error ---------------------------------------------------------

# A message longer than this is cut at a word on the command line (-v shows it whole): a terminal
# line or two, which every message pydla writes on purpose fits.
MESSAGE_CHARS = 400
VERBOSE_HINT = "(-v shows the whole message)"
DIAGNOSTIC_LINES = 20  # a tool's diagnostics shown under an error's line without -v


class Detail(Exception):
    """The long form behind a one-line :class:`DlaError` message (a library's report over several
    lines, say), chained as its cause: the command line shows it with ``-v`` only.

    Usage: ``raise DlaError(NvError.BadValue, f"shape inference failed: {first}") from Detail(text)``
    """


def printable(text: str) -> str:
    """``text`` with every character that is not printable (newlines, tabs, escape sequences, other
    control and format characters, line separators) written as its escape (``\\n``, ``\\x1b``,
    ``\\u2028``): it stays on one line and cannot drive the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def one_line(text: str, limit: int = MESSAGE_CHARS) -> tuple[str, bool]:
    """``text`` as one line of at most about ``limit`` characters (control characters escaped, cut
    after the last whole word that fits, with "..."), and whether anything was left out."""
    line = printable(text.strip())
    if len(line) <= limit:
        return line, False
    cut = line.rfind(" ", limit // 2, limit)
    return line[:cut if cut > 0 else limit].rstrip(" ,;:") + " ...", True


def first_line(error: BaseException, limit: int = 300) -> str:
    """The first line of a library's message for ``error`` (its type's name when it has none), as
    one printable line of at most about ``limit`` characters: for a DlaError's message, the whole of
    it chained as a :class:`Detail`."""
    line = next((part for part in str(error).splitlines() if part.strip()), "")
    return one_line(line, limit)[0] if line else type(error).__name__


def error_lines(error: DlaError, *, verbose: bool, prog: str = "pydla") -> list[str]:
    """What the command line prints for ``error``: one line (the message as :func:`one_line` makes
    it, its code, and :data:`VERBOSE_HINT` when something is left out: a cut, or a
    :class:`Detail`); with ``verbose``, the traceback with every chained cause, then the whole
    message (control characters escaped, line by line).

    A message of several lines is a headline and a tool's own diagnostics (a C compiler's output, a
    spec's list of problems), which the user reads to fix their input: the headline is the error's
    line, and the diagnostics follow it, indented, as the tool wrote them (control characters
    escaped), at most :data:`DIAGNOSTIC_LINES` of them without ``verbose``."""
    headline, diagnostics = _split_diagnostics(error.message)
    if verbose:
        lines = "".join(traceback.format_exception(error)).rstrip("\n").split("\n")
        return [*lines, f"{prog}: error: {printable(headline)} [{error.code.name}]",
                *(f"  {printable(d)}" for d in diagnostics)]
    line, cut = one_line(headline)
    hint = f" {VERBOSE_HINT}" if cut or _more_in_detail(error, line) else ""
    shown = [f"  {_diagnostic(d)}" if d.strip() else "" for d in diagnostics[:DIAGNOSTIC_LINES]]
    if len(diagnostics) > DIAGNOSTIC_LINES:
        shown.append(f"  ... {len(diagnostics) - DIAGNOSTIC_LINES} more line(s) (-v shows them all)")
    return [f"{prog}: error: {line} [{error.code.name}]{hint}", *shown]


def _diagnostic(line: str) -> str:
    """One line of a tool's diagnostics as shown without -v: its indentation kept (a compiler's
    caret lines up with the code above it), control characters escaped, cut as a message is."""
    indent = len(line) - len(line.lstrip(" "))
    return " " * indent + one_line(line[indent:])[0]


def _split_diagnostics(message: str) -> tuple[str, list[str]]:
    """A message's headline (its first line, without the colon that introduced what follows) and
    the lines after it, their common indentation removed and the blank ones at either end dropped."""
    lines = message.strip("\n").split("\n")
    rest = textwrap.dedent("\n".join(lines[1:])).split("\n") if len(lines) > 1 else []
    while rest and not rest[-1].strip():
        rest.pop()
    while rest and not rest[0].strip():
        rest.pop(0)
    headline = lines[0].rstrip()
    return (headline.rstrip(":").rstrip() if rest else headline), [r.rstrip() for r in rest]


def _more_in_detail(error: DlaError, line: str) -> bool:
    """Whether the error's :class:`Detail` says more than ``line`` (its message as shown) does."""
    if not isinstance(error.__cause__, Detail):
        return False
    parts = [part for part in str(error.__cause__).splitlines() if part.strip()]
    return len(parts) > 1 or (len(parts) == 1 and one_line(parts[0])[0] not in line)
