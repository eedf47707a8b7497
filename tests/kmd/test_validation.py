"""Descriptor validation (pydla.firmware.graph.load_task) and the checks of Kmd.submit, one test per rule.

Each test takes a valid built task, corrupts one field of its descriptors through the generated
ctypes structs (or the address list), submits it, and checks the DlaError code, that the message
names the operation and the field, and that the device saw no register access at all.
"""

from __future__ import annotations

import gc
import json
from importlib import resources

import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.firmware import graph
from pydla.firmware.graph import OP_DESC_SIZE, PAUSE_GC_OPERATIONS, SURFACE_DESC_SIZE
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import MAX_ADDRESSES, Kmd
from pydla.kmd.port import AddressEntry
from pydla.loadable.taskbuilder import LoadedTask, TaskBuilder
from pydla.target.config import parse_config
from tests.kmd.support import (
    COMPLETED,
    PROGRAMMED,
    Case,
    Descriptors,
    MakeKmd,
    conv_sdp_pdp,
    copy_add_chain,
    pdp_and_sdp,
    pdp_chain,
    two_conv_pairs,
)

PDP, SDP, CONV, CDP = dla_block_e.PDP, dla_block_e.SDP, dla_block_e.CONV, dla_block_e.CDP


def reject(kmd: Kmd, ctx: int, addresses: list[AddressEntry], code: NvError, *fragments: str,
           priority: int = 0, timeout_ms: int = 1000) -> DlaError:
    """Submit, expect DlaError ``code`` whose message holds every fragment, and no register access."""
    dev = kmd.port.device
    before = kmd.stats()
    trace = dev.record_trace(True)
    try:
        with pytest.raises(DlaError) as info:
            kmd.submit(ctx, addresses, priority=priority, timeout_ms=timeout_ms)
    finally:
        dev.record_trace(False)
    err = info.value
    assert err.code == code, f"{err.code.name}: {err}"
    for fragment in fragments:
        assert fragment in err.message, f"{fragment!r} not in {err.message!r}"
    assert [str(a) for a in trace] == [], "a rejected task touched the device registers"
    assert kmd.stats() == before, "a rejected task was queued or started"
    assert dev.idle()
    return err


def loaded_with(kmd: Kmd, ctx: int, case: Case, patch: object = None) -> LoadedTask:
    """Load ``case`` into ``ctx``; ``patch(Descriptors)`` first corrupts its descriptor bytes."""
    if patch is not None:
        d = Descriptors.of(case.built)
        patch(d)  # type: ignore[operator]
        d.commit()
    return case.load(kmd, ctx)


def rejected(make_kmd: MakeKmd, case: Case, patch: object, code: NvError, *fragments: str,
             config: str = "full") -> DlaError:
    _, kmd = make_kmd(config)
    ctx = kmd.open_context()
    return reject(kmd, ctx, loaded_with(kmd, ctx, case, patch).addresses, code, *fragments)


@pytest.mark.parametrize("make_case", [conv_sdp_pdp, pdp_chain, pdp_and_sdp, two_conv_pairs])
def test_unpatched_tasks_are_accepted_and_correct(make_kmd: MakeKmd, make_case: object) -> None:
    """The baseline every other test corrupts."""
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    case = make_case()  # type: ignore[operator]
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed=1)
    kmd.submit(ctx, loaded.addresses, timeout_ms=1000).wait(5000)
    case.check(kmd, ctx, loaded, expected)


# -- the network descriptor -----------------------------------------------------------------------


def test_num_operations_zero(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.network().num_operations = 0

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "network num_operations = 0")


def test_num_operations_one_more_than_the_descriptors_hold(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.network().num_operations = 4

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.InvalidSize,
             "surface descriptors (surface_desc_index)", f"{4 * SURFACE_DESC_SIZE} bytes needed")


def test_num_operations_far_beyond_the_buffers(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.network().num_operations = 65535

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.InvalidSize,
             "dependency graph (dependency_graph_index)")


def test_num_addresses_mismatch(make_kmd: MakeKmd) -> None:
    case = conv_sdp_pdp()
    n = len(case.built.addresses)

    def patch(d: Descriptors) -> None:
        d.network().num_addresses = n + 1

    rejected(make_kmd, case, patch, NvError.CountMismatch, f"num_addresses = {n + 1}", f"has {n} entries")


def test_address_list_shorter_than_num_addresses(kmd_full: tuple[VirtualDevice, Kmd]) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    loaded = conv_sdp_pdp().load(kmd, ctx)
    n = len(loaded.addresses)
    reject(kmd, ctx, loaded.addresses[:-1], NvError.CountMismatch, f"num_addresses = {n}")


def test_op_desc_size_too_small(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.network().op_desc_size = OP_DESC_SIZE - 4

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, f"op_desc_size {OP_DESC_SIZE - 4}")


def test_surface_desc_size_too_small(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.network().surface_desc_size = 8

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "surface_desc_size 8")


def test_dependency_graph_index_outside_the_address_list(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.network().dependency_graph_index = 99

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadParameter, "dependency_graph_index",
             "address-list index 99 is outside")


# -- operations in the dependency graph ---------------------------------------------------------


def test_common_desc_index_mismatch(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).index = 5

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 1: index field says 5")


def test_unknown_op_type(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).op_type = 9

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 1",
             "op_type 9 is not a known block")


def test_op_type_of_a_block_the_small_config_lacks(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).op_type = int(dla_block_e.RUBIK)

    rejected(make_kmd, pdp_chain(), patch, NvError.NotSupported, "operation 1", "RUBIK block",
             "'small'", config="small")


def test_bdma_task_on_the_small_config(make_kmd: MakeKmd) -> None:
    tb = TaskBuilder()
    tb.bdma(tb.ref("a", 64), tb.ref("b", 64), line_size=64)
    rejected(make_kmd, Case(tb.build(), {}, {}, dict), None, NvError.NotSupported, "operation 0",
             "BDMA block", "'small'", config="small")


def test_consumer_index_out_of_range(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).consumers[PDP].index = 7

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 1 (SDP)",
             "consumers[PDP] index 7 is outside the 3 operations")


def test_consumer_names_an_operation_of_the_wrong_block(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).consumers[PDP].index = 0  # the CONV operation

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 1 (SDP)",
             "consumers[PDP] names operation 0 (CONV), which is not a PDP operation")


def test_consumer_with_an_unknown_event(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).consumers[PDP].event = 0  # NONE

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 1 (SDP)",
             "consumers[PDP] event 0")


def test_operation_consuming_its_own_events(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        c = d.common(2)
        c.consumers[PDP].index, c.consumers[PDP].event = 2, PROGRAMMED
        c.dependency_count += 1

    rejected(make_kmd, pdp_chain(), patch, NvError.BadValue, "operation 2 (PDP): consumes its own events")


def test_dependency_count_inconsistent(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(2).dependency_count = 2

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.CountMismatch,
             "operation 2 (PDP): dependency_count is 2 but 1 operation(s) name it")


def test_dependency_count_zero_for_a_consumer(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).dependency_count = 0

    rejected(make_kmd, pdp_chain(), patch, NvError.CountMismatch, "operation 1 (PDP): dependency_count is 0")


# -- chains -----------------------------------------------------------------------------------------


def test_op_head_not_of_its_block(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.network().op_head[PDP] = 1  # the SDP operation

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "op_head = 1 is not a PDP operation")


def test_op_head_out_of_range(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.network().op_head[CDP] = 3

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "op_head = 3 is not a CDP operation")


def test_chain_loop(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        last = d.common(2)
        last.consumers[PDP].index, last.consumers[PDP].event = 0, PROGRAMMED
        d.common(0).dependency_count = 1  # consistent counts: only the loop is wrong

    rejected(make_kmd, pdp_chain(), patch, NvError.BadValue, "the PDP chain loops back to operation 0")


def test_operation_unreachable_from_op_head(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.network().op_head[PDP] = 1

    rejected(make_kmd, pdp_chain(), patch, NvError.BadValue,
             "PDP operation(s) [0] are not reachable from op_head[PDP] = 1")


# -- fused CONV + SDP -------------------------------------------------------------------------------


def test_flying_sdp_without_fused_parent(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).fused_parent.index = -1

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue,
             "operation 1 (SDP): src_mode FLYING needs a fused_parent CONV operation")


def test_fused_parent_on_a_non_flying_operation(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(2).fused_parent.index = 0

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue,
             "operation 2 (PDP): only an SDP operation in FLYING mode has a fused_parent")


def test_fused_parent_not_a_conv_operation(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).fused_parent.index = 2

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue,
             "operation 1 (SDP): fused_parent 2 is not a CONV operation")


def test_conv_without_sdp(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.op(1).src_mode = int(R.sdp_src_mode_e.MEMORY)
        d.common(1).fused_parent.index = -1

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue,
             "CONV operation(s) [0] feed no SDP operation")


def test_conv_feeding_two_sdp_operations(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(3).fused_parent.index = 0

    rejected(make_kmd, two_conv_pairs(), patch, NvError.BadValue,
             "operation 3 (SDP): CONV operation 0 already feeds SDP operation 1")


def test_sdp_chain_order_differs_from_conv_chain_order(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.common(1).fused_parent.index = 2
        d.common(3).fused_parent.index = 0

    rejected(make_kmd, two_conv_pairs(), patch, NvError.BadValue,
             "the SDP chain takes CONV results in the order [2, 0]", "in the order [0, 2]")


# -- cycles ---------------------------------------------------------------------------------------------


def test_two_operations_waiting_for_each_other(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        pdp, sdp = d.common(0), d.common(1)
        pdp.consumers[SDP].index, pdp.consumers[SDP].event = 1, COMPLETED
        sdp.consumers[PDP].index, sdp.consumers[PDP].event = 0, COMPLETED
        pdp.dependency_count = sdp.dependency_count = 1

    err = rejected(make_kmd, pdp_and_sdp(), patch, NvError.BadValue, "cycle", "operation(s) [0, 1]")
    assert "forever" in err.message


def test_cycle_through_a_chain(make_kmd: MakeKmd) -> None:
    """PDP 0 -> PDP 2 is a chain (the block runs 0 first); 2 signals SDP 1 on completion and SDP 1
    signals PDP 0 on completion: 0 -> 2 -> 1 -> 0 can never complete."""
    tb = TaskBuilder()
    a, b = tb.cube("a", (1, 2, 2)), tb.cube("b", (1, 1, 1))
    u, v = tb.cube("u", (1, 2, 2)), tb.cube("v", (1, 2, 2))
    tb.pdp(a, b, kernel=(2, 2), stride=(2, 2))     # 0 PDP
    tb.sdp(u, v, act="relu")                        # 1 SDP
    tb.pdp(a, b, kernel=(2, 2), stride=(2, 2))     # 2 PDP (chain 0 -> 2)
    case = Case(tb.build(), {}, {}, dict)

    def cycle(d: Descriptors) -> None:
        # 2 signals SDP 1 on completion, SDP 1 signals PDP 0 on completion: 0 -> 2 (chain) -> 1 -> 0.
        c2, c1 = d.common(2), d.common(1)
        c2.consumers[SDP].index, c2.consumers[SDP].event = 1, COMPLETED
        c1.consumers[PDP].index, c1.consumers[PDP].event = 0, COMPLETED
        c1.dependency_count += 1
        d.common(0).dependency_count += 1

    rejected(make_kmd, case, cycle, NvError.BadValue, "cycle", "operation(s) [0, 1, 2]")


# -- surfaces -----------------------------------------------------------------------------------------


def test_cube_offset_plus_size_beyond_the_buffer(make_kmd: MakeKmd) -> None:
    case = conv_sdp_pdp()
    z_size = case.built.buffers["z"]

    def patch(d: Descriptors) -> None:
        d.surface(2).dst.offset = 4

    rejected(make_kmd, case, patch, NvError.InvalidSize, "operation 2 (PDP): dst",
             f"offset 4 + size {z_size} exceeds", f"({z_size} bytes from its offset)")


def test_cube_size_smaller_than_its_strides_span(make_kmd: MakeKmd) -> None:
    case = conv_sdp_pdp()
    z_size = case.built.buffers["z"]

    def patch(d: Descriptors) -> None:
        d.surface(2).dst.size = z_size - 4

    rejected(make_kmd, case, patch, NvError.InvalidSize, "operation 2 (PDP): dst",
             f"size {z_size - 4} is less than the {z_size} bytes")


@pytest.mark.parametrize("dim", ["width", "height", "channels"])
def test_cube_with_a_zero_dimension(make_kmd: MakeKmd, dim: str) -> None:
    def patch(d: Descriptors) -> None:
        setattr(d.surface(2).src, dim, 0)

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 2 (PDP): src", "dimensions C,H,W")


def test_cube_line_stride_too_small(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.surface(2).src.line_stride = 8 * 4 - 4

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 2 (PDP): src",
             "line_stride 28", "width 8")


def test_cube_surf_stride_zero_with_several_channels(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.surface(0).src.surf_stride = 0

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 0 (CONV): src", "surf_stride 0")


def test_cube_channels_over_each_other(make_kmd: MakeKmd) -> None:
    """A surf_stride shorter than a channel's lines: channels 1..3 of y would overwrite channel 0's."""
    def patch(d: Descriptors) -> None:
        d.surface(1).dst.surf_stride = 8 * 4 * 4  # 4 of the 8 lines

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 1 (SDP): dst",
             "line_stride 32 and surf_stride 128", "overlap")


def test_cube_lines_interleaved_by_channel_are_accepted(make_kmd: MakeKmd) -> None:
    """Channels interleaved line by line (surf_stride one line, line_stride C lines) do not overlap."""
    from pydla.firmware.surfaces import _check_no_overlap

    class C:
        channels, height, width, line_stride, surf_stride = 4, 8, 8, 4 * 8 * 4, 8 * 4

    _check_no_overlap(C, 4, "cube")
    C.line_stride = 3 * 8 * 4  # one channel short: line 1 of channel 0 is line 0 of channel 3
    with pytest.raises(DlaError, match="overlap"):
        _check_no_overlap(C, 4, "cube")


def test_cube_logically_larger_than_an_operation_may_be(make_kmd: MakeKmd) -> None:
    """Huge dimensions over tiny strides would make a 4-byte buffer a gigantic float32 cube."""
    def patch(d: Descriptors) -> None:
        src = d.surface(2).src
        src.channels, src.height, src.width = 1, 1 << 15, 1 << 15
        src.line_stride = src.width * 4

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 2 (PDP): src",
             "1x32768x32768 cube exceeds")


def test_conv_weight_smaller_than_the_kernels(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.surface(0).weight.size -= 4

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.InvalidSize, "operation 0 (CONV): weight",
             f"less than the {4 * 3 * 3 * 3 * 4} bytes")


def test_sdp_bias_outside_its_buffer(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.surface(1).bias.offset = 8

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.InvalidSize, "operation 1 (SDP): bias", "offset 8")


def test_unknown_precision(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.op(2).precision = 7

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 2 (PDP): precision",
             "precision 7 is unknown")


def test_unknown_conv_mode(make_kmd: MakeKmd) -> None:
    def patch(d: Descriptors) -> None:
        d.op(0).mode = 9

    rejected(make_kmd, conv_sdp_pdp(), patch, NvError.BadValue, "operation 0 (CONV): mode 9 is unknown")


def test_fp16_on_a_config_without_fp16(make_kmd: MakeKmd) -> None:
    raw = json.loads(resources.files("pydla.target").joinpath("configs/full.json").read_text())
    raw.update(name="fp32only", precisions=["FP32"])
    config = parse_config(raw, "test config")
    tb = TaskBuilder("fp16")
    x, y = tb.cube("x", (2, 4, 4)), tb.cube("y", (2, 2, 2))
    tb.pdp(x, y, kernel=(2, 2), stride=(2, 2))
    _, kmd = make_kmd(config)
    ctx = kmd.open_context()
    loaded = tb.build().load(kmd, ctx)
    reject(kmd, ctx, loaded.addresses, NvError.NotSupported, "operation 0 (PDP): precision",
           "FP16 is not supported by device config 'fp32only'")


@pytest.mark.parametrize("index", [40, -1])
def test_cube_address_list_index_out_of_range(make_kmd: MakeKmd, index: int) -> None:
    case = conv_sdp_pdp()
    n = len(case.built.addresses)

    def patch(d: Descriptors) -> None:
        d.surface(2).src.address = index

    rejected(make_kmd, case, patch, NvError.BadParameter, "operation 2 (PDP): src",
             f"address-list index {index} is outside the {n} entries")


def test_bdma_zero_line_size(make_kmd: MakeKmd) -> None:
    tb = TaskBuilder()
    tb.bdma(tb.ref("a", 64), tb.ref("b", 64), line_size=64)
    case = Case(tb.build(), {}, {}, dict)

    def patch(d: Descriptors) -> None:
        d.op(0).line_size = 0

    rejected(make_kmd, case, patch, NvError.BadValue, "operation 0 (BDMA)",
             "surf_repeat, line_repeat, line_size")


def test_patching_the_buffer_object_after_load_is_checked_too(kmd_full: tuple[VirtualDevice, Kmd]) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    Descriptors.loaded(case.built, kmd, ctx, loaded).surface(2).dst.size = 1 << 20
    reject(kmd, ctx, loaded.addresses, NvError.InvalidSize, "operation 2 (PDP): dst", "size 1048576")


# -- the address list and submit's parameters ---------------------------------------------------------


def test_handle_of_another_context(kmd_full: tuple[VirtualDevice, Kmd]) -> None:
    _, kmd = kmd_full
    a, b = kmd.open_context(), kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, a)
    foreign = [kmd.bo_create(b, 4096) for _ in range(len(loaded.handles) + 2)][-1]
    assert foreign not in loaded.handles.values()
    addresses = list(loaded.addresses)
    addresses[5] = AddressEntry(foreign)
    reject(kmd, a, addresses, NvError.BadParameter, f"handle {foreign} is not a buffer of context {a}",
           "address 5")


@pytest.mark.parametrize("where", ["end", "past", "negative"])
def test_offset_outside_the_buffer(kmd_full: tuple[VirtualDevice, Kmd], where: str) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    loaded = conv_sdp_pdp().load(kmd, ctx)
    entry = loaded.addresses[4]
    size = kmd.bo_size(ctx, entry.handle)
    offset = {"end": size, "past": size + 4096, "negative": -4}[where]
    addresses = list(loaded.addresses)
    addresses[4] = AddressEntry(entry.handle, offset)
    reject(kmd, ctx, addresses, NvError.BadParameter, "address 4", f"offset {offset} is outside buffer",
           f"({size} bytes)")


@pytest.mark.parametrize("timeout_ms", [0, -1, 3_600_001])
def test_timeout_out_of_range(kmd_full: tuple[VirtualDevice, Kmd], timeout_ms: int) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    loaded = conv_sdp_pdp().load(kmd, ctx)
    reject(kmd, ctx, loaded.addresses, NvError.BadParameter, f"timeout_ms {timeout_ms}",
           timeout_ms=timeout_ms)


@pytest.mark.parametrize("priority", [-1, 256])
def test_priority_out_of_range(kmd_full: tuple[VirtualDevice, Kmd], priority: int) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    loaded = conv_sdp_pdp().load(kmd, ctx)
    reject(kmd, ctx, loaded.addresses, NvError.BadParameter, f"priority {priority}", priority=priority)


@pytest.mark.parametrize("count", [0, MAX_ADDRESSES + 1])
def test_address_list_length(kmd_full: tuple[VirtualDevice, Kmd], count: int) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    h = kmd.bo_create(ctx, 64)
    reject(kmd, ctx, [AddressEntry(h)] * count, NvError.BadParameter, f"address list of {count} entries")


def test_unknown_context(kmd_full: tuple[VirtualDevice, Kmd]) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    loaded = conv_sdp_pdp().load(kmd, ctx)
    reject(kmd, ctx + 7, loaded.addresses, NvError.BadParameter, f"context {ctx + 7} is not open")


def test_a_valid_task_still_runs_after_rejections(kmd_full: tuple[VirtualDevice, Kmd]) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    d = Descriptors.loaded(case.built, kmd, ctx, loaded)
    d.network().num_operations = 0
    reject(kmd, ctx, loaded.addresses, NvError.BadValue, "num_operations")
    d.network().num_operations = 3
    d.common(2).dependency_count = 0
    reject(kmd, ctx, loaded.addresses, NvError.CountMismatch, "dependency_count")
    d.common(2).dependency_count = 1
    expected = case.feed(kmd, ctx, loaded, seed=3)
    kmd.submit(ctx, loaded.addresses, timeout_ms=1000).wait(5000)
    case.check(kmd, ctx, loaded, expected)


@pytest.mark.parametrize("enabled", [True, False])
def test_large_task_validation_restores_the_garbage_collector(kmd_full: tuple[VirtualDevice, Kmd],
                                                              enabled: bool) -> None:
    """A large task is read with the collector paused; after it (valid or refused) the collector is
    as the application left it, and the pause really happened."""
    _, kmd = kmd_full
    ctx = kmd.open_context()
    case = copy_add_chain(PAUSE_GC_OPERATIONS // 2)
    loaded = case.load(kmd, ctx)
    seen = []
    check_surfaces = graph._check_surfaces

    def spy(*args: object) -> None:
        seen.append(gc.isenabled())
        check_surfaces(*args)  # type: ignore[arg-type]

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        graph._check_surfaces = spy  # type: ignore[assignment]
        job = kmd.submit(ctx, loaded.addresses, timeout_ms=10_000)
        job.wait(20_000)
        assert gc.isenabled() is enabled
        assert seen and not any(seen), "the collector ran during the validation of a large task"
        d = Descriptors.loaded(case.built, kmd, ctx, loaded)
        d.common(PAUSE_GC_OPERATIONS - 1).dependency_count = 0
        reject(kmd, ctx, loaded.addresses, NvError.CountMismatch, "dependency_count")
        assert gc.isenabled() is enabled
    finally:
        graph._check_surfaces = check_surfaces  # type: ignore[assignment]
        (gc.enable if was else gc.disable)()
