"""The DLA engine as a compute unit: AP_CTRL_CHAIN lets the next task program its operations while the
one before it computes (results and order as if the tasks ran one after another); the unit's control
block as the driver keeps it, and the scalar arguments of a task in its argument registers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pydla.errors import DlaError, NvError
from pydla.firmware.engine import DONE, ENABLED, PROGRAMMED
from pydla.kmd.cu import AP_IDLE, AP_READY, AP_START, ARGS, CTRL
from pydla.kmd.job import COMPLETED
from pydla.target.config import DeviceConfig, load_config
from tests.kmd.support import ENGINE_INTERNALS, MakeKmd, conv_sdp_pdp, drive, pdp_chain, single_pdp, wait_all

WAIT_MS = 10_000


def engine_config(control: str, depth: int) -> DeviceConfig:
    config = load_config("full")
    units = tuple(replace(cu, m_ip_control=control, pipeline_depth=depth) if cu.is_engine else cu
                  for cu in config.ip_layout)
    return replace(config, name=f"engine-{control.lower()}-{depth}", ip_layout=units)


def test_the_full_configuration_declares_a_chain_engine_of_depth_two(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    assert kmd.engine.depth == 2
    _, hs = make_kmd(engine_config("AP_CTRL_HS", 1))
    assert hs.engine.depth == 1


@pytest.mark.headless_only(ENGINE_INTERNALS)
def test_chain_takes_the_next_task_while_one_runs_and_ends_them_in_order(make_kmd: MakeKmd) -> None:
    """Depth 2, three tasks of three contexts: START1 START2 DONE1 START3 DONE2 DONE3. The second
    task is programmed (into the group the first left free) but enables nothing until the first
    ended."""
    dev, kmd = make_kmd(mode="step")
    cases, jobs, expected = [], [], []
    for seed in range(3):
        ctx = kmd.open_context()
        case = single_pdp()
        loaded = case.load(kmd, ctx)
        expected.append(case.feed(kmd, ctx, loaded, seed=seed))
        jobs.append(kmd.submit(ctx, loaded.addresses, timeout_ms=WAIT_MS))
        cases.append((case, ctx, loaded))
    kmd.poll()  # step mode: the driver starts jobs when polled
    first, second, third = jobs
    assert kmd.stats()["in_flight"] == [first.job_id, second.job_id]
    assert second.run is not None and second.run.gated
    assert second.run.state == [PROGRAMMED] and second.run.enable_order == []
    assert first.run is not None and first.run.state == [ENABLED]
    assert first.run.group_of[0] != second.run.group_of[0], "the two tasks share PDP's ping-pong groups"
    assert third.run is None
    drive(kmd, dev, jobs)
    ids = [j.job_id for j in jobs]
    assert list(kmd.engine.cu_events) == [("START", ids[0]), ("START", ids[1]), ("DONE", ids[0]),
                                          ("START", ids[2]), ("DONE", ids[1]), ("DONE", ids[2])]
    assert [j.finished_at for j in jobs] == sorted(j.finished_at for j in jobs)
    for (case, ctx, loaded), want in zip(cases, expected, strict=True):
        case.check(kmd, ctx, loaded, want)


def test_hs_takes_one_task_at_a_time(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd(engine_config("AP_CTRL_HS", 1), mode="step")
    jobs = []
    for seed in range(3):
        ctx = kmd.open_context()
        case = single_pdp()
        loaded = case.load(kmd, ctx)
        case.feed(kmd, ctx, loaded, seed=seed)
        jobs.append(kmd.submit(ctx, loaded.addresses, timeout_ms=WAIT_MS))
    kmd.poll()
    assert kmd.stats()["in_flight"] == [jobs[0].job_id]
    drive(kmd, dev, jobs)
    ids = [j.job_id for j in jobs]
    assert list(kmd.engine.cu_events) == [e for i in ids for e in (("START", i), ("DONE", i))]


@pytest.mark.headless_only(ENGINE_INTERNALS)
def test_a_task_reading_what_the_one_before_wrote_sees_it(make_kmd: MakeKmd) -> None:
    """The same loaded network twice in one context, with no fence between: the second run's input
    is the first's output buffer refilled by nobody; gating keeps the results as if serial. Here
    each run of pdp_chain reads its own input, so both must equal the reference, and the second
    must not have enabled anything before the first ended."""
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    case = pdp_chain(3)
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed=4)
    a = kmd.submit(ctx, loaded.addresses, timeout_ms=WAIT_MS)
    b = kmd.submit(ctx, loaded.addresses, timeout_ms=WAIT_MS)
    kmd.poll()
    assert b.run is not None and b.run.gated
    while not a.done:
        assert b.run.enable_order == [], "a gated task enabled an operation"
        kmd.poll()
        dev.step()
        kmd.poll()
    drive(kmd, dev, [b])
    assert a.state == b.state == COMPLETED
    assert all(s == DONE for s in b.run.state)
    case.check(kmd, ctx, loaded, expected)


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_many_tasks_of_several_contexts_agree_with_their_references(make_kmd: MakeKmd, mode: str) -> None:
    _, kmd = make_kmd(mode=mode)
    work = []
    for seed in range(4):
        ctx = kmd.open_context()
        case = conv_sdp_pdp() if seed % 2 else pdp_chain(2)
        loaded = case.load(kmd, ctx)
        work.append((case, ctx, loaded))
    for round_ in range(3):
        expected = [case.feed(kmd, ctx, loaded, seed=10 * round_ + i)
                    for i, (case, ctx, loaded) in enumerate(work)]
        jobs = [kmd.submit(ctx, loaded.addresses, timeout_ms=WAIT_MS) for _, ctx, loaded in work]
        wait_all(jobs)
        for (case, ctx, loaded), want in zip(work, expected, strict=True):
            case.check(kmd, ctx, loaded, want)
    events = list(kmd.engine.cu_events)
    done = [i for kind, i in events if kind == "DONE"]
    assert done == sorted(done), "tasks end in the order they were taken"


@pytest.mark.headless_only(ENGINE_INTERNALS)
def test_a_failed_task_restarts_the_one_programmed_behind_it(make_kmd: MakeKmd) -> None:
    """The head fails on the device (a bad configuration reaches PDP): its blocks are reset, which
    undoes the programming of the gated task behind it; that one programs again and completes."""
    dev, kmd = make_kmd(mode="step")
    bad_ctx, good_ctx = kmd.open_context(), kmd.open_context()
    bad = single_pdp()
    lb = bad.load(kmd, bad_ctx)
    bad.feed(kmd, bad_ctx, lb, seed=0)
    good = single_pdp()
    lg = good.load(kmd, good_ctx)
    expected = good.feed(kmd, good_ctx, lg, seed=1)
    dev.inject_error("PDP")
    failing = kmd.submit(bad_ctx, lb.addresses, timeout_ms=WAIT_MS)
    behind = kmd.submit(good_ctx, lg.addresses, timeout_ms=WAIT_MS)
    kmd.poll()
    assert behind.run is not None and behind.run.gated
    drive(kmd, dev, [failing, behind])
    with pytest.raises(DlaError) as info:
        failing.wait(WAIT_MS)
    assert info.value.code == NvError.BadValue
    behind.wait(WAIT_MS)
    good.check(kmd, good_ctx, lg, expected)


@pytest.mark.headless_only(ENGINE_INTERNALS)
def test_closing_the_context_of_a_gated_task_leaves_the_running_one_alone(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd(mode="step")
    ctx, other = kmd.open_context(), kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed=2)
    running = kmd.submit(ctx, loaded.addresses, timeout_ms=WAIT_MS)
    victim_case = conv_sdp_pdp()
    lv = victim_case.load(kmd, other)
    victim_case.feed(kmd, other, lv, seed=3)
    victim = kmd.submit(other, lv.addresses, timeout_ms=WAIT_MS)
    kmd.poll()
    assert victim.run is not None and victim.run.gated
    kmd.close_context(other)
    with pytest.raises(DlaError) as info:
        victim.wait(WAIT_MS)
    assert info.value.code == NvError.InvalidState
    drive(kmd, dev, [running])
    running.wait(WAIT_MS)
    case.check(kmd, ctx, loaded, expected)
    assert kmd.stats()["in_flight"] == []


# -- the engine unit's registers and scalar arguments ---------------------------------------------------


def test_scalars_are_in_the_engine_units_argument_registers_while_the_task_runs(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    case = single_pdp()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed=5)
    kmd.cu_open_context(ctx, "dla", exclusive=True)
    assert kmd.cu_reg_read(ctx, "dla", CTRL) == AP_IDLE | AP_READY
    job = kmd.submit(ctx, loaded.addresses, timeout_ms=WAIT_MS, scalars=[(0, 3), (6, -2), (2, 1 << 40)])
    kmd.poll()
    assert job.task.scalars == ((0, 3), (2, 1 << 40), (6, (1 << 64) - 2))
    assert kmd.cu_reg_read(ctx, "dla", CTRL) == AP_START | AP_READY  # depth 2: it takes another
    words = {off: kmd.cu_reg_read(ctx, "dla", off) for off in range(ARGS, ARGS + 8 * 8, 4)}
    assert words[ARGS] == 3 and words[ARGS + 4] == 0  # argidx 0: the DPU opcode, low word first
    assert (words[ARGS + 16], words[ARGS + 20]) == (0, 1 << 8)  # argidx 2 = 2^40
    assert (words[ARGS + 48], words[ARGS + 52]) == (0xFFFFFFFE, 0xFFFFFFFF)  # argidx 6 = -2
    assert sum(words.values()) == 3 + (1 << 8) + 0xFFFFFFFE + 0xFFFFFFFF  # nothing else
    with pytest.raises(DlaError) as info:
        kmd.cu_reg_write(ctx, "dla", ARGS, 4)
    assert info.value.code == NvError.NotSupported
    assert "it is the DLA engine" in info.value.message
    drive(kmd, dev, [job])
    case.check(kmd, ctx, loaded, expected)
    assert kmd.cu_reg_read(ctx, "dla", CTRL) == AP_IDLE | AP_READY
    assert kmd.cu_reg_read(ctx, "dla", ARGS) == 0


def test_a_prepared_task_keeps_its_scalars(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    case = single_pdp()
    loaded = case.load(kmd, ctx)
    case.feed(kmd, ctx, loaded, seed=6)
    prep = kmd.prepare(ctx, loaded.addresses, [(1, 7)])
    kmd.cu_open_context(ctx, "dla", exclusive=True)
    for _ in range(2):
        job = kmd.submit_prepared(ctx, prep, timeout_ms=WAIT_MS)
        kmd.poll()
        assert kmd.cu_reg_read(ctx, "dla", ARGS + 8) == 7
        drive(kmd, dev, [job])


@pytest.mark.parametrize(("scalars", "words"), [
    ([(4094, 1)], "scalar argidx 4094 is outside the argument registers of compute unit 'dla_engine:dla' "
                  "(0..477)"),
    ([(1, 0), (1, 2)], "scalar argidx 1 given twice"),
    ([(0, 1 << 64)], "scalar argidx 0: value 18446744073709551616 does not fit 64 bits"),
    ([(0, 1.5)], "scalar argument (0, 1.5) must be an (argidx, value) pair of integers"),
    ([(-1, 0)], "scalar argidx -1 is outside"),
    ([(i, 0) for i in range(65)], "a list of at most 64 (argidx, value) pairs"),
])
def test_bad_scalars_are_refused_by_name(make_kmd: MakeKmd, scalars: list[tuple[int, int]],
                                         words: str) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    loaded = single_pdp().load(kmd, ctx)
    for call in (lambda: kmd.submit(ctx, loaded.addresses, scalars=scalars),
                 lambda: kmd.prepare(ctx, loaded.addresses, scalars)):
        with pytest.raises(DlaError) as info:
            call()
        assert info.value.code == NvError.BadParameter
        assert words in info.value.message


def test_scalars_on_a_device_without_an_engine_unit_are_not_supported(make_kmd: MakeKmd) -> None:
    config = load_config("full")
    bare = replace(config, name="bare", ip_layout=tuple(cu for cu in config.ip_layout if not cu.is_engine))
    _, kmd = make_kmd(bare)
    assert kmd.engine.depth == 1  # no engine unit: one task at a time
    ctx = kmd.open_context()
    loaded = single_pdp().load(kmd, ctx)
    kmd.submit(ctx, loaded.addresses).wait(WAIT_MS)  # without scalars all is as before
    with pytest.raises(DlaError) as info:
        kmd.submit(ctx, loaded.addresses, scalars=[(0, 3)])
    assert info.value.code == NvError.NotSupported
    assert "device 'bare' declares none" in info.value.message
