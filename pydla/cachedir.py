"""Where pydla keeps what it can rebuild: compiled models, and the private BLAS copy.

``PYDLA_CACHE_DIR``, else ``$XDG_CACHE_HOME/pydla``, else ``~/.cache/pydla``.

Usage: ``path = cache_dir() / "model.dla"``
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The user's pydla cache directory (not created here)."""
    env = os.environ.get("PYDLA_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "pydla"
