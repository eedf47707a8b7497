"""The task encoder's dependency rule (RAW, WAR, WAW between byte ranges, an access fully overwritten
dropped) against a plain quadratic reading of the same rule, on random accesses: the indexed
implementation must give the same pairs, in the same order."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from pydla.loadable.task_deps import dependencies


@dataclass
class _Ref:
    buffer: str
    offset: int
    size: int


@dataclass
class _Op:
    index: int
    reads: list[_Ref] = field(default_factory=list)
    writes: list[_Ref] = field(default_factory=list)


def _reference(ops: list[_Op]) -> list[tuple[int, int]]:
    live: dict[str, list[tuple[int, int, int, bool]]] = {}
    pairs = []
    for y in ops:
        refs = [(r, False) for r in y.reads] + [(w, True) for w in y.writes]
        found = set()
        for ref, is_write in refs:
            end = ref.offset + ref.size
            for start, stop, x, x_writes in live.get(ref.buffer, ()):
                if (is_write or x_writes) and start < end and ref.offset < stop and x != y.index:
                    found.add(x)
        pairs += [(x, y.index) for x in sorted(found)]
        for ref, is_write in refs:
            entries = live.setdefault(ref.buffer, [])
            end = ref.offset + ref.size
            if is_write:
                entries[:] = [e for e in entries if not (ref.offset <= e[0] and e[1] <= end)]
            entries.append((ref.offset, end, y.index, is_write))
    return pairs


@pytest.mark.parametrize("seed", range(40))
def test_indexed_dependencies_equal_the_plain_rule(seed: int) -> None:
    rng = random.Random(seed)
    span = rng.choice([256, 70_000, 1 << 20])  # within one bucket, a few, many

    def ref() -> _Ref:
        offset = rng.randrange(span)
        size = rng.choice([0, 1, 4, 64, 4096, 65_536, 200_000]) if rng.random() < 0.9 else 0
        # sizes and offsets on and around the 64 KiB bucket edges
        if rng.random() < 0.2:
            offset = rng.choice([65_536, 65_535, 131_072]) % max(span, 1)
        return _Ref(rng.choice(["a", "b"]), offset, size)

    ops = [_Op(i, [ref() for _ in range(rng.randrange(3))], [ref() for _ in range(rng.randrange(1, 3))])
           for i in range(rng.randrange(1, 120))]
    got = [(x, y.index) for x, y in dependencies(ops)]  # type: ignore[arg-type]
    assert got == _reference(ops)
