"""``pydla runner RECIPE --profile PROFILE``: a run recipe executed as an execution profile says, as
XRT's runner tool does (``xrt-runner --recipe --profile``): the profile's bindings create, fill and
bind the external buffers, its executions run the recipe and print their figures; the exit code is 1
when a validation fails.

Usage: ``pydla runner recipe.json --profile profile.json --config design.xclbin``
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(commands: Any) -> None:
    from pydla.target.config import bundled_configs

    p = commands.add_parser(
        "runner", help="run a run recipe with an execution profile (XRT's runner)",
        description="Run a run recipe (a .json recipe or a loadable) as an execution profile says "
                    "(XRT's runner with a profile): the profile's bindings create, fill, bind and "
                    "validate the external buffers, its executions run the recipe (iterations, "
                    "latency or throughput mode) and print elapsed time, latency and throughput. "
                    "Exit code 1 when a validation fails.")
    p.add_argument("recipe", type=Path, metavar="RECIPE.json|MODEL.dla")
    p.add_argument("--profile", type=Path, required=True, metavar="PROFILE.json",
                   help="the execution profile (XRT's format: qos, bindings, executions); its files "
                        "are found next to it")
    p.add_argument("--config", default="full",
                   help=f"device configuration ({', '.join(bundled_configs())} or a JSON file; "
                        "default: full); the recipe's header must name this device")
    p.add_argument("--allow-unsafe-paths", action="store_true",
                   help="let the recipe and the profile name absolute paths and '..'")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import pydla
    from pydla.umd.profile_run import ProfileRun

    with pydla.createRuntime(config=args.config) as rt, \
            ProfileRun(rt, args.recipe, args.profile, allow_unsafe_paths=args.allow_unsafe_paths) as run:
        reports = run.run()
    failures = [f for r in reports for f in r.failures]
    for failure in failures:
        print(f"validation failed: {failure}")
    return 1 if failures else 0
