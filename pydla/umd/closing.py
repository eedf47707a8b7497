"""How a ``with`` block over a runtime or a session ends: Ctrl-C cancels the runs at once, and an
error from closing never hides the block's own exception."""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("pydla")

__all__ = ["close_quietly", "interrupted"]


def interrupted(exc_type: type[BaseException] | None) -> bool:
    """Whether a ``with`` block ended by Ctrl-C (KeyboardInterrupt): its runs are then cancelled at
    once, not waited for."""
    return exc_type is not None and issubclass(exc_type, KeyboardInterrupt)


def close_quietly(close: Callable[[], None], exc_type: type[BaseException] | None) -> None:
    """``close()`` at the end of a ``with`` block: when the block ends with an exception, an error
    from closing is logged, never raised in its place."""
    if exc_type is None:
        close()
        return
    try:
        close()
    except Exception as e:  # the block's own exception is the one the user must see
        log.warning("closing after %s: %s", exc_type.__name__, e)
