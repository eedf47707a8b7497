"""The README and the pages under docs/ say only what is true.

- Every ```python block runs. The blocks of one page run in order in one fresh interpreter, each in a
  fresh namespace (a block right after ``<!-- continued -->`` shares the previous block's), in a
  directory that holds what the pages tell the reader to make first: the repository's ``examples/``
  and ``model.dla``, the demo network compiled by ``pydla compile examples/demo_model.onnx -o
  model.dla``.
- A block that cannot run here is marked by an HTML comment on the line before it,
  ``<!-- not-run: why -->``; each shows as a skipped test with its reason.
- Every ``pydla ...`` command of a ```sh / ```bash / ```console block parses with the command line's
  own parser (a synopsis such as ``[--config full|small]`` or ``NAME ...`` is read as its first
  choice), and every repository path such a block names (``tests/...``, ``bench/...``,
  ``tools/...``, ``examples/...``) exists.
- The README's relative links point at files that exist, and docs/cli.md names every command.
- With the docs extra installed, ``mkdocs build --strict`` passes (CI runs it too).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not-run|continued)\s*(?::\s*(?P<reason>.*?))?\s*-->\s*$")
SHELL = {"sh", "bash", "shell", "console"}
REPO_PATH = re.compile(r"^(?:\./)?((?:tests|bench|tools|examples)/[\w./-]*[\w/])")
PAGE_TIMEOUT_S = 180


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str | None  # "not-run", "continued" or None
    reason: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m["lang"]:
            if m:  # an unlabelled fence: skip to its end
                i += 1
                while i < len(lines) and not FENCE.match(lines[i]):
                    i += 1
            i += 1
            continue
        start, indent = i, m["indent"]
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        mark = MARKER.match(lines[j]) if j >= 0 else None
        found.append(Block(page, start + 1, m["lang"].lower(), textwrap.dedent("\n".join(body)) + "\n",
                           mark["kind"] if mark else None, (mark["reason"] or "") if mark else ""))
        i += 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]
PYTHON = [b for b in ALL if b.lang in ("python", "py")]
PYTHON_PAGES = sorted({b.page for b in PYTHON if b.marker != "not-run"})
NOT_RUN = [b for b in PYTHON if b.marker == "not-run"]


def test_the_pages_are_there_and_hold_examples() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    for name in ("README.md", "docs/index.md", "docs/install.md", "docs/guide/applications.md",
                 "docs/guide/integrators.md", "docs/guide/driver-developers.md", "docs/guide/contracts.md",
                 "docs/cli.md"):
        assert name in names, name
    assert len(PYTHON) >= 15 and len(NOT_RUN) <= len(PYTHON) // 4, (len(PYTHON), [b.where for b in NOT_RUN])
    for b in ALL:
        assert b.marker != "continued" or b.lang in ("python", "py"), b.where


@pytest.fixture(scope="session")
def compiled_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``model.dla`` as the pages' readers make it, and a compile cache the pages share."""
    pytest.importorskip("onnx")
    from pydla.compiler.api import compile_model

    d = tmp_path_factory.mktemp("docs-shared")
    (d / "model.dla").write_bytes(compile_model(str(ROOT / "examples" / "demo_model.onnx")).blob)
    (d / "cache").mkdir()
    return d / "model.dla", d / "cache"


RUNNER = r"""
import json, sys, time, traceback
blocks = json.load(open(sys.argv[1]))
namespace = None
for b in blocks:
    if b["marker"] != "continued" or namespace is None:
        namespace = {"__name__": "__main__"}
    print(f"--- {b['where']}", flush=True)
    start = time.perf_counter()
    try:
        exec(compile(b["code"], b["where"], "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"FAILED: the block at {b['where']}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"--- {b['where']}: {time.perf_counter() - start:.2f} s", flush=True)
"""


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_run(page: Path, tmp_path: Path, compiled_demo: tuple[Path, Path]) -> None:
    model, cache = compiled_demo
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    shutil.copy(model, work / "model.dla")
    todo = [{"where": b.where, "code": b.code, "marker": b.marker}
            for b in PYTHON if b.page == page and b.marker != "not-run"]
    (tmp_path / "blocks.json").write_text(json.dumps(todo))
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {**os.environ, "PYDLA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("PYDLA_PORT", None)
    result = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json")],
                            cwd=work, env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT_S)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"


@pytest.mark.parametrize("block", NOT_RUN or [None], ids=lambda b: b.where if b else "none")
def test_blocks_not_run_say_why(block: Block | None) -> None:
    if block is None:
        return
    assert len(block.reason) >= 10, f"{block.where}: <!-- not-run: ... --> needs a reason"
    pytest.skip(f"{block.where} not run: {block.reason}")


# -- commands ---------------------------------------------------------------------------------------


def shell_commands(block: Block) -> list[tuple[int, str]]:
    """(line, command) of a shell block: comments dropped, continued lines joined (a trailing
    backslash, or an indented line after a ``pydla`` line, as a synopsis wraps)."""
    out: list[tuple[int, str]] = []
    for n, raw in enumerate(block.code.splitlines(), start=block.line + 1):
        line = raw
        if block.lang == "console":
            if not line.startswith("$ "):
                if out and line.startswith(" ") and out[-1][1].endswith("\\"):
                    out[-1] = (out[-1][0], out[-1][1][:-1] + " " + line.strip())
                continue
            line = line[2:]
        line = re.sub(r"(^|\s)#.*$", "", line).rstrip()
        if not line.strip():
            continue
        if out and (out[-1][1].endswith("\\") or (raw[:1].isspace() and "pydla" in out[-1][1])):
            prev = out[-1][1].removesuffix("\\")
            out[-1] = (out[-1][0], prev.rstrip() + " " + line.strip())
        else:
            out.append((n, line.strip()))
    return out


def synopsis_argv(tokens: list[str]) -> list[str]:
    """A synopsis read as a command line: brackets dropped, ``...`` dropped, ``a|b`` -> ``a``."""
    argv = []
    for t in tokens:
        t = t.replace("[", "").replace("]", "")
        if t in ("", "...", "…"):
            continue
        if "|" in t and not t.startswith("|"):
            t = t.split("|")[0]
        argv.append(t)
    return argv


def pydla_invocations(command: str) -> list[list[str]]:
    found = []
    for part in re.split(r"\s(?:&&|\|\||;|\|)\s", command):
        try:
            tokens = shlex.split(part)
        except ValueError:
            tokens = part.split()
        while tokens and re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[0]):  # VAR=value before the command
            tokens = tokens[1:]
        if tokens[:1] and (tokens[0] == "pydla" or tokens[0].endswith("/pydla")):
            found.append(synopsis_argv(tokens[1:]))
        elif tokens[:3] and tokens[1:3] == ["-m", "pydla"]:
            found.append(synopsis_argv(tokens[3:]))
    return found


SHELL_BLOCKS = [b for b in ALL if b.lang in SHELL]


@pytest.mark.parametrize("page", sorted({b.page for b in SHELL_BLOCKS}),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_pydla_commands_parse(page: Path) -> None:
    from pydla.cli import build_parser

    problems = []
    for block in (b for b in SHELL_BLOCKS if b.page == page):
        for line, command in shell_commands(block):
            for argv in pydla_invocations(command):
                error = parse_error(build_parser, argv)
                # A console block may show a mistake on purpose: then the error it shows is the one
                # the command line gives.
                if error and f"pydla: error: {error}" not in console_output(block, line):
                    problems.append(f"{page.relative_to(ROOT)}:{line}: pydla {' '.join(argv)}: {error}")
    assert not problems, "\n".join(problems)


def console_output(block: Block, line: int) -> str:
    """The lines a console block shows after its command on ``line`` (up to the next command)."""
    if block.lang != "console":
        return ""
    lines = block.code.splitlines()[line - block.line:]
    return "\n".join(itertools.takewhile(lambda text: not text.startswith("$ "), lines))


def parse_error(build_parser, argv: list[str]) -> str | None:  # type: ignore[no-untyped-def]
    """What the parser says of ``argv``, or None when it parses. A metavar in a synopsis (``N``,
    ``BYTES``) given to a numeric option is read as a number."""
    from pydla.cli import UsageError

    argv = list(argv)
    for _ in range(len(argv) + 1):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(argv)
            return None
        except SystemExit as e:
            if e.code == 0:
                return None
            last = (err.getvalue().strip().splitlines() or ["?"])[-1]
        except UsageError as e:  # what `pydla` prints after "pydla: error: "
            last = str(e)
        m = re.search(r" '([A-Z][A-Z0-9_]*)': not (?:an integer|a number)", last)
        if not m or m[1] not in argv:
            return last
        argv[argv.index(m[1])] = "1"
    return last


def test_repository_paths_in_commands_exist() -> None:
    missing = []
    for block in SHELL_BLOCKS:
        for line, command in shell_commands(block):
            for token in command.split():
                m = REPO_PATH.match(token.strip("'\""))
                if m and not (ROOT / m[1]).exists():
                    missing.append(f"{block.page.relative_to(ROOT)}:{line}: {m[1]}")
    assert not missing, "\n".join(missing)


def test_the_synopsis_reader() -> None:
    synopsis = "run m.dla|m.onnx [--input NAME=F.npy ...] [--port inprocess|linux:DIR]"
    expected = ["run", "m.dla", "--input", "NAME=F.npy", "--port", "inprocess"]
    assert synopsis_argv(synopsis.split(" ")) == expected
    block = Block(ROOT / "README.md", 1, "sh", "PYDLA_PORT=linux:/x pydla run a.onnx  # comment\n"
                  "pydla run m.dla\n      [--seed S]\nmkdir -p d && pydla kmd --mount d \\\n  --threads 4\n",
                  None, "")
    commands = [c for _, c in shell_commands(block)]
    assert [argv for c in commands for argv in pydla_invocations(c)] == [
        ["run", "a.onnx"], ["run", "m.dla", "--seed", "S"], ["kmd", "--mount", "d", "--threads", "4"]]
    from pydla.cli import build_parser

    assert parse_error(build_parser, ["run", "m.dla", "--seed", "S"]) is None
    assert "'runn' is not a pydla command" in (parse_error(build_parser, ["runn", "m.dla"]) or "")
    assert "unrecognized arguments: --nope" in (parse_error(build_parser, ["run", "m.dla", "--nope"]) or "")
    shown = Block(ROOT / "docs" / "cli.md", 1, "console", "$ pydla run m.dla --seed -1\n"
                  "pydla: error: --seed -1: 0 or more [BadParameter]\n$ pydla run m.dla --seed x\n", None, "")
    assert console_output(shown, 2) == "pydla: error: --seed -1: 0 or more [BadParameter]"
    assert console_output(shown, 4) == ""


# -- links, the CLI page, the build -------------------------------------------------------------------


def test_readme_links_point_at_files() -> None:
    text = (ROOT / "README.md").read_text()
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (ROOT / path).exists():
            bad.append(target)
    assert not bad, bad


def test_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250  # a front page: the rest is in docs/
    for heading in ("## Quick start", "## Status", "## Layers", "## Documentation"):
        assert heading in text, heading
    assert "pydla.Session(" in text and "pydla.createRuntime(" in text


def test_user_facing_pages_name_systems_not_design_seeds() -> None:
    """Pages say "the NVDLA runtime API" or "XRT's run recipe", never "the seed's methods" or "seed 000"."""
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in PAGES
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"\bseeds?(?:'s|\s+\d{3})", line, flags=re.I)]
    assert not hits, "\n".join(hits)


def test_cli_page_names_every_command() -> None:
    from pydla.cli import build_parser

    def paths(parser, prefix=()):  # type: ignore[no-untyped-def]
        for action in parser._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                for name, sub in action.choices.items():
                    yield (*prefix, name)
                    yield from paths(sub, (*prefix, name))

    text = (ROOT / "docs" / "cli.md").read_text()
    missing = [" ".join(p) for p in paths(build_parser()) if f"pydla {' '.join(p)}" not in text]
    assert not missing, f"docs/cli.md does not describe: {missing}"


def test_docs_build_without_warnings(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    mkdocs = Path(sys.executable).with_name("mkdocs")
    argv = [str(mkdocs)] if mkdocs.exists() else [sys.executable, "-m", "mkdocs"]
    # Not -q: it hides the warnings from --strict too, which then passes whatever they say.
    result = subprocess.run([*argv, "build", "--strict", "-d", str(tmp_path / "site")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "site" / "reference" / "runtime" / "index.html").is_file()
