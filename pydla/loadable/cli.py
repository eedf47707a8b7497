"""``pydla validate`` (check a run recipe, on its own or inside a loadable) and ``pydla info``
(describe a loadable, list its sections, dump one as ``xclbinutil --dump-section`` does; or, with
``--config``, a device configuration and its IP_LAYOUT, dumped in xclbinutil's JSON shape)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.loadable.recipe import Recipe, RecipeError, load_recipe, loads, parse_recipe
from pydla.logconfig import printable

# pydla.loadable.container and .sections are imported where used: they pull in the generated
# contracts, which `pydla --help` and the other commands do not need.


# What a file that looks like an ONNX model is checked with before it is refused as no loadable
# (path, what was wanted); the command line passes the compiler's (pydla.compiler.onnx_check), so that
# the loadable side imports nothing of the compiler above it.
ContentCheck = Callable[[Path, str], None]


def _no_content_check(path: Path, wanted: str) -> None:
    """Without the compiler's check: a file's name and first bytes decide, as
    :func:`pydla.loadable.sections.check_is_loadable` does."""


def register(commands: Any, check_content: ContentCheck = _no_content_check) -> None:
    """``pydla validate`` and ``pydla info`` on ``commands`` (argparse's subparsers); ``check_content``
    judges a file that looks like an ONNX model by its content (the error says what is wrong with it,
    or to compile it)."""
    p = commands.add_parser(
        "validate", help="check a run recipe (JSON, or the one inside a loadable) and print 'valid' or "
                         "every problem",
        description="Check a run recipe against the recipe rules (the same rules as "
                    "pydla/loadable/schema/recipe.schema.json). Prints 'valid', or every problem with "
                    "its JSON path; exit code 0 or 1. Given a loadable (.dla), checks the recipe it "
                    "holds, then the rest of the loadable.")
    p.add_argument("recipe", type=Path, metavar="RECIPE.json|MODEL.dla")
    p.add_argument("--allow-unsafe-paths", action="store_true",
                   help="accept absolute library paths and '..'")
    p.set_defaults(func=functools.partial(_validate, check_content=check_content))

    i = commands.add_parser(
        "info", help="describe a loadable (versions, tensors, memory, tasks, sections) or, with --config, "
                     "a device configuration and its compute units (IP_LAYOUT)",
        description="What a loadable holds (as xclbinutil --info does for an xclbin): format and "
                    "contract versions, device configuration, input and output tensors, the memory "
                    "list, each NPU task with its operations per block, CPU runs, and its sections "
                    "(name, ELF name, size), any of which --dump-section writes out. With --config NAME "
                    "instead of a loadable: the device configuration (a bundled name or a JSON file) "
                    "and its compute units; --dump-section IP_LAYOUT:json:FILE writes them as "
                    "xclbinutil does.")
    i.add_argument("loadable", type=Path, metavar="MODEL.dla", nargs="?")
    from pydla.target.config import bundled_configs

    i.add_argument("--config", metavar="NAME",
                   help=f"describe device configuration NAME (bundled: {', '.join(bundled_configs())}; or a "
                        "JSON file) instead of a loadable")
    i.add_argument("--json", action="store_true", help="print JSON instead of text")
    i.add_argument("--list-sections", action="store_true",
                   help="list the sections (name, ELF name, size) and nothing else; works on a loadable "
                        "that fails its checks")
    i.add_argument("--dump-section", action="append", default=[], metavar="NAME[:FILE]",
                   help="write the bytes of section NAME to FILE, or to stdout when FILE is '-' or left "
                        "out (repeatable). NAME: recipe, tensors, memory, weights, ctrl.<task>, note, or "
                        "an ELF section name as readelf -S shows it; --list-sections lists them. Works "
                        "on a loadable that fails its checks. E.g. --dump-section recipe:recipe.json")
    i.set_defaults(func=functools.partial(_info, check_content=check_content))


def _cpu_runs(recipe: Any) -> list[dict[str, Any]]:
    """Each CPU run, with the node that made it and why when the compiler said so (its recipe
    header's ``cpu_runs`` metadata: entries whose index is a CPU run's position and whose fields are
    strings; anything else in that metadata is ignored, as metadata is not trusted to be well formed)."""
    header = recipe.raw.get("header") if isinstance(recipe.raw, dict) else None
    notes = header.get("cpu_runs") if isinstance(header, dict) else None
    by_index: dict[int, dict[str, str]] = {}
    for entry in notes if isinstance(notes, list) else []:
        if isinstance(entry, dict) and type(entry.get("index")) is int:
            by_index[entry["index"]] = {k: entry[k] for k in ("node", "op", "why")
                                        if isinstance(entry.get(k), str)}
    return [{"run": r.name, "library": recipe.cpus[r.name].library_path, **by_index.get(i, {})}
            for i, r in enumerate(recipe.runs) if r.where == "cpu"]


def _model(recipe: Any) -> dict[str, Any]:
    """The ONNX model's metadata the loadable keeps (onnxruntime's ModelMetadata fields, as
    ``pydla.Session.get_modelmeta`` reads them from the recipe header; checked, not trusted)."""
    import dataclasses

    from pydla.loadable.metadata import UNVERSIONED, loadable_metadata

    meta = dataclasses.asdict(loadable_metadata(recipe.raw.get("header") if isinstance(recipe.raw, dict)
                                                else None))
    if meta["version"] == UNVERSIONED:
        meta["version"] = None
    return {k: v for k, v in meta.items() if v not in ("", {}, None)}


def _calibration(recipe: Any) -> dict[str, Any] | None:
    """The INT8 calibration table the compiler recorded in the recipe header (metadata: read through
    the table's own checks; a malformed one is shown as such, not trusted)."""
    header = recipe.raw.get("header") if isinstance(recipe.raw, dict) else None
    raw = header.get("calibration") if isinstance(header, dict) else None
    if raw is None:
        return None
    import json

    from pydla.errors import DlaError
    from pydla.loadable.calibration_table import CalibrationTable

    try:
        return CalibrationTable.parse(json.dumps(raw), "the recorded calibration table").as_json()
    except DlaError as e:
        return {"invalid": e.message}


def _quantized_model(recipe: Any) -> str | None:
    """What the compiler recorded of a quantized model it compiled in float (--dequantize-qdq), as
    one line; metadata, so only well-formed counts are shown."""
    header = recipe.raw.get("header") if isinstance(recipe.raw, dict) else None
    raw = header.get("quantized_model") if isinstance(header, dict) else None
    if not isinstance(raw, dict) or not isinstance(raw.get("operators"), dict):
        return None
    ops = {k: v for k, v in raw["operators"].items() if isinstance(k, str) and type(v) is int}
    counts = [raw.get(k) if type(raw.get(k)) is int else 0 for k in ("tensors", "per_channel")]
    return (f"{', '.join(f'{n} {printable(op)}' for op, n in ops.items())}; {counts[0]} quantized tensors "
            f"({counts[1]} per channel), computed dequantized in float")


def describe(lo: Any) -> dict[str, Any]:
    """A loadable's contents as plain data (what ``pydla info --json`` prints)."""
    import collections

    from pydla.deviceapi.generated.device_api import dla_block_e
    from pydla.loadable import shave_task
    from pydla.loadable.sections import section_names

    tasks = []
    shave_lists = []
    for run in lo.recipe.runs:
        if run.where != "npu":
            continue
        code = lo.control_code(run.name)
        if code.is_shave:
            shave_lists.append({"run": run.name, **shave_task.describe(code)})
            if not code.is_mixed:  # (a task with DLA operations beside its list is listed in both)
                continue
        counts: collections.Counter[str] = collections.Counter()
        for op_type in code.op_types():
            known = op_type in dla_block_e._value2member_map_
            counts[dla_block_e(op_type).name if known else str(op_type)] += 1
        tasks.append({"run": run.name, "operations": sum(counts.values()), "per_block": dict(counts)})
    return {
        "source": lo.source,
        "format_version": ".".join(map(str, lo.format_version)),
        "device": lo.device,
        "contracts": {n: {"version": c.version_string, "layout_hash64": f"{c.layout_hash64:016x}"}
                      for n, c in lo.contracts.items()},
        "model": _model(lo.recipe),
        "tensors": [{"name": t.name, "direction": t.direction.name.lower(), "bind_id": t.bind_id,
                     "dims": list(t.dims), "data_type": t.data_type.name, "layout": t.layout.name,
                     "size": t.size, "buffer": t.buffer} for t in lo.tensors()],
        "memory": [{"name": m.name, "kind": m.kind, "size": m.size, "alignment": m.alignment}
                   for m in lo.memory.values()],
        "memory_total": {kind: sum(m.size for m in lo.memory.values() if m.kind == kind)
                         for kind in sorted({m.kind for m in lo.memory.values()})},
        "npu_tasks": tasks,
        "shave_task_lists": shave_lists,
        "shave_kernels": sorted({t["kernel"] for s in shave_lists for t in s["kernel_tasks"]}),
        "cpu_runs": _cpu_runs(lo.recipe),
        "calibration": _calibration(lo.recipe),
        "quantized_model": _quantized_model(lo.recipe),
        "sections": lo.section_sizes(),
        "section_names": section_names(lo.elf),
    }


def _info(args: argparse.Namespace, check_content: ContentCheck = _no_content_check) -> int:
    import json

    from pydla.loadable.container import Loadable
    from pydla.loadable.sections import check_is_loadable

    if args.config is not None:
        if args.loadable is not None:
            raise DlaError(NvError.BadParameter, f"pydla info: give a loadable ({args.loadable}) or "
                                                 f"--config {args.config}, not both")
        return _config_info(args)
    if args.loadable is None:
        raise DlaError(NvError.BadParameter, "pydla info: give a loadable (MODEL.dla) or --config NAME")
    check_content(args.loadable, "a loadable")
    if args.dump_section or args.list_sections:
        return _sections(args)
    nvdla = _nvdla_kind(args.loadable)
    if nvdla is not None:  # an NVDLA Loadable or a .dimg, by content
        from pydla.loadable.nvdla.describe import info as nvdla_info

        return nvdla_info(args.loadable, nvdla, as_json=args.json)
    check_is_loadable(args.loadable)
    info = describe(Loadable.open(args.loadable))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{info['source']}: pydla loadable {info['format_version']} for device config '{info['device']}'")
    if info["model"]:
        print("model: " + ", ".join(f"{k} {v!r}" for k, v in info["model"].items()))
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
    _print_shave(info)
    if info["cpu_runs"]:
        print(f"cpu runs: {len(info['cpu_runs'])} (each splits the NPU work: a task ends, the CPU computes, "
              "the next task starts)")
    for r in info["cpu_runs"]:
        made_by = f" for node '{r['node']}' ({r.get('op', '?')}): {r.get('why', '')}" if "node" in r else ""
        print(f"cpu run {r['run']} from {r['library']}{made_by}")
    _print_calibration(info.get("calibration"))
    if info.get("quantized_model"):
        print(f"quantized model: {info['quantized_model']}")
    print("sections (dump one with --dump-section NAME[:FILE]):")
    _print_sections(info["sections"])
    return 0


SHOWN_CALIBRATED = 20  # tensors listed by the text form (--json lists every one)


def _print_calibration(table: dict[str, Any] | None) -> None:
    if table is None:
        return
    if "invalid" in table:
        print(f"calibration: {printable(table['invalid'])}")
        return
    tensors = table["tensors"]
    model = table["model"]
    print(f"calibration: {table['method']}, {len(tensors)} tensors from {table['samples']} samples (table "
          f"version {table['version']}, model {printable(model['name'])} {model['digest'][:19]})")
    for name, t in list(tensors.items())[:SHOWN_CALIBRATED]:
        lo, hi = t["range"]
        print(f"  {printable(name):<24} scale {t['scale']:.6g} zero point {t['zero_point']} "
              f"range [{lo:.6g}, {hi:.6g}]")
    if len(tensors) > SHOWN_CALIBRATED:
        print(f"  ... {len(tensors) - SHOWN_CALIBRATED} more (--json lists them all)")


def _print_shave(info: dict[str, Any]) -> None:
    """The SHAVE task lists: kernels (KernelData), then per list its runtime and stacks, its kernel
    invocations, its DMA tasks and its barriers."""
    if not info["shave_task_lists"]:
        return
    print(f"shave kernels: {', '.join(info['shave_kernels'])}")
    for s in info["shave_task_lists"]:
        stacks = ", ".join(f"tile {t} {n} bytes" for t, n in s["stacks"].items())
        print(f"shave task list {s['run']}: runtime '{s['runtime']}' (stacks: {stacks}); "
              f"{len(s['kernel_tasks'])} kernel tasks, {len(s['dma_tasks'])} DMA tasks, "
              f"{len(s['barriers'])} barriers")
        for i, t in enumerate(s["kernel_tasks"]):
            print(f"  kernel task {i}: '{t['kernel']}' (id {t['kernel_id']}) on tile {t['tile']}, "
                  f"{t['args_bytes']} argument bytes, waits {t['wait']}, updates {t['update']}")
        for i, d in enumerate(s["dma_tasks"]):
            ddr, cmx = f"'{d['buffer']}'+{d['offset']}", f"tile {d['tile']} CMX+{d['cmx_offset']}"
            arrow = f"{ddr} -> {cmx}" if d["direction"] == "to_cmx" else f"{cmx} -> {ddr}"
            print(f"  dma task {i}: {arrow}, {d['bytes']} bytes, waits {d['wait']}, updates {d['update']}")
        for b in s["barriers"]:
            print(f"  barrier {b['barrier']}: {b['producers']} producers, {b['consumers']} consumers"
                  + (" (notifies the host)" if b["notify"] else ""))


def _config_info(args: argparse.Namespace) -> int:
    """``pydla info --config NAME``: the configuration, its IP_LAYOUT as a table, or the IP_LAYOUT
    section in xclbinutil's JSON shape (``--dump-section IP_LAYOUT:json:FILE``)."""
    import json

    from pydla.target.config import load_config
    from pydla.target.xclbin_json import dump_ip_layout

    config = load_config(args.config)
    if args.list_sections:
        print("IP_LAYOUT")
    dumps = []
    for item in args.dump_section:
        name, _, rest = item.partition(":")
        form, _, file = rest.partition(":")
        if name.upper() != "IP_LAYOUT":
            raise DlaError(NvError.BadParameter,
                           f"--dump-section {item}: a device configuration has section IP_LAYOUT only")
        if form.lower() not in ("", "json"):
            raise DlaError(NvError.BadParameter,
                           f"--dump-section {item}: format '{form}': IP_LAYOUT is written as json")
        dumps.append((item, file or "-"))
    text = dump_ip_layout(config.ip_layout)  # as xclbinutil writes it: ip_data repeated
    for item, file in dumps:
        if file == "-":
            sys.stdout.write(text)
            continue
        try:
            Path(file).write_text(text, encoding="utf-8")
        except OSError as e:
            raise DlaError(NvError.FileWriteFailed,
                           f"--dump-section {item}: cannot write {file}: {e.strerror or e}") from e
        print(f"device config '{config.name}': section IP_LAYOUT ({len(config.ip_layout)} compute units) "
              f"written to {file}", file=sys.stderr)
    if dumps or args.list_sections:
        return 0
    if args.json:
        layout = [{**cu.xclbin_entry(), "window": f"{cu.window:#x}", "model": cu.model,
                   "pipeline_depth": cu.pipeline_depth, "latency_cycles": cu.latency_cycles}
                  for cu in config.ip_layout]
        print(json.dumps({"name": config.name, "description": config.description,
                          "blocks": [b.name for b in config.blocks], "clock_mhz": config.clock_mhz,
                          "ip_layout": layout}, indent=2))
        return 0
    print(f"device config '{config.name}': {config.description}")
    print(f"blocks: {', '.join(b.name for b in config.blocks)}; clock {config.clock_mhz:g} MHz")
    print(f"IP_LAYOUT ({len(config.ip_layout)} compute units; dump with --dump-section IP_LAYOUT:json:FILE):")
    rows = [("m_name", "m_type", "m_ip_control", "m_base_address", "window", "int", "id", "depth",
             "latency", "model")]
    rows += [(cu.name, cu.m_type, cu.m_ip_control, f"{cu.m_base_address:#010x}", f"{cu.window:#x}",
              str(cu.m_int_enable), str(cu.m_interrupt_id), str(cu.pipeline_depth), str(cu.latency_cycles),
              cu.model) for cu in config.ip_layout]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _print_sections(sizes: dict[str, int]) -> None:
    from pydla.loadable.sections import short_name

    for elf_name, size in sizes.items():
        print(f"  {short_name(elf_name):<24} {elf_name:<28} {size:>12} bytes")


def _sections(args: argparse.Namespace) -> int:
    from pydla.loadable.sections import read_elf, section_bytes, short_name

    elf = read_elf(args.loadable)
    if args.list_sections:
        sizes = {n: int(elf.section_info(n)["sh_size"]) for n in elf.section_names if n}
        if args.json:
            import json

            print(json.dumps([{"name": short_name(n), "elf_name": n, "size": s} for n, s in sizes.items()]))
        else:
            _print_sections(sizes)
    # Every name is checked before anything is written: a typo in the second leaves no half-done dump.
    dumps = []
    for item in args.dump_section:
        name, _, file = item.partition(":")
        dumps.append((section_bytes(elf, name, str(args.loadable)), name, file or "-"))
    for data, name, file in dumps:
        if file == "-":
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            continue
        try:
            Path(file).write_bytes(data)
        except OSError as e:
            raise DlaError(NvError.FileWriteFailed,
                           f"--dump-section {name}: cannot write {file}: {e.strerror or e}") from e
        print(f"{args.loadable}: section {name} ({len(data)} bytes) written to {file}", file=sys.stderr)
    return 0


def _validate(args: argparse.Namespace, check_content: ContentCheck = _no_content_check) -> int:
    from pydla.elf.reader import ELF_MAGIC
    from pydla.files import JSON, kind_of
    from pydla.loadable.container import RECIPE
    from pydla.loadable.sections import check_is_loadable, read_elf, read_head

    nvdla = _nvdla_kind(args.recipe)
    if nvdla is not None:  # an NVDLA Loadable or a .dimg, by content
        from pydla.loadable.nvdla.describe import validate

        return validate(args.recipe, nvdla)
    head = read_head(args.recipe)
    loadable = head[:4] == ELF_MAGIC
    if kind_of(head, args.recipe) not in (JSON, None) or not head:
        check_content(args.recipe, "a run recipe or a loadable")
        # an ONNX model (the error says to compile it), a trace, a .npy array, a SHAVE kernel...
        check_is_loadable(args.recipe, "a run recipe or a loadable")
    where = f"{args.recipe} ({RECIPE})" if loadable else str(args.recipe)
    try:
        if loadable:
            text = bytes(read_elf(args.recipe).section(RECIPE))
            recipe = parse_recipe(loads(text, where), where, allow_unsafe_paths=args.allow_unsafe_paths)
            _check_instances(recipe, where)
        else:
            recipe = load_recipe(args.recipe, allow_unsafe_paths=args.allow_unsafe_paths)
    except RecipeError as e:
        print(f"{printable(where)}: {len(e.errors)} problem(s)")
        for path, message in e.errors:  # one line each, whatever the recipe's strings hold
            print(f"  {printable(path or '/')}: {printable(message)}")
        return 1
    print(f"{where}: valid ({_summary(recipe)})")
    if loadable:
        from pydla.loadable.container import Loadable

        # The recipe alone is not the loadable: its references into the memory list, the tensors, the
        # control code and the weights are checked too (a DlaError names the first that fails).
        lo = Loadable.open(args.recipe)
        print(f"{args.recipe}: valid loadable (format {'.'.join(map(str, lo.format_version))}, device "
              f"config '{lo.device}', {len(lo.tensors())} tensors, {len(lo.elf.section_names)} sections)")
    return 0


def _nvdla_kind(path: Path) -> str | None:
    from pydla.loadable.nvdla.describe import file_kind

    return file_kind(path)


def _check_instances(recipe: Recipe, where: str) -> None:
    """A loadable's kernels against the IP_LAYOUT of the bundled configuration it names (one it
    does not name as a bundled configuration cannot be looked up from here: nothing to check)."""
    from pydla.loadable.recipe_config import compute_unit_errors
    from pydla.target.config import bundled_configs, load_config

    if recipe.device in bundled_configs():
        errors = compute_unit_errors(recipe, load_config(recipe.device))
        if errors:
            raise RecipeError(where, errors)


def _summary(recipe: Recipe) -> str:
    return (f"{len(recipe.buffers)} buffers, {len(recipe.kernels)} kernels, {len(recipe.cpus)} cpu "
            f"functions, {len(recipe.runs)} runs in {len(recipe.runlists())} runlists")
