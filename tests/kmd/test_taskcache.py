"""The validated-task cache: the same task submitted again reuses its graph and register writes, but
only while every descriptor byte it was validated from is unchanged; a change is validated anew (and
a bad change refused), and destroying a buffer or closing a context forgets their graphs."""

from __future__ import annotations

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.kmd.port import AddressEntry
from tests.kmd.support import HOST_PROGRAMS, Descriptors, MakeKmd, conv_sdp_pdp


@pytest.mark.headless_only(HOST_PROGRAMS)
def test_resubmits_hit_and_stay_correct(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    for seed in range(4):
        expected = case.feed(kmd, ctx, loaded, seed)
        kmd.submit(ctx, loaded.addresses).wait(10_000)
        case.check(kmd, ctx, loaded, expected)
    assert (kmd.tasks.misses, kmd.tasks.hits) == (1, 3)
    graph = kmd.tasks.get(kmd.port, kmd.submit(ctx, loaded.addresses).task,
                          tuple(e.handle for e in loaded.addresses), kmd.config)
    assert set(graph.programs) == {0, 1, 2}  # every operation's writes were kept


def test_a_changed_descriptor_is_validated_again(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    kmd.submit(ctx, loaded.addresses).wait(10_000)
    live = Descriptors.loaded(case.built, kmd, ctx, loaded)
    live.op(1).act = 0  # SDP without ReLU now: a valid change, which must take effect
    expected = case.feed(kmd, ctx, loaded, 7)
    kmd.submit(ctx, loaded.addresses).wait(10_000)
    got = case.result(kmd, ctx, loaded)["y"]
    assert (got < 0).any() and not np.allclose(got, expected["y"])  # no longer rectified
    assert kmd.tasks.misses == 2
    live.network().num_operations = 0  # invalid: refused, never run from the stale graph
    with pytest.raises(DlaError, match="num_operations = 0") as e:
        kmd.submit(ctx, loaded.addresses)
    assert e.value.code == NvError.BadValue


def test_other_addresses_contexts_and_forgetting(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    a, b = kmd.open_context(), kmd.open_context()
    case = conv_sdp_pdp()
    la, lb = case.load(kmd, a), case.load(kmd, b)
    kmd.submit(a, la.addresses).wait(10_000)
    kmd.submit(b, lb.addresses).wait(10_000)
    assert len(kmd.tasks) == 2 and kmd.tasks.hits == 0  # same bytes, other context: its own graph
    shifted = [AddressEntry(e.handle, e.offset, e.size) for e in la.addresses]
    kmd.submit(a, shifted).wait(10_000)
    assert kmd.tasks.hits == 1
    kmd.bo_destroy(a, la.handles["z"])
    assert len(kmd.tasks) == 1
    kmd.close_context(b)
    assert len(kmd.tasks) == 0
