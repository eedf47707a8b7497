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

    i = commands.add_parser(
        "info", help="describe a loadable: versions, tensors, memory, tasks, sections",
        description="What a loadable holds (as xclbinutil --info does for an xclbin): format and "
                    "contract versions, device configuration, input and output tensors, the memory "
                    "list, each NPU task with its operations per block, CPU runs, and section sizes.")
    i.add_argument("loadable", type=Path, metavar="MODEL.dla")
    i.add_argument("--json", action="store_true", help="print JSON instead of text")
    i.set_defaults(func=_info)


def describe(lo: Any) -> dict[str, Any]:
    """A loadable's contents as plain data (what ``pydla info --json`` prints)."""
    import collections

    from pydla.deviceapi.generated.device_api import dla_block_e

    tasks = []
    for run in lo.recipe.runs:
        if run.where != "npu":
            continue
        counts: collections.Counter[str] = collections.Counter()
        for op_type in lo.control_code(run.name).op_types():
            known = op_type in dla_block_e._value2member_map_
            counts[dla_block_e(op_type).name if known else str(op_type)] += 1
        tasks.append({"run": run.name, "operations": sum(counts.values()), "per_block": dict(counts)})
    return {
        "source": lo.source,
        "format_version": ".".join(map(str, lo.format_version)),
        "device": lo.device,
        "contracts": {n: {"version": c.version_string, "layout_hash64": f"{c.layout_hash64:016x}"}
                      for n, c in lo.contracts.items()},
        "tensors": [{"name": t.name, "direction": t.direction.name.lower(), "bind_id": t.bind_id,
                     "dims": list(t.dims), "data_type": t.data_type.name, "layout": t.layout.name,
                     "size": t.size, "buffer": t.buffer} for t in lo.tensors()],
        "memory": [{"name": m.name, "kind": m.kind, "size": m.size, "alignment": m.alignment}
                   for m in lo.memory.values()],
        "memory_total": {kind: sum(m.size for m in lo.memory.values() if m.kind == kind)
                         for kind in sorted({m.kind for m in lo.memory.values()})},
        "npu_tasks": tasks,
        "cpu_runs": [{"run": r.name, "library": lo.recipe.cpus[r.name].library_path}
                     for r in lo.recipe.runs if r.where == "cpu"],
        "sections": lo.section_sizes(),
    }


def _info(args: argparse.Namespace) -> int:
    import json

    from pydla.loadable.container import Loadable

    info = describe(Loadable.open(args.loadable))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{info['source']}: pydla loadable {info['format_version']} for device config '{info['device']}'")
    print("contracts: " + ", ".join(f"{n} {c['version']} ({c['layout_hash64']})"
                                    for n, c in info["contracts"].items()))
    print("tensors:")
    for t in info["tensors"]:
        print(f"  {t['direction']:6} {t['bind_id']}  {t['name']:<24} {t['data_type']:<8} {t['dims']} "
              f"{t['layout']} ({t['size']} bytes in '{t['buffer']}')")
    print("memory:")
    for m in info["memory"]:
        print(f"  {m['kind']:8} {m['name']:<24} {m['size']:>12} bytes (align {m['alignment']})")
    print("  totals: " + ", ".join(f"{k} {v} bytes" for k, v in info["memory_total"].items()))
    for t in info["npu_tasks"]:
        blocks = ", ".join(f"{b} {n}" for b, n in sorted(t["per_block"].items()))
        print(f"npu task {t['run']}: {t['operations']} operations ({blocks})")
    for r in info["cpu_runs"]:
        print(f"cpu run {r['run']} from {r['library']}")
    print("sections: " + ", ".join(f"{n} {s}" for n, s in info["sections"].items()))
    return 0


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
