"""Logging of the ``pydla`` logger hierarchy (UMD, KMD, daemon, FUSE server...) to stderr.

Every pydla module logs to ``logging.getLogger("pydla....")`` and configures nothing itself: an
application decides where its logs go. Two conveniences turn them on without code:

- the command line: ``pydla --log-level debug run ...`` (or ``-v``, which means info);
- the ``PYDLA_LOG`` environment variable (debug, info, warning or error), read by the command line
  (its ``--log-level`` wins) and, when set, by :func:`configure_from_env` for library use.

Both install one handler on the ``pydla`` logger writing ``HH:MM:SS.mmm logger LEVEL: message``
to stderr. Records still propagate, so an application's own handlers see them as well.

Usage::

    with cli_logging(args.log_level, verbose=args.verbose):
        run_the_command()
    configure_from_env()        # library: does nothing unless PYDLA_LOG is set
"""

from __future__ import annotations

import logging
import os
import sys
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
    """The level the command line uses: ``--log-level`` if given, else ``PYDLA_LOG``, else warning;
    ``-v`` without ``--log-level`` makes it at least info (never quieter than ``PYDLA_LOG``)."""
    if option is not None:
        return parse_level(option, "--log-level")
    env = (os.environ if environ is None else environ).get(ENV)
    level = parse_level(env, ENV) if env else logging.WARNING
    return min(level, logging.INFO) if verbose else level


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
    try:
        level, bad = parse_level(env, ENV), None
    except DlaError as e:
        level, bad = logging.WARNING, e
    if not _ours(logger):
        logger.addHandler(StderrHandler())
    logger.setLevel(level)
    if bad is not None:
        logger.warning("%s; using warning", bad.message)
    return True
