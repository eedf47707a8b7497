"""NVDLA DLA tasks through the engine scheduler (pydla.firmware.nvdla) against NVDLA's real register
file: the register writes as NVIDIA's firmware makes them (docs/development/nvdla/firmware.md), the
block parameters the golden-image tests derive (tests/hw/nvdla/nvdla_run.py), and bad descriptors
refused with the field named."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pydla.deviceapi.generated import dla_interface as I
from pydla.deviceapi.generated import nvdla_v1_regs as R1
from pydla.errors import DlaError, NvError
from pydla.firmware.engine import Engine
from pydla.firmware.interface import KmdDeviceInfo, TaskDesc
from tests.firmware.nvdla_support import RegfilePort, bind, device_info

pytest.importorskip("flatbuffers")
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla import samples
from pydla.loadable.nvdla.reader import parse
from pydla.loadable.nvdla.writer import write_nvdla_loadable

REGRESSION = ("BDMA_L0_0", "CDP_L0_0", "CDP_L0_0_small", "CONV_D_L0_0", "CONV_D_L0_0_small", "PDP_L0_0",
              "PDP_L0_0_small", "RBK_L0_0", "SDP_X1_L0_0", "SDP_X1_L0_0_small")


def run_task(lo: M.NvdlaLoadable, config: str, info: KmdDeviceInfo | None = None,
             patch: Any = None, task_id: int | None = None) -> tuple[RegfilePort, Any, Any]:
    task = next(t for t in lo.task_list if t.interface == M.Interface.DLA1 and task_id in (None, t.id))
    # the firmware interface version: the network descriptor's blob's (the submit contract)
    network_mem = lo.memory_list[lo.address_list[task.address_list[0]].mem_id]
    version = next(b.version for b in lo.blobs if b.name == network_mem.contents[0])
    entries, buffers = bind(lo, task)
    if any(b.name.startswith("m1_OpList") for b in lo.blobs):
        conv_out_scale_one(lo, task, buffers)
    if patch is not None:
        patch(lo, task, buffers)
    port = RegfilePort(config)
    engine = Engine(port, info or device_info(config))
    engine.dla_engine_init()
    desc = TaskDesc(7, 1, entries, nvdla_interface=(version.major, version.minor, version.sub_minor))
    run = engine.dla_execute_task(desc)
    for _ in range(50):
        engine.dla_process_events()
        if run.finished:
            break
    assert run.finished
    if run.error is not None:
        raise run.error
    return port, run, buffers


def conv_out_scale_one(lo: Any, task: Any, buffers: Any) -> None:
    """pydla's sample CONV (pydla.loadable.nvdla.samples) leaves out_cvt.scale and CBUF's fields 0,
    which NVIDIA's firmware would program as -1 (and refuses for scale, CACC only truncates): set
    them in the operation list (address-list entry 1) of a CONV at operation 0."""
    buf = buffers[lo.address_list[task.address_list[1]].mem_id].array
    graph = buffers[lo.address_list[task.address_list[3]].mem_id].array
    if graph[3] != I.dla_op_e.CONV:
        return
    conv = I.dla_conv_op_desc.from_buffer_copy(bytes(buf[:I.dla_conv_op_desc.SIZE]))
    if conv.entry_per_slice:
        return  # a real loadable's (NVIDIA's regression tests): left as it is
    conv.out_cvt.scale = 1
    conv.entry_per_slice, conv.fetch_grain, conv.release = 8, 1, 8
    conv.data_bank, conv.weight_bank = 1, 1
    conv.input_width_cmac, conv.input_height_cmac = 8, 8
    buf[:I.dla_conv_op_desc.SIZE] = list(bytes(conv))


def fields(launch: Any, blocks: tuple[str, ...] | None = None) -> dict[str, set[int]]:
    """Every register field of the launched groups (of ``blocks``, default all), by field name (its
    values across those blocks)."""
    out: dict[str, set[int]] = {}
    for block, view in launch.views.items():
        if blocks is not None and block not in blocks:
            continue
        for reg, _ in type(view)._fields_:
            bits = getattr(view, reg)
            declared = getattr(type(bits), "BITS", ())
            for field in declared:
                value = int(getattr(bits, field.name.lower()))
                # a register of one field is a whole value (an address, a stride): NVIDIA writes it whole
                whole = value << field.lsb if len(declared) == 1 else value
                out.setdefault(field.name.lower(), set()).add(whole)
    return out


def compare(params: Any, launch: Any, blocks: tuple[str, ...] | None = None) -> int:
    """Each field of a block-parameter dataclass equals every launched register field of that name
    (a nested dataclass, such as ConvParams.cdma, against its own block); returns how many were
    compared."""
    if blocks is None:  # the core block's field where it has one (PDP_RDMA's FLYING_MODE is not written)
        core = {"RUBIK": "RBK"}.get(launch.processor, launch.processor)
        got = fields(launch, tuple(b for b in launch.views if b != core)) | fields(launch, (core,))
    else:
        got = fields(launch, blocks)
    count = 0
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if dataclasses.is_dataclass(value):
            count += compare(value, launch, (f.name.upper(),) if f.name.upper() in launch.views else blocks)
            continue
        if isinstance(value, int) and f.name in got:
            assert got[f.name] == {value & 0xFFFFFFFF}, f.name
            count += 1
    return count


@pytest.mark.parametrize("name", REGRESSION)
def test_regression_task_programs_what_the_golden_tests_derive(name: str) -> None:
    from tests.hw.nvdla import nvdla_run as N
    ref = N.Run(name)
    config = "nv_small" if name.endswith("_small") else "nv_full"
    port, run, _ = run_task(ref.lo, config)
    assert port.rf.bus_errors == 0 and run.completed == len(ref.net.operations)
    # the reference derives addresses from its own placement: the same as the support's (4 KiB apart)
    for entry, i in zip(bind(ref.lo, ref.task)[0], range(len(ref.task.address_list)), strict=True):
        assert entry.iova + entry.offset == ref.address(i)
    by_block = {launch.processor: launch for launch in port.launches}
    from pydla.hw.nvdla.target import by_name
    compared = 0
    for op in ref.net.operations:
        block = op.block.name
        params = {"CONV": lambda o: N.conv_params(ref, o, by_name(config)),
                  "SDP": lambda o: N.sdp_params(ref, o),
                  "PDP": lambda o: N.pdp_params(ref, o), "CDP": lambda o: N.cdp_params(ref, o),
                  "RUBIK": lambda o: N.rubik_params(ref, o), "BDMA": None}[block]
        if params is not None:
            compared += compare(params(op), by_block[block])
    if name.startswith("BDMA"):
        t = by_block["BDMA"].transfers
        want = N.bdma_params(ref, ref.op(0)).transfers
        assert len(t) == len(want) and t[0].cfg_src_addr_low.v32 << 5 == want[0].src_addr
    else:
        # fields compared: CDP 20, CONV 114, PDP 39, RUBIK 18, SDP 21 (the names the two share)
        assert compared >= 18
    if name.startswith("CDP"):
        lut = N.cdp_params(ref, ref.op(0)).lut
        assert by_block["CDP"].lut_le == lut.le_table and by_block["CDP"].lut_lo == lut.lo_table
        assert len(lut.le_table) == 65 and len(lut.lo_table) == 257


def test_fused_conv_sdp_enables_the_consumer_first_and_programs_by_the_table() -> None:
    lo = samples.conv_sdp_loadable()
    port, run, buffers = run_task(lo, "nv_full")
    assert [launch.processor for launch in port.launches] == ["SDP", "CONV"]
    assert run.enable_order == [1, 0]  # SDP (the consumer) before its fused parent CONV
    writes = port.writes
    enables = [a for a, v in writes if a in (R1.NVDLA_CACC_D_OP_ENABLE_0, R1.NVDLA_CMAC_A_D_OP_ENABLE_0,
                                            R1.NVDLA_CMAC_B_D_OP_ENABLE_0, R1.NVDLA_CSC_D_OP_ENABLE_0,
                                            R1.NVDLA_CDMA_D_OP_ENABLE_0, R1.NVDLA_SDP_D_OP_ENABLE_0)]
    assert enables == [R1.NVDLA_SDP_D_OP_ENABLE_0, R1.NVDLA_CACC_D_OP_ENABLE_0, R1.NVDLA_CMAC_A_D_OP_ENABLE_0,
                       R1.NVDLA_CMAC_B_D_OP_ENABLE_0, R1.NVDLA_CSC_D_OP_ENABLE_0, R1.NVDLA_CDMA_D_OP_ENABLE_0]
    regs = dict(writes)
    assert regs[R1.NVDLA_CDMA_D_WEIGHT_ADDR_LOW_0] == buffers[4].iova
    assert regs[R1.NVDLA_CDMA_D_DAIN_ADDR_LOW_0_0] == buffers[5].iova
    assert regs[R1.NVDLA_SDP_D_DST_BASE_ADDR_LOW_0] == buffers[6].iova
    assert regs[R1.NVDLA_CSC_D_ATOMICS_0] == 8 * 8 - 1
    assert regs[R1.NVDLA_CDMA_D_ZERO_PADDING_0] == 1 | 1 << 8 | 1 << 16 | 1 << 24
    assert regs[R1.NVDLA_CACC_D_DATAOUT_SIZE_1_0] == 31
    cube = fields(port.launches[1])
    assert cube["datain_channel"] == {15} and cube["conv_x_stride"] == {0}
    assert port.rf.read(R1.NVDLA_GLB_S_INTR_STATUS_0) == 0  # the ISR cleared what it read


@pytest.mark.parametrize("version", [samples.CURRENT_INTERFACE, samples.REGRESSION_INTERFACE])
def test_both_interface_layouts_and_int16(version: M.Version) -> None:
    lo = parse(write_nvdla_loadable(samples.conv_sdp_loadable(version, int16=True)))
    port, _, buffers = run_task(lo, "nv_full")
    regs = dict(port.writes)
    assert regs[R1.NVDLA_SDP_D_DST_BASE_ADDR_LOW_0] == buffers[6].iova
    assert fields(port.launches[1])["in_precision"] == {1}


def test_bdma_transfer_queued_and_launched() -> None:
    port, run, buffers = run_task(samples.bdma_loadable(), "nv_full")
    regs = dict(port.writes)
    assert regs[R1.NVDLA_BDMA_CFG_SRC_ADDR_LOW_0] == buffers[4].iova
    assert regs[R1.NVDLA_BDMA_CFG_DST_ADDR_LOW_0] == buffers[5].iova
    assert regs[R1.NVDLA_BDMA_CFG_LINE_0] == 256 // 32 - 1 and regs[R1.NVDLA_BDMA_CFG_LINE_REPEAT_0] == 7
    assert regs[R1.NVDLA_BDMA_CFG_CMD_0] == 0b11  # MC -> MCIF both ways
    assert port.writes[-1] in ((R1.NVDLA_BDMA_CFG_LAUNCH0_0, 1), (R1.NVDLA_BDMA_CFG_LAUNCH1_0, 1 << 1)) or \
        any(a in (R1.NVDLA_BDMA_CFG_LAUNCH0_0, R1.NVDLA_BDMA_CFG_LAUNCH1_0) for a, _ in port.writes)
    assert len(port.launches) == 1 and len(port.launches[0].transfers) == 1 and run.completed == 1


def _common_patch(index: int, **change: Any) -> Any:
    """Patch dla_common_op_desc ``index`` in the dependency-graph memory (address-list entry 3)."""
    def patch(lo: Any, task: Any, buffers: Any) -> None:
        buf = buffers[lo.address_list[task.address_list[3]].mem_id].array
        size = I.dla_common_op_desc.SIZE
        c = I.dla_common_op_desc.from_buffer_copy(bytes(buf[index * size:(index + 1) * size]))
        for key, value in change.items():
            if key == "consumer":
                block, target, event = value
                c.consumers[block] = I.dla_consumer(index=target, event=event)
            else:
                setattr(c, key, value)
        buf[index * size:(index + 1) * size] = list(bytes(c))
    return patch


def _net_patch(**change: Any) -> Any:
    def patch(lo: Any, task: Any, buffers: Any) -> None:
        buf = buffers[lo.address_list[task.address_list[0]].mem_id].array
        net = I.dla_network_desc.from_buffer_copy(bytes(buf[:I.dla_network_desc.SIZE]))
        for key, value in change.items():
            if key == "op_head":
                net.op_head[value[0]] = value[1]
            else:
                setattr(net, key, value)
        buf[:I.dla_network_desc.SIZE] = list(bytes(net))
    return patch


@pytest.mark.parametrize("patch, message", [
    (_net_patch(op_head=(1, 5)), "op_head = 5 is not a CONV operation"),
    (_net_patch(dependency_graph_index=40), "address-list index 40"),
    (_common_patch(0, op_type=9), "op_type 9 is not a processor"),
    (_common_patch(1, consumer=(1, 0, 2), dependency_count=1),  # one event more than CONV counts
     "dependency_count"),
    (_common_patch(0, consumer=(2, 7, 2)), "consumers[SDP].index 7 is outside"),
    (_common_patch(0, consumer=(2, 1, 9)), "consumers[SDP].event 9"),
    (lambda *a: (_common_patch(1, fused_parent=I.dla_consumer(index=-1, event=0))(*a),
                 _common_patch(0, dependency_count=0)(*a)),
     "src_data.type HW (on the fly) needs a fused_parent"),
])
def test_bad_descriptors_refused_naming_the_field(patch: Any, message: str) -> None:
    with pytest.raises(DlaError) as e:
        run_task(samples.conv_sdp_loadable(), "nv_full", patch=patch)
    assert message in e.value.message


def test_fused_pair_waiting_for_completion_refused() -> None:
    """The CONV waiting for its fused SDP to complete would never start (the SDP needs its data)."""
    with pytest.raises(DlaError) as e:
        run_task(samples.conv_sdp_loadable(), "nv_full",
                 patch=lambda *a: (_common_patch(1, consumer=(1, 0, 1))(*a),
                                   _common_patch(0, dependency_count=2)(*a)))
    assert "waits for event OP_COMPLETED of operation 1 (SDP), its fused pair" in e.value.message


def _two_op_loadable(consumers: tuple[tuple[int, int, int], ...]) -> M.NvdlaLoadable:
    """A PDP (operation 0) and a CDP (operation 1), with ``consumers`` (from, block, to) edges on
    OP_COMPLETED and the dependency counts they make."""
    counts = [0, 0]
    edges: list[dict[int, tuple[int, int]]] = [{}, {}]
    for src, block, dst in consumers:
        edges[src][block] = (dst, I.dla_op_event_e.OP_COMPLETED)
        counts[dst] += 1
    pdp = I.dla_pdp_op_desc(split_num=1, stride_x=1, stride_y=1)
    cdp = I.dla_cdp_op_desc(local_size=3, lut_index=-1)
    cubes = [samples._cube(I.dla_data_cube, 4, 8, 8, 32, 1), samples._cube(I.dla_data_cube, 5, 8, 8, 32, 1)]
    surfaces = [I.dla_pdp_surface_desc(src_data=cubes[0], dst_data=cubes[1]),
                I.dla_cdp_surface_desc(src_data=cubes[0], dst_data=cubes[1])]
    commons = [samples._common(I.dla_op_e.PDP, counts[0], edges[0]),
               samples._common(I.dla_op_e.CDP, counts[1], edges[1])]
    flags = M.MemoryFlags.ALLOC | M.MemoryFlags.SET
    data = [("m4_Src_i4", bytes(8 * 8 * 32), flags),
            ("m5_Dst_i5", bytes(8 * 8 * 32), M.MemoryFlags.ALLOC | M.MemoryFlags.OUTPUT)]
    return samples._task_loadable([pdp, cdp], surfaces, commons, {I.dla_op_e.PDP: 0, I.dla_op_e.CDP: 1}, data,
                                  samples.CURRENT_INTERFACE, (8, 8, 32, M.DataType.INT8))


def test_cycle_refused_and_a_chain_across_blocks_runs_in_order() -> None:
    with pytest.raises(DlaError) as e:
        run_task(_two_op_loadable(((0, I.dla_op_e.CDP, 1), (1, I.dla_op_e.PDP, 0))), "nv_full")
    assert "cycle through operation(s) [0, 1]" in e.value.message
    port, run, _ = run_task(_two_op_loadable(((1, I.dla_op_e.PDP, 0),)), "nv_full")
    assert [launch.processor for launch in port.launches] == ["CDP", "PDP"] and run.enable_order == [1, 0]


def test_operation_fields_checked() -> None:
    def bad_stride(lo: Any, task: Any, buffers: Any) -> None:
        buf = buffers[lo.address_list[task.address_list[1]].mem_id].array
        conv = I.dla_conv_op_desc.from_buffer_copy(bytes(buf[:I.dla_conv_op_desc.SIZE]))
        conv.out_cvt.scale = 3
        buf[:I.dla_conv_op_desc.SIZE] = list(bytes(conv))
    with pytest.raises(DlaError) as e:
        run_task(samples.conv_sdp_loadable(), "nv_full", patch=bad_stride)
    assert "operation 0 (CONV): out_cvt = (3, 0)" in e.value.message


def test_configuration_limits() -> None:
    with pytest.raises(DlaError) as e:
        run_task(samples.bdma_loadable(), "nv_small")
    assert e.value.code == NvError.NotSupported and "BDMA" in e.value.message
    with pytest.raises(DlaError) as e:
        run_task(samples.conv_sdp_loadable(int16=True), "nv_small")
    assert e.value.code == NvError.NotSupported and "INT16" in e.value.message


def test_interface_version_required_and_pydla_devices_refuse_nvdla_tasks() -> None:
    lo = samples.bdma_loadable()
    task = lo.task_list[0]
    entries, _ = bind(lo, task)
    port = RegfilePort("nv_full")
    engine = Engine(port, device_info("nv_full"))
    engine.dla_engine_init()
    with pytest.raises(DlaError) as e:
        engine.dla_execute_task(TaskDesc(1, 1, entries))
    assert e.value.code == NvError.BadParameter and "interface version" in e.value.message
    pydla_info = dataclasses.replace(device_info("nv_full"), nvdla=None)
    from pydla.firmware.graph import load_task
    with pytest.raises(DlaError) as e:
        load_task(port, TaskDesc(1, 1, entries, nvdla_interface=(0, 12, 5)), pydla_info)
    assert e.value.code == NvError.NotSupported


def test_network_of_no_operation_completes_at_once() -> None:
    port, run, _ = run_task(samples.bdma_loadable(), "nv_full", patch=_net_patch(num_operations=0))
    assert run.completed == 0 and run.error is None and port.launches == []


def test_facts_from_a_configuration_section() -> None:
    from pydla.firmware.interface import NvdlaFacts

    @dataclasses.dataclass
    class Section:
        register_map: str = "nvdla_v2"
        precisions: tuple[str, ...] = ("INT8",)
        atom_bytes: int = 8
        sdp_lut: bool = False

    assert NvdlaFacts.of(Section()) == NvdlaFacts("nvdla_v2", (0,), 8, sdp_lut=False)
    facts = NvdlaFacts.of(Section("nvdla_v1", ("INT8", "INT16", "FP16"), 32, True))
    info = dataclasses.replace(device_info("nv_full"), nvdla=facts)
    port, _, _ = run_task(samples.conv_sdp_loadable(), "nv_full", info)
    assert [launch.processor for launch in port.launches] == ["SDP", "CONV"] and port.rf.bus_errors == 0
    # the same cube on nv_small's 8-byte atoms spans two surfaces: past its buffer, refused
    with pytest.raises(DlaError) as e:
        run_task(samples.conv_sdp_loadable(), "nv_small")
    assert "src_data.address = 5: 3904 bytes at offset 0 run past the 2048 bytes" in e.value.message


def _conv_sdp_pdp(pdp_waits: int) -> M.NvdlaLoadable:
    """The sample CONV->SDP (its output in memory, address-list entry 6) and a PDP pooling that output
    (2x2, stride 2, into entry 7) once the CONV signals ``pdp_waits`` and the SDP completes."""
    lo = samples.conv_sdp_loadable()
    blob = {b.name: b.data for b in lo.blobs}
    ops = [I.dla_conv_op_desc.from_buffer_copy(blob["m1_OpList_i1"], 0),
           I.dla_sdp_op_desc.from_buffer_copy(blob["m1_OpList_i1"], I.DLA_OPERATION_CONTAINER_SIZE)]
    surfaces = [I.dla_conv_surface_desc.from_buffer_copy(blob["m2_SurfList_i2"], 0),
                I.dla_sdp_surface_desc.from_buffer_copy(blob["m2_SurfList_i2"], I.DLA_SURFACE_CONTAINER_SIZE)]
    ops[0].out_cvt.scale, ops[0].entry_per_slice, ops[0].fetch_grain, ops[0].release = 1, 8, 1, 8
    ops[0].data_bank = ops[0].weight_bank = 1
    ops[0].input_width_cmac = ops[0].input_height_cmac = 8
    pdp = I.dla_pdp_op_desc(split_num=1, pool_mode=I.pool_mode_e.MAX, pool_width=1, pool_height=1, stride_x=2,
                            stride_y=2)
    pdp_surface = I.dla_pdp_surface_desc(src_data=samples._cube(I.dla_data_cube, 6, 8, 8, 32, 1),
                                         dst_data=samples._cube(I.dla_data_cube, 7, 4, 4, 32, 1))
    commons = [samples._common(I.dla_op_e.CONV, 1, {I.dla_op_e.SDP: (1, I.dla_op_event_e.OP_PROGRAMMED),
                                                    I.dla_op_e.PDP: (2, pdp_waits)}),
               samples._common(I.dla_op_e.SDP, 1, {I.dla_op_e.CONV: (0, I.dla_op_event_e.OP_ENABLED)}),
               samples._common(I.dla_op_e.PDP, 2)]
    commons[1].consumers[I.dla_op_e.CONV] = I.dla_consumer(index=-1, event=0)  # the fused parent says it
    commons[1].fused_parent = I.dla_consumer(index=0, event=I.dla_op_event_e.OP_ENABLED)
    commons[1].consumers[I.dla_op_e.PDP] = I.dla_consumer(index=2, event=I.dla_op_event_e.OP_COMPLETED)
    flags = M.MemoryFlags.ALLOC | M.MemoryFlags.SET
    data = [("m4_CONVWgt_i4", blob["m4_CONVWgt_i4"], flags), ("m5_CONVSrc_i5", blob["m5_CONVSrc_i5"], flags),
            ("m6_SDPDst_i6", bytes(8 * 8 * 32), flags),
            ("m7_PDPDst_i7", bytes(4 * 4 * 32), M.MemoryFlags.ALLOC | M.MemoryFlags.OUTPUT)]
    return samples._task_loadable([*ops, pdp], [*surfaces, pdp_surface], commons,
                                  {I.dla_op_e.CONV: 0, I.dla_op_e.SDP: 1, I.dla_op_e.PDP: 2}, data,
                                  samples.CURRENT_INTERFACE, (4, 4, 32, M.DataType.INT8))


@pytest.mark.parametrize("event", [I.dla_op_event_e.CDMA_DT_DONE, I.dla_op_event_e.CDMA_WT_DONE,
                                   I.dla_op_event_e.OP_COMPLETED])
def test_cdma_events_reach_their_consumer(event: int) -> None:
    """CDMA's data and weight done interrupts are events of the CONV: a PDP waiting for one (and the
    SDP's completion) starts after the CONV ran, never before."""
    port, run, buffers = run_task(_conv_sdp_pdp(event), "nv_full")
    assert [launch.processor for launch in port.launches] == ["SDP", "CONV", "PDP"]
    assert run.enable_order == [1, 0, 2] and port.rf.bus_errors == 0
    regs = dict(port.writes)
    assert regs[R1.NVDLA_PDP_RDMA_D_SRC_BASE_ADDR_LOW_0] == buffers[6].iova
    assert regs[R1.NVDLA_PDP_D_DST_BASE_ADDR_LOW_0] == buffers[7].iova


def test_isr_reads_clears_and_orders_events() -> None:
    from pydla.firmware.nvdla.processors import NvdlaProcessors
    port = RegfilePort("nv_full")
    hw = NvdlaProcessors(device_info("nv_full").nvdla, None)  # type: ignore[arg-type]
    port.rf.write(R1.NVDLA_GLB_S_INTR_SET_0, 1 << 16 | 1 << 19 | 1 << 20 | 1 << 3)
    events, fault = hw.isr(port)
    assert fault is None
    assert [(e.block, e.group, e.event) for e in events] == [(1, 0, 5), (1, 1, 4), (4, 1, 1), (1, 0, 1)]
    assert port.rf.read(R1.NVDLA_GLB_S_INTR_STATUS_0) == 0 and hw.isr(port) == ([], None)


def _two_lut_sdps() -> tuple[M.NvdlaLoadable, list[Any]]:
    """Two SDP operations, memory to memory, each through the Y stage's LUT: LUT 0, then LUT 1
    (address-list entry 4 holds both LUTs, 5 the input, 6 and 7 the outputs)."""
    luts = []
    for k in (0, 1):
        lut = I.dla_lut_param(method=I.lut_method_e.LINEAR)
        for i in range(65):
            lut.linear_exp_table[i] = 100 * k + i
        for i in range(257):
            lut.linear_only_table[i] = -(100 * k + i)
        luts.append(lut)
    ops, surfaces = [], []
    for k in (0, 1):
        sdp = I.dla_sdp_op_desc(src_precision=0, dst_precision=0, lut_index=k, batch_num=1)
        sdp.y_op = I.dla_sdp_op(enable=1, act=I.activation_e.LUT, precision=0)
        ops.append(sdp)
        surface = I.dla_sdp_surface_desc(src_data=samples._cube(I.dla_data_cube, 5, 8, 8, 32, 1),
                                         dst_data=samples._cube(I.dla_data_cube, 6 + k, 8, 8, 32, 1))
        for c in (surface.x1_data, surface.x2_data, surface.y_data):
            c.address = -1
        surfaces.append(surface)
    commons = [samples._common(I.dla_op_e.SDP, 0, {I.dla_op_e.SDP: (1, I.dla_op_event_e.OP_COMPLETED)}),
               samples._common(I.dla_op_e.SDP, 1)]
    flags = M.MemoryFlags.ALLOC | M.MemoryFlags.SET
    data = [("m4_LUT_i4", b"".join(bytes(lut) for lut in luts), flags),
            ("m5_Src_i5", bytes(range(256)) * 8, flags),
            ("m6_Dst_i6", bytes(2048), M.MemoryFlags.ALLOC | M.MemoryFlags.OUTPUT),
            ("m7_Dst_i7", bytes(2048), M.MemoryFlags.ALLOC | M.MemoryFlags.OUTPUT)]
    lo = samples._task_loadable(ops, surfaces, commons, {I.dla_op_e.SDP: 0}, data, samples.CURRENT_INTERFACE,
                                (8, 8, 32, M.DataType.INT8))
    return lo, luts


def test_lut_waits_for_the_other_group_to_release_its_lut() -> None:
    """The LUT RAM is one per block: the second operation's LUT is written only after the first
    operation (another LUT) completed, so each launch computes with its own table."""
    lo, luts = _two_lut_sdps()
    port, run, _ = run_task(lo, "nv_full", patch=_net_patch(num_luts=2, lut_data_index=4))
    assert [launch.processor for launch in port.launches] == ["SDP", "SDP"] and run.completed == 2
    for launch, lut in zip(port.launches, luts, strict=True):
        assert launch.lut_le == tuple(int(v) & 0xFFFF for v in lut.linear_exp_table)
        assert launch.lut_lo == tuple(int(v) & 0xFFFF for v in lut.linear_only_table)
    assert [launch.group for launch in port.launches] == [0, 1]


def test_platform_context_and_reset_registers() -> None:
    """The task's context goes to the platform's context register before its first operation; an
    abort resets the device through the platform's reset register (NVDLA has no reset of its own)."""
    base = device_info("nv_full").nvdla
    assert base is not None
    facts = dataclasses.replace(base, context_register=0x20000, reset_register=0x20100)
    info = dataclasses.replace(device_info("nv_full"), nvdla=facts)
    port, run, _ = run_task(samples.bdma_loadable(), "nv_full", info)
    first_bdma = next(i for i, (a, _) in enumerate(port.writes) if a == R1.NVDLA_BDMA_CFG_SRC_ADDR_LOW_0)
    assert (0x20000, 1) in port.writes[:first_bdma] and run.error is None
    lo = samples.bdma_loadable()
    entries, _ = bind(lo, lo.task_list[0])
    port = RegfilePort("nv_full")
    engine = Engine(port, info)
    engine.dla_engine_init()
    port.rf.on_launch = port.launches.append  # the transfer starts and never ends
    hung = engine.dla_execute_task(TaskDesc(3, 5, entries, nvdla_interface=(0, 12, 5)))
    assert (0x20000, 5) in port.writes and not hung.finished
    engine.abort(hung, DlaError(NvError.Timeout, "hung"))
    assert port.writes[-1] == (0x20100, 1) and hung.finished and hung.error is not None
    assert engine.depth == 1


def _sdp_per_kernel(operand_bytes: int) -> M.NvdlaLoadable:
    """One SDP, memory to memory (32 channels INT8), X1 adding and multiplying per kernel: INT16
    operands, an ALU and a MUL value per channel (32 x 2 x 2 = 128 bytes, packed, in entry 4)."""
    sdp = I.dla_sdp_op_desc(src_precision=0, dst_precision=0, lut_index=-1, batch_num=1)
    sdp.x1_op = I.dla_sdp_op(enable=1, type=I.sdp_op_e.BOTH, mode=I.sdp_op_mode_e.PER_KERNEL, precision=1)
    surface = I.dla_sdp_surface_desc(src_data=samples._cube(I.dla_data_cube, 5, 8, 8, 32, 1),
                                     dst_data=samples._cube(I.dla_data_cube, 6, 8, 8, 32, 1))
    surface.x1_data = I.dla_data_cube(type=0, address=4, size=operand_bytes, width=1, height=1, channel=32)
    surface.x2_data.address = surface.y_data.address = -1
    flags = M.MemoryFlags.ALLOC | M.MemoryFlags.SET
    data = [("m4_Bias_i4", bytes(operand_bytes), flags), ("m5_Src_i5", bytes(2048), flags),
            ("m6_Dst_i6", bytes(2048), M.MemoryFlags.ALLOC | M.MemoryFlags.OUTPUT)]
    return samples._task_loadable([sdp], [surface], [samples._common(I.dla_op_e.SDP, 0)], {I.dla_op_e.SDP: 0},
                                  data, samples.CURRENT_INTERFACE, (8, 8, 32, M.DataType.INT8))


def test_per_kernel_operand_is_one_packed_value_per_channel() -> None:
    port, _, buffers = run_task(_sdp_per_kernel(128), "nv_full")
    regs = dict(port.writes)
    assert regs[R1.NVDLA_SDP_RDMA_D_BS_BASE_ADDR_LOW_0] == buffers[4].iova
    brdma = fields(port.launches[0], ("SDP_RDMA",))
    assert brdma["brdma_disable"] == {0} and brdma["brdma_data_use"] == {2}
    assert brdma["brdma_data_mode"] == {0} and brdma["brdma_data_size"] == {1}
    with pytest.raises(DlaError) as e:
        run_task(_sdp_per_kernel(127), "nv_full")
    assert "x1_data.address = 4: 128 bytes at offset 0 run past the 127 bytes" in e.value.message


def test_nvidia_whole_network_task() -> None:
    """NN_L0_0's DLA task (between its two emulator tasks): 11 operations, CONV->SDP pairs and PDPs."""
    from tests.hw.nvdla import nvdla_run as N
    lo = N.Run("NN_L0_0", 1).lo
    port, run, _ = run_task(lo, "nv_full", task_id=1)
    assert run.completed == 11 and port.rf.bus_errors == 0
    assert sorted(launch.processor for launch in port.launches) == ["CONV"] * 4 + ["PDP"] * 2 + ["SDP"] * 5
    pairs = [(op.index, op.fused_parent) for op in run.graph.operations if op.fused_parent != -1]
    assert len(pairs) == 4  # each CONV's SDP enabled before it
    assert all(run.enable_order.index(sdp) < run.enable_order.index(conv) for sdp, conv in pairs)
