"""The strict JSON reader of run recipes (and of the loadable's contract note): no NaN or Infinity,
nesting bounded before the parser recurses, a syntax error named by line and column with a hint at
the trailing commas XRT's run-recipe documentation writes."""

from __future__ import annotations

import json
import re
from typing import Any

from pydla.errors import DlaError, NvError


def loads(text: str | bytes, source: str = "recipe") -> Any:
    """Strict JSON: no NaN or Infinity, nesting at most MAX_JSON_DEPTH deep; a syntax error names
    line and column."""
    def reject(constant: str) -> Any:
        raise DlaError(NvError.BadValue, f"{source}: {constant} is not JSON")

    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        _check_depth(text, source)
        return json.loads(text, parse_constant=reject)
    except UnicodeDecodeError as e:
        raise DlaError(NvError.BadValue, f"{source}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except RecursionError:  # a safety net: _check_depth bounds the nesting before json sees it
        raise DlaError(NvError.BadValue, f"{source}: JSON nested too deep") from None
    except json.JSONDecodeError as e:
        before = e.doc[:e.pos].rstrip()
        # The slips of XRT's run-recipe documentation: a trailing comma, a string left open.
        hint = ""
        if e.msg.startswith("Expecting") and before.endswith(","):
            hint = " (a trailing comma?)"
        elif e.msg.startswith("Invalid control character") and e.doc[e.pos:e.pos + 1] in "\r\n":
            hint = " (a string not closed on its line?)"
        raise DlaError(NvError.BadValue,
                       f"{source}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}{hint}") from e


# A recipe is about six levels deep; json's parser recurses once per level and raises
# RecursionError near a thousand, so the depth is bounded well before that.
MAX_JSON_DEPTH = 64
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _check_depth(text: str, source: str) -> None:
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                raise DlaError(NvError.BadValue, f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} "
                                                 f"levels (line {line})")
        elif token in "]}":
            depth -= 1
