"""``pydla deviceapi ...``: generate, check, inspect and diff binary contracts; decode trace rings."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from pydla.errors import DlaError, NvError

_LANGS = ("python", "c", "cpp")


def register(commands: Any) -> None:
    p = commands.add_parser(
        "deviceapi", help="binary contracts: generate code from specs, check, diff, decode traces",
        description="Binary contracts declared once in YAML and generated into Python ctypes, C "
                    "and C++. Without --spec, commands work on the specs bundled with pydla.")
    sub = p.add_subparsers(dest="deviceapi_command", metavar="SUBCOMMAND")
    sub.required = True

    g = sub.add_parser(
        "generate", help="write (or with --check, verify) the generated files",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Render specs into Python, C and C++, and with your own templates into anything. "
                    "Without --spec: the bundled specs, into the package (the committed generated files).",
        epilog="""\
user templates (--template):
  Jinja files with the delimiters of the Device API code generation design: <% statement %>,
  << expression >>, <# comment #>. A template receives `spec` (the checked, laid-out spec: enums,
  structs, messages with ids, trace events, fields with offsets and sizes, version, layout hash),
  `g` (the bundled templates' helpers), `cgh` (the spec's items as YAML-keyed mappings, as the
  design's example template reads them), `source`, `template` and `output`, and the filters c_type,
  c_decl, hex, pascal, camel, macro and comment. An undefined name is an error, never empty text;
  every template error names the file and line, and nothing is written.
  A template NAME.jinja writes NAME into --out-dir (default: the current directory), with {spec}
  in NAME replaced by the spec's name; --output FILE names the file instead (one spec, one template).
  A directory stands for its *.jinja files; those starting with '_' are only included by others.
  With --template, only the templates' outputs are written unless --lang asks for bundled ones too.

user schema (--schema):
  A JSON schema (its $schema picks the draft; 2020-12 by default) that every spec given with --spec
  must satisfy in addition to the bundled schema, which stays in force because the layout rules
  and the templates rely on it: use it to narrow what your specs may say (required descriptions,
  naming patterns, id ranges). A violation names the spec file, line and JSON path.

examples:
  pydla deviceapi generate --spec api.yaml --template docs.md.jinja --out-dir build/
  pydla deviceapi generate --spec api.yaml --schema api.schema.json \\
      --template device_api_types.h.jinja --output build/device_api_types.h
  pydla deviceapi generate --spec api.yaml --template templates/ --lang c --out-dir build/
""")
    g.add_argument("--spec", action="append", type=Path, metavar="FILE",
                   help="a spec to generate (repeatable); default: the bundled specs")
    g.add_argument("--out-dir", type=Path, metavar="DIR",
                   help="write here instead (Python as DIR/NAME.py, C and C++ as DIR/pydla/NAME.h[pp], "
                        "user templates' outputs as DIR/NAME)")
    g.add_argument("--lang", default=None,
                   help="comma-separated languages among python, c, cpp (default: all; with --template: "
                        "none)")
    g.add_argument("--template", action="append", type=Path, metavar="FILE_OR_DIR",
                   help="a Jinja template of your own, or a directory of them (repeatable)")
    g.add_argument("--output", type=Path, metavar="FILE",
                   help="the file the one --template writes (needs exactly one --spec)")
    g.add_argument("--schema", type=Path, metavar="FILE",
                   help="a JSON schema every --spec must satisfy too (the bundled one still applies)")
    g.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 and list the files that are missing or stale")
    g.set_defaults(func=_generate)

    v = sub.add_parser("validate", help="check specs against the schema and the rules",
                       description="Prints 'valid' per spec, or every problem with its location.")
    v.add_argument("specs", nargs="+", type=Path, metavar="SPEC")
    v.add_argument("--schema", type=Path, metavar="FILE",
                   help="a JSON schema the specs must satisfy too (as generate --schema)")
    v.set_defaults(func=_validate)

    lay = sub.add_parser("layout", help="print the offset and size of every field",
                         description="The laid-out form of a spec: sizes, offsets, ids, hash.")
    lay.add_argument("spec", type=Path, metavar="SPEC")
    lay.set_defaults(func=_layout)

    d = sub.add_parser("diff", help="the change set between two spec versions and the bump it needs",
                       description="Exit 1 when NEW's version bump is smaller than the changes require.")
    d.add_argument("old", type=Path, metavar="OLD.yaml")
    d.add_argument("new", type=Path, metavar="NEW.yaml")
    d.set_defaults(func=_diff)

    t = sub.add_parser("trace", help="decode a trace ring dumped from a device",
                       description="Decode the trace ring in FILE into text or JSON lines.")
    t.add_argument("file", type=Path, metavar="FILE")
    t.add_argument("--format", choices=("text", "jsonl"), default="text")
    t.add_argument("--api", default="trace",
                   help="the generated contract that defines the events (default: trace)")
    t.add_argument("--since", type=int, default=None,
                   help="the head of an earlier read: show only newer entries")
    t.set_defaults(func=_trace)

    inc = sub.add_parser("include-dir", help="print the directory to add to a C/C++ include path")
    inc.set_defaults(func=_include_dir)


def _codegen() -> Any:
    try:
        from pydla.deviceapi import generate
    except ImportError as e:
        raise DlaError(NvError.NotSupported,
                       f"this command needs the code generator's packages ({e.name} is missing): "
                       "pip install 'pydla[codegen]'") from e
    return generate


def _languages(text: str) -> tuple[str, ...]:
    langs = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in langs if x not in _LANGS]
    if bad or not langs:
        raise DlaError(NvError.BadParameter,
                       f"--lang {text!r}: choose among {', '.join(_LANGS)}")
    return langs


def _generate(args: argparse.Namespace) -> int:
    gen = _codegen()
    from pydla.deviceapi.loader import load_user_schema
    from pydla.deviceapi.templates_user import find_templates

    templates = tuple(find_templates(args.template or []))
    langs = _languages(args.lang) if args.lang is not None else (() if templates else _LANGS)
    if args.output is not None and (len(templates) != 1 or len(args.spec or []) != 1):
        raise DlaError(NvError.BadParameter,
                       f"--output {args.output}: names the file of one template rendered for one spec; "
                       f"got {len(templates)} template(s) and {len(args.spec or [])} --spec; use "
                       "--out-dir and {spec} in the template's file name for more")
    if args.schema is not None and not args.spec:
        raise DlaError(NvError.BadParameter,
                       f"--schema {args.schema}: checks the specs given with --spec; the bundled specs "
                       "follow the bundled schema only")
    user_schema = load_user_schema(args.schema) if args.schema is not None else None
    if args.spec:
        outputs = []
        for spec in args.spec:
            outputs += gen.outputs_for(spec, args.out_dir, langs, templates, args.output, user_schema,
                                       partial=True)
    else:
        outputs = gen.bundled_outputs(args.out_dir, langs)
        for spec in gen.BUNDLED:
            outputs += gen.outputs_for(gen.bundled_specs_dir() / f"{spec}.yaml", args.out_dir, (),
                                       templates)
    gen.check_distinct(outputs)
    inputs = {p.resolve(): "--template" for p in templates} | \
        {p.resolve(): "--spec" for p in args.spec or []}
    for out in outputs:
        if out.path.resolve() in inputs:
            raise DlaError(NvError.BadParameter,
                           f"{out.path}: is the {inputs[out.path.resolve()]} file itself; "
                           "write the output elsewhere (--output, --out-dir)")
    if args.check:
        stale = gen.stale(outputs)
        for out in stale:
            print(f"stale: {out.path} (run: pydla deviceapi generate)")
        if stale:
            return 1
        print(f"{len(outputs)} generated files are up to date")
        return 0
    written = {id(o) for o in gen.write(outputs)}
    for out in outputs:
        state = "written  " if id(out) in written else "unchanged"
        print(f"{state} {out.path}  ({out.spec.name} {out.spec.version_string}, "
              f"layout {out.spec.layout_hash[:16]})")
    return _report_spec_notes({id(o.spec): o.spec for o in outputs}.values())


def _report_spec_notes(specs: Any) -> int:
    """Print what pydla filled in (warnings) and the items a partial generation left out; 1 when any
    item was left out."""
    left_out = 0
    for spec in specs:
        for p in spec.warnings:
            print(f"  {p}")
        if spec.omitted:
            names = sorted({p.location.item for p in spec.omitted if p.location.item})
            left_out += len(names)
            print(f"{spec.file}: {len(names)} item(s) left out ({', '.join(names)}), "
                  f"{len(spec.omitted)} problem(s):")
            for p in spec.omitted:
                print(f"  {p}")
    return 1 if left_out else 0


def _validate(args: argparse.Namespace) -> int:
    _codegen()
    from pydla.deviceapi.loader import SpecError, load_user_schema
    from pydla.deviceapi.spec import load_spec

    user_schema = load_user_schema(args.schema) if args.schema is not None else None
    failed = 0
    for path in args.specs:
        try:
            spec = load_spec(path, user_schema)
        except SpecError as e:
            failed += 1
            warnings = sum(p.severity == "warning" for p in e.problems)
            noted = f", {warnings} warning(s)" if warnings else ""
            print(f"{path}: {len(e.problems) - warnings} problem(s){noted}")
            for p in e.problems:
                print(f"  {p}")
            continue
        notes = f", {len(spec.warnings)} warning(s)" if spec.warnings else ""
        print(f"{path}: valid ({spec.name} {spec.version_string}, layout {spec.layout_hash[:16]}{notes})")
        for p in spec.warnings:
            print(f"  {p}")
    return 1 if failed else 0


def _layout(args: argparse.Namespace) -> int:
    _codegen()
    from pydla.deviceapi.spec import load_spec

    spec = load_spec(args.spec)
    print(f"{spec.name} {spec.version_string}  layout hash {spec.layout_hash}")
    for e in spec.enums:
        members = ", ".join(f"{m.name}={m.value}" for m in e.members)
        print(f"\nenum {e.name} : {e.storage}  {{{members}}}")
    for s in spec.all_structs:
        ident = f"  id {s.msg_id}" if s.msg_id is not None else ""
        kind = s.msg_type or s.category
        print(f"\n{kind} {s.name}  ({s.size} bytes, align {s.align}){ident}")
        for f in s.fields:
            count = f"[{f.count}]" if f.count else (f"[{f.length}]" if f.length else "")
            double = "  (one per register group)" if f.double else ""
            print(f"  {f.offset:6}  {f.size:5}  {f.type_name}{count} {f.name}{double}")
            for b in f.bits:
                values = ", ".join(f"{m.name}={m.value}" for m in b.values)
                print(f"                {b.msb:2}:{b.lsb:<2} {b.access:3} {b.name} reset {b.reset:#x}"
                      + (f"  {{{values}}}" if values else ""))
    return 0


def _diff(args: argparse.Namespace) -> int:
    _codegen()
    from pydla.deviceapi.diff import diff_specs
    from pydla.deviceapi.spec import load_spec

    report = diff_specs(load_spec(args.old), load_spec(args.new))
    print(report.summary())
    return 0 if report.ok else 1


def _trace(args: argparse.Namespace) -> int:
    from pydla.deviceapi.trace import decode_ring_file, write_jsonl, write_text

    try:
        module = importlib.import_module(f"pydla.deviceapi.generated.{args.api}")
    except ImportError as e:
        raise DlaError(NvError.BadParameter, f"--api {args.api}: no such generated contract") from e
    result = decode_ring_file(args.file, module.API, since=args.since)
    sys.stdout.write(write_jsonl(result.events) if args.format == "jsonl" else write_text(result.events))
    print(f"{len(result.events)} events, {result.dropped} dropped by the writer, "
          f"{result.lost_bytes} bytes lost since the last read, head {result.head}", file=sys.stderr)
    return 0


def _include_dir(args: argparse.Namespace) -> int:
    from pydla.deviceapi import include_dir  # no extra needed: the headers are committed

    print(include_dir())
    return 0
