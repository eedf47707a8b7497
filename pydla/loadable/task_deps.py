"""The dependency graph of a task's operations, from the byte ranges each reads and writes: read
after write, write after read, write after write (:class:`pydla.loadable.taskbuilder.TaskBuilder`
encodes it the NVDLA way).

Usage: ``[(x, y.index) for x, y in dependencies(ops)]``  (y waits for operation x)
"""

from __future__ import annotations

from pydla.loadable.task_types import Op

# The live accesses of a buffer are indexed by 64 KiB bucket, so that finding the ones an access
# overlaps costs what is near it, not every access so far (a 30,000-node chain made this quadratic).
_BUCKET_SHIFT = 16


def _buckets(start: int, end: int) -> range:
    """The buckets [start, end) touches (an empty range at ``start`` touches start's bucket)."""
    return range(start >> _BUCKET_SHIFT, (max(start, end - 1) >> _BUCKET_SHIFT) + 1)


def dependencies(ops: list[Op]) -> list[tuple[int, Op]]:
    """(x, y) for every y that must wait for an earlier x: y reads what x writes (RAW), or writes
    what x reads or writes (WAR, WAW). An access fully overwritten by a later write is dropped from
    the live set: whoever touches that range later waits for the write, which waited for it."""
    live: dict[str, dict[int, set[int]]] = {}  # buffer -> bucket -> ids of live accesses
    accesses: dict[int, tuple[int, int, int, bool]] = {}  # id -> (start, end, op, is_write)
    next_id = 0
    pairs: list[tuple[int, Op]] = []
    for y in ops:
        refs = [(r, False) for r in y.reads] + [(w, True) for w in y.writes]
        found: set[int] = set()
        for ref, is_write in refs:
            buckets = live.get(ref.buffer)
            if not buckets:
                continue
            end = ref.offset + ref.size
            for b in _buckets(ref.offset, end):
                for aid in buckets.get(b, ()):
                    start, stop, x, x_writes = accesses[aid]
                    if (is_write or x_writes) and start < end and ref.offset < stop and x != y.index:
                        found.add(x)
        pairs += [(x, y) for x in sorted(found)]
        for ref, is_write in refs:
            buckets = live.setdefault(ref.buffer, {})
            end = ref.offset + ref.size
            if is_write:
                # end + 1: an empty access at ``end`` is covered too, and its bucket may be end's
                covered = {aid for b in _buckets(ref.offset, end + 1) for aid in buckets.get(b, ())
                           if ref.offset <= accesses[aid][0] and accesses[aid][1] <= end}
                for aid in covered:
                    start, stop, _, _ = accesses.pop(aid)
                    for b in _buckets(start, stop):
                        buckets[b].discard(aid)
            for b in _buckets(ref.offset, end):
                buckets.setdefault(b, set()).add(next_id)
            accesses[next_id] = (ref.offset, end, y.index, is_write)
            next_id += 1
    return pairs
