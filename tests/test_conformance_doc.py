"""The conformance page (docs/conformance.md) keeps its promise: every contract row has a known
status, every deviation says why (in one of the page's categories, a decision with its link), every
missing contract names the issue that carries it, and the summary counts what the tables hold."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "conformance.md"
HEADER = ["#", "contract", "in pydla", "status", "why"]
STATUSES = ("as written", "deviates", "missing")
# The reasons the page's introduction defines, as each "why" of a deviation starts.
CATEGORIES = ("**idiom**", "**safety**", "**slip**", "**decision**", "**in progress**")
LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Row:
    section: str
    ident: str
    contract: str
    where: str
    status: str
    why: str
    line: int


def cells(line: str) -> list[str]:
    """The cells of a Markdown table line (pipes inside code spans would split a cell: none are)."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse(text: str) -> tuple[list[Row], dict[str, list[str]]]:
    """The contract rows of every section's table, and every other table's rows by section."""
    rows: list[Row] = []
    other: dict[str, list[str]] = {}
    section, header = "", None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        parts = cells(line)
        if header is None:
            header = parts
            continue
        if all(set(p) <= set("-: ") for p in parts):
            continue  # the delimiter row
        if header == HEADER:
            assert len(parts) == 5, f"line {number}: {len(parts)} cells, the table has 5: {line}"
            ident, contract, where, status, why = parts
            rows.append(Row(section, ident, contract, where, status, why, number))
        else:
            other.setdefault(section, []).append(line)
    return rows, other


Page = tuple[list[Row], dict[str, list[str]], str]


@pytest.fixture(scope="module")
def page() -> Page:
    text = PAGE.read_text(encoding="utf-8")
    rows, other = parse(text)
    return rows, other, text


def test_cells_split_as_markdown_does() -> None:
    assert cells("| N1 | `a` | b | as written | |") == ["N1", "`a`", "b", "as written", ""]


def test_the_page_audits_every_source_document(page: Page) -> None:
    rows, _, _ = page
    sections = list(dict.fromkeys(r.section for r in rows))
    assert sections == ["The NVDLA runtime environment", "XRT's run recipe", "The VPUX software layers",
                        "XRT's kernel execution models", "The device-API code generation specification"]
    assert len(rows) >= 190


def test_every_status_is_known(page: Page) -> None:
    rows, _, _ = page
    unknown = [(r.line, r.ident, r.status) for r in rows if r.status not in STATUSES]
    assert unknown == []


def test_every_deviation_says_why(page: Page) -> None:
    rows, _, _ = page
    unexplained = [(r.line, r.ident) for r in rows if r.status == "deviates" and not r.why]
    assert unexplained == []
    uncategorised = [(r.line, r.ident, r.why[:30]) for r in rows
                     if r.status == "deviates" and not r.why.startswith(CATEGORIES)]
    assert uncategorised == []


def test_a_decision_links_where_it_is_recorded(page: Page) -> None:
    rows, _, _ = page
    unlinked = [(r.line, r.ident) for r in rows
                if r.why.startswith("**decision**") and not LINK.search(r.why)]
    assert unlinked == []


def test_links_lead_to_pages_that_exist(page: Page) -> None:
    _, _, text = page
    missing = []
    for target in LINK.findall(text):
        path = target.split("#")[0]
        if path and not path.startswith("http") and not (PAGE.parent / path).is_file():
            missing.append(target)
    assert missing == []


def test_every_missing_contract_names_its_issue(page: Page) -> None:
    rows, _, _ = page
    orphans = [(r.line, r.ident) for r in rows if r.status == "missing" and not re.search(r"#\d+", r.why)]
    assert orphans == []


def test_rows_are_numbered_per_document(page: Page) -> None:
    rows, _, _ = page
    for section in dict.fromkeys(r.section for r in rows):
        idents = [r.ident for r in rows if r.section == section]
        prefix = idents[0][0]
        assert idents == [f"{prefix}{i}" for i in range(1, len(idents) + 1)], section
        assert all(r.contract and r.where for r in rows if r.section == section), section


def test_the_summary_counts_the_tables(page: Page) -> None:
    rows, other, _ = page
    summary = {}
    for line in other["Summary"]:
        name, *numbers = cells(line)
        summary[name.strip("*")] = [int(n.strip("*")) for n in numbers]
    expected = {}
    for section in dict.fromkeys(r.section for r in rows):
        counts = Counter(r.status for r in rows if r.section == section)
        expected[section] = [counts[s] for s in STATUSES]
    expected["all"] = [sum(c[i] for c in expected.values()) for i in range(3)]
    assert summary == expected


def test_no_deviation_is_left_open(page: Page) -> None:
    _, _, text = page
    first_paragraph = text.split("\n## Open\n", 1)[1].strip().split("\n\n")[0]
    assert first_paragraph.startswith("Deviations that no decision explains: none")
