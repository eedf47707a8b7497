"""SHAVE task lists as a whole: FIFO depths, barrier counts, notify barriers, deadlock freedom.

The tasks of a list run in FIFOs: each tile's kernel tasks in list order, the DMA tasks in list
order, each task after the barriers it waits on fired; a barrier fires once all the tasks that
update it (its producers) ended. Once the fields of each task are checked (:mod:`pydla.firmware.shave`),
these checks make sure the list can run to its end on the device:

- each FIFO holds at most FIFO_DEPTH tasks (they are all pushed at once);
- every barrier a task waits on is updated by at least one task;
- ``notify_mask`` is not empty, lies inside ``barrier_mask``, and each notify barrier is updated by a
  task and waited on by none (its firing is how the KMD learns that the list ended);
- no deadlock: in the graph of FIFO order (a task before the next one of its FIFO) and barrier
  edges (a producer before the barrier, the barrier before its consumers) there is no cycle;
- every task ends before the list does: it reaches a notify barrier in that graph (else the list
  could be reported done while it still runs).

A task with DLA operations beside its list (the VPUX per-variant barriers: each operation waits on
and updates barriers of its own) has them checked as tasks of the list too: their barriers count as
producers and consumers; a block's chain is a FIFO (an operation completes after the one before it)
and so is each dependency edge (and a fused CONV before its SDP), so a cycle through operations and
SHAVE tasks is named like any other; a list task may end in a DLA operation instead of a notify
barrier (the task ends when its operations and its notify barriers did).

Usage: ``barriers = check_list("task 3: SHAVE list", acts, dmas, barrier_mask, notify_mask)`` (and the
task's DLA operations as ``dla``, a :class:`~pydla.firmware.shave.DlaPart`, when it has some)
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError

if TYPE_CHECKING:
    from pydla.firmware.shave import ActTask, DlaPart, DmaTask

FIFO_DEPTH = int(S.FIFO_DEPTH)


def check_list(where: str, acts: Sequence[ActTask], dmas: Sequence[DmaTask], barrier_mask: int,
               notify_mask: int, dla: DlaPart | None = None) -> dict[int, tuple[int, int]]:
    """Check the list (see the module docstring); return each used barrier's (producers, consumers),
    the DLA operations of ``dla`` counted with the tasks."""
    tasks: list[Any] = [*acts, *dmas]
    orders: list[tuple[int, int, str]] = []  # DLA order: (before, after, why)
    if dla is not None:
        base = len(tasks)
        tasks += [_DlaNode(op.name, w, u) for op, w, u in zip(dla.ops, dla.waits, dla.updates, strict=True)]
        for chain in dla.chains:
            orders += [(base + a, base + b, "then, in its block's chain,")
                       for a, b in itertools.pairwise(chain)]
        orders += [(base + a, base + b, "then, by its dependency,") for a, b in dla.deps]
    fifos: dict[str, list[int]] = {}
    for i, a in enumerate(acts):
        fifos.setdefault(f"the FIFO of tile {a.tile}", []).append(i)
    if dmas:
        fifos["the DMA FIFO"] = list(range(len(acts), len(acts) + len(dmas)))
    for fifo, members in fifos.items():
        if len(members) > FIFO_DEPTH:
            raise DlaError(NvError.BadValue,
                           f"{where}: {len(members)} tasks go to {fifo}, which holds {FIFO_DEPTH} (the KMD "
                           "pushes a list at once): split the list")
    producers: dict[int, list[int]] = {}
    consumers: dict[int, list[int]] = {}
    for i, t in enumerate(tasks):
        for b in _bits(t.update_mask):
            producers.setdefault(b, []).append(i)
        for b in _bits(t.wait_mask):
            consumers.setdefault(b, []).append(i)
    for b, waiting in sorted(consumers.items()):
        if b not in producers:
            raise DlaError(NvError.BadValue,
                           f"{where}: {tasks[waiting[0]].name} waits on barrier {b}, which no task updates: "
                           "no task waits on a barrier nothing updates (it would never start)")
    if not notify_mask and dla is None:  # (beside DLA operations, the list may end in them alone)
        raise DlaError(NvError.BadValue, f"{where}: notify_mask is 0: the list needs a notify barrier to "
                                         "tell its end")
    if notify_mask & ~barrier_mask:
        raise DlaError(NvError.BadValue, f"{where}: notify_mask {notify_mask:#x} names barrier(s) "
                                         f"{_bits(notify_mask & ~barrier_mask)} outside barrier_mask "
                                         f"{barrier_mask:#x}")
    for b in _bits(notify_mask):
        if b not in producers:
            raise DlaError(NvError.BadValue, f"{where}: notify barrier {b} (notify_mask {notify_mask:#x}) is "
                                             "updated by no task: it would never fire")
        if b in consumers:
            raise DlaError(NvError.BadValue,
                           f"{where}: notify barrier {b} (notify_mask {notify_mask:#x}) is waited on by "
                           f"{tasks[consumers[b][0]].name}: a notify barrier ends the list, no task waits "
                           "on it")
    edges = _edges(len(tasks), fifos, producers, consumers)
    for before, after, why in orders:
        edges[before].append((after, why))
    _check_acyclic(where, tasks, edges)
    # The task ends once its DLA operations and the notify barriers did: each list task must come
    # before one of them.
    _check_all_end(where, tasks, edges, notify_mask, len(acts) + len(dmas))
    return {b: (len(producers.get(b, ())), len(consumers.get(b, ())))
            for b in sorted(set(producers) | set(consumers))}


def _edges(n: int, fifos: dict[str, list[int]], producers: dict[int, list[int]],
           consumers: dict[int, list[int]]) -> list[list[tuple[int, str]]]:
    """Nodes 0..n-1 are tasks, n + b barrier b; each edge (target, why)."""
    edges: list[list[tuple[int, str]]] = [[] for _ in range(n + 32)]
    for fifo, members in fifos.items():
        for a, b in itertools.pairwise(members):
            edges[a].append((b, f"then, in {fifo},"))
    for b, ps in producers.items():
        for p in ps:
            edges[p].append((n + b, "updates"))
    for b, cs in consumers.items():
        for c in cs:
            edges[n + b].append((c, "waited on by"))
    return edges


Edges = list[list[tuple[int, str]]]


def _check_acyclic(where: str, tasks: Sequence[Any], edges: Edges) -> None:
    indegree = [0] * len(edges)
    for targets in edges:
        for t, _ in targets:
            indegree[t] += 1
    ready = deque(i for i, d in enumerate(indegree) if d == 0)
    left = len(edges)
    while ready:
        i = ready.popleft()
        left -= 1
        for t, _ in edges[i]:
            indegree[t] -= 1
            if indegree[t] == 0:
                ready.append(t)
    if not left:
        return
    # Walk the stuck nodes to a repeat: that is a cycle; describe it from a barrier on it.
    stuck = {i for i, d in enumerate(indegree) if d > 0}
    trimmed = True
    while trimmed:  # drop what only follows a cycle: every node left then leads into one
        dead = {i for i in stuck if not any(t in stuck for t, _ in edges[i])}
        stuck -= dead
        trimmed = bool(dead)
    path: list[int] = []
    seen: dict[int, int] = {}
    node = min(stuck)
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = next(t for t, _ in edges[node] if t in stuck)
    cycle = path[seen[node]:]
    n = len(tasks)
    start = next(k for k, v in enumerate(cycle) if v >= n)
    cycle = cycle[start + 1:] + cycle[:start + 1]  # from a task waiting on a barrier of the cycle
    barrier = cycle[-1] - n
    text = [tasks[cycle[0]].name]
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):  # noqa: B905 (the cycle closes on its start)
        why = next(w for t, w in edges[a] if t == b)
        text.append(f"{why} {f'barrier {b - n}' if b >= n else tasks[b].name}")
    raise DlaError(NvError.BadValue,
                   f"{where}: deadlock: {tasks[cycle[0]].name} waits on barrier {barrier}, which can only "
                   f"fire after it ran: {', '.join(text)}; the tasks would wait for each other forever")


def _check_all_end(where: str, tasks: Sequence[Any], edges: list[list[tuple[int, str]]],
                   notify_mask: int, list_tasks: int) -> None:
    n = len(tasks)
    back: list[list[int]] = [[] for _ in edges]
    for a, targets in enumerate(edges):
        for t, _ in targets:
            back[t].append(a)
    reach = {n + b for b in _bits(notify_mask)} | set(range(list_tasks, n))
    todo = deque(reach)
    while todo:
        for a in back[todo.popleft()]:
            if a not in reach:
                reach.add(a)
                todo.append(a)
    late = [t for i, t in enumerate(tasks) if i not in reach]
    if late:
        raise DlaError(NvError.BadValue,
                       f"{where}: {late[0].name} comes before no notify barrier (notify_mask "
                       f"{notify_mask:#x}): the list could end while it still runs; make it update a barrier "
                       "that a notify barrier follows")


@dataclass(frozen=True)
class _DlaNode:
    """A DLA operation among the list's tasks: its name and barriers."""

    name: str
    wait_mask: int
    update_mask: int


def _bits(mask: int) -> list[int]:
    return [b for b in range(mask.bit_length()) if mask >> b & 1]
