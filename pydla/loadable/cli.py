"""``pydla validate``: check a run recipe."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydla.loadable.recipe import RecipeError, load_recipe


def register(commands: Any) -> None:
    p = commands.add_parser(
        "validate", help="check a run recipe (JSON) and print 'valid' or every problem",
        description="Check a run recipe against the recipe rules (the same rules as "
                    "pydla/loadable/schema/recipe.schema.json). Prints 'valid', or every problem with "
                    "its JSON path; exit code 0 or 1.")
    p.add_argument("recipe", type=Path, metavar="RECIPE.json")
    p.add_argument("--allow-unsafe-paths", action="store_true",
                   help="accept absolute library paths and '..'")
    p.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    try:
        recipe = load_recipe(args.recipe, allow_unsafe_paths=args.allow_unsafe_paths)
    except RecipeError as e:
        print(f"{args.recipe}: {len(e.errors)} problem(s)")
        for path, message in e.errors:
            print(f"  {path or '/'}: {message}")
        return 1
    runs = len(recipe.runs)
    print(f"{args.recipe}: valid ({len(recipe.buffers)} buffers, {len(recipe.kernels)} kernels, "
          f"{len(recipe.cpus)} cpu functions, {runs} runs in {len(recipe.runlists())} runlists)")
    return 0
