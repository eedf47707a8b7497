"""Prepared jobs: a task validated once by the KMD and queued again and again; dropped when a buffer
it uses is destroyed; the KMD runs its own copy of the descriptors; untrusted input is still refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.kmd.driver import MAX_PREPARED, Kmd
from tests.kmd.support import HOST_COPY, Descriptors, MakeKmd, conv_sdp_pdp, pdp_chain, single_pdp

WAIT_MS = 5000


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_a_prepared_job_runs_again_and_again_on_new_data(make_kmd: MakeKmd, mode: str) -> None:
    _, kmd = make_kmd(mode=mode)
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    prep = kmd.prepare(ctx, loaded.addresses)  # type: ignore[arg-type]
    for seed in range(4):
        expected = case.feed(kmd, ctx, loaded, seed)
        job = kmd.submit_prepared(ctx, prep, timeout_ms=WAIT_MS)
        job.wait(WAIT_MS)
        case.check(kmd, ctx, loaded, expected)
    assert kmd.prepared_ids(ctx) == [prep]


def test_prepare_refuses_what_submit_refuses(kmd_full: tuple[Any, Kmd]) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    case = single_pdp()
    built = case.built
    patch = Descriptors.of(built)
    patch.surface(0).src.address = 99  # an address-list index the task does not have
    loaded = patch.commit().load(kmd, ctx)
    with pytest.raises(DlaError) as submitted:
        kmd.submit(ctx, loaded.addresses)  # type: ignore[arg-type]
    with pytest.raises(DlaError) as prepared:
        kmd.prepare(ctx, loaded.addresses)  # type: ignore[arg-type]
    assert prepared.value.code == submitted.value.code == NvError.BadParameter
    assert "99" in prepared.value.message
    assert kmd.prepared_ids(ctx) == []


@pytest.mark.headless_only(HOST_COPY)
def test_the_kmd_runs_its_own_copy_of_the_descriptors(kmd_full: tuple[Any, Kmd]) -> None:
    """Descriptors changed in the client's memory after prepare change nothing the prepared job
    does (the KMD validated and kept its copy); preparing again validates the new bytes."""
    _, kmd = kmd_full
    ctx = kmd.open_context()
    case = single_pdp()
    loaded = case.load(kmd, ctx)
    prep = kmd.prepare(ctx, loaded.addresses)  # type: ignore[arg-type]
    live = Descriptors.loaded(case.built, kmd, ctx, loaded)
    live.surface(0).src.address = 99  # now invalid in memory
    expected = case.feed(kmd, ctx, loaded, 1)
    kmd.submit_prepared(ctx, prep).wait(WAIT_MS)
    case.check(kmd, ctx, loaded, expected)
    with pytest.raises(DlaError) as info:
        kmd.prepare(ctx, loaded.addresses)  # type: ignore[arg-type]
    assert info.value.code == NvError.BadParameter


def test_destroying_a_buffer_drops_the_prepared_jobs_that_use_it(kmd_full: tuple[Any, Kmd]) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    a, b = pdp_chain(2), single_pdp()
    loaded_a, loaded_b = a.load(kmd, ctx), b.load(kmd, ctx)
    prep_a = kmd.prepare(ctx, loaded_a.addresses)  # type: ignore[arg-type]
    prep_b = kmd.prepare(ctx, loaded_b.addresses)  # type: ignore[arg-type]
    kmd.bo_destroy(ctx, loaded_a.handles[next(iter(a.inputs))])
    assert kmd.prepared_ids(ctx) == [prep_b]
    with pytest.raises(DlaError) as info:
        kmd.submit_prepared(ctx, prep_a)
    assert info.value.code == NvError.BadParameter and f"prepared task {prep_a}" in info.value.message
    expected = b.feed(kmd, ctx, loaded_b, 2)
    kmd.submit_prepared(ctx, prep_b).wait(WAIT_MS)
    b.check(kmd, ctx, loaded_b, expected)


def test_prepared_jobs_are_per_context_and_released(kmd_full: tuple[Any, Kmd]) -> None:
    _, kmd = kmd_full
    mine, other = kmd.open_context(), kmd.open_context()
    case = single_pdp()
    prep = kmd.prepare(mine, case.load(kmd, mine).addresses)  # type: ignore[arg-type]
    with pytest.raises(DlaError) as info:
        kmd.submit_prepared(other, prep)  # another context cannot use it, whatever its number
    assert info.value.code == NvError.BadParameter
    for bad in ("1", 1.0, None, -1):
        with pytest.raises(DlaError):
            kmd.submit_prepared(mine, bad)  # type: ignore[arg-type]
    kmd.release_prepared(mine, prep)
    kmd.release_prepared(mine, prep)  # idempotent
    assert kmd.prepared_ids(mine) == []
    kmd.close_context(mine)
    with pytest.raises(DlaError):
        kmd.prepared_ids(mine)


def test_prepared_jobs_per_context_are_bounded(kmd_full: tuple[Any, Kmd],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _, kmd = kmd_full
    monkeypatch.setattr("pydla.kmd.driver.MAX_PREPARED", 3)
    ctx = kmd.open_context()
    addresses = single_pdp().load(kmd, ctx).addresses
    for _ in range(3):
        kmd.prepare(ctx, addresses)  # type: ignore[arg-type]
    with pytest.raises(DlaError) as info:
        kmd.prepare(ctx, addresses)  # type: ignore[arg-type]
    assert info.value.code == NvError.ResourceError
    assert MAX_PREPARED >= 1024


def test_job_arguments_are_checked_as_for_submit(kmd_full: tuple[Any, Kmd]) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    prep = kmd.prepare(ctx, single_pdp().load(kmd, ctx).addresses)  # type: ignore[arg-type]
    with pytest.raises(DlaError) as info:
        kmd.submit_prepared(ctx, prep, timeout_ms=0)
    assert info.value.code == NvError.BadParameter
    with pytest.raises(DlaError) as info:
        kmd.submit_prepared(ctx, prep, priority=256)
    assert info.value.code == NvError.BadParameter


def test_programs_are_written_packed_and_give_the_same_registers(make_kmd: MakeKmd) -> None:
    """A prepared run leaves each register group exactly as the one-by-one writes would."""
    dev_a, kmd_a = make_kmd()
    dev_b, kmd_b = make_kmd()
    results = []
    for dev, kmd, packed in ((dev_a, kmd_a, True), (dev_b, kmd_b, False)):
        if not packed:
            dev.record_trace()  # a recorded trace takes the one-by-one path
        ctx = kmd.open_context()
        case = conv_sdp_pdp()
        loaded = case.load(kmd, ctx)
        expected = case.feed(kmd, ctx, loaded, 3)
        kmd.submit_prepared(ctx, kmd.prepare(ctx, loaded.addresses)).wait(WAIT_MS)  # type: ignore[arg-type]
        case.check(kmd, ctx, loaded, expected)
        results.append([bytes(g) for b in dev.state.blocks.values() for g in b.groups])
    assert results[0] == results[1]
    assert np.count_nonzero(np.frombuffer(b"".join(results[0]), np.uint8)) > 0


def test_validation_takes_the_limits_from_the_device_information(kmd_full: tuple[Any, Kmd]) -> None:
    """The KMD knows what one operation may do from its device information (not from constants of
    the device's package): a device that allows smaller kernels gets a 2x2 pool refused."""
    import dataclasses

    _, kmd = kmd_full
    assert (kmd.info.max_kernel, kmd.info.max_stride) == (1024, 64)
    ctx = kmd.open_context()
    addresses = single_pdp().load(kmd, ctx).addresses
    kmd.config = dataclasses.replace(kmd.info, max_kernel=1)
    with pytest.raises(DlaError) as info:
        kmd.prepare(ctx, addresses)  # type: ignore[arg-type]
    assert info.value.code == NvError.BadValue and "<= 1" in info.value.message
