"""The NVDLA Loadable runner (pydla.umd.nvdla_runner) at the KMD boundary: memory after load, the
NvDlaTask a DLA1 task becomes, tensors and binding, events, and the EMU1 tasks (nvdla_emu)."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

import pydla
from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.samples import REGRESSION_INTERFACE, bdma_loadable, conv_sdp_loadable
from pydla.loadable.nvdla.writer import write_nvdla_loadable
from pydla.umd.nvdla_emu import float_to_half_bits, softmax_fp32
from pydla.umd.nvdla_runner import NvdlaTensorDesc
from pydla.umd.nvdla_tensor import element_offsets
from tests.umd.nvdla_port import RecordingPort, network_desc_head

SET = M.MemoryFlags.ALLOC | M.MemoryFlags.SET


def _runtime(port: RecordingPort) -> pydla.IRuntime:
    return pydla.createRuntime(port.port)


def test_load_fills_memory_and_submits_the_task_as_its_address_list() -> None:
    lo = conv_sdp_loadable(REGRESSION_INTERFACE)
    port = RecordingPort(execute=False)
    with _runtime(port) as rt:
        rt.load(write_nvdla_loadable(lo))
        runner = rt.nvdla
        assert runner is not None
        # every ALLOC|SET memory holds its blob; the OUTPUT one is not allocated by the loadable
        for m in lo.memory_list[:6]:
            blob = lo.blob(m.contents[0])
            assert blob is not None
            assert bytes(runner.owned[m.id].bytes_view()) == blob.data
        assert 6 not in runner.owned
        assert rt.getNumInputTensors() == 0 and rt.getNumOutputTensors() == 1
        desc = rt.getOutputTensorDesc(0)
        assert (desc.name, desc.size, desc.dims, desc.strides[:3]) == ("m6_SDPDst_i6", 2048, (1, 32, 8, 8),
                                                                       (1, 256, 2048))
        with pytest.raises(DlaError) as e:
            rt.submit()  # the output is not bound
        assert e.value.code == NvError.NotInitialized and "'m6_SDPDst_i6' is not bound" in e.value.message
        out = rt.allocateSystemMemory(desc.size)
        rt.bindOutputTensor(0, out)
        rt.submit()
    (task,) = port.submitted
    assert len(task.address_list) == 7 and len(task.post_fences) == 1
    assert task.nvdla_interface == (0, 10, 0)  # the network descriptor blob's version
    assert [e[2] for e in task.address_list] == [m.size for m in lo.memory_list]
    assert all(e[1] == 0 for e in task.address_list)
    assert task.address_list[6][0] is out  # the bound output, at its address-list position
    net = port.snapshots[0][0]
    blob = lo.blob("m0_NetworkDesc_i0")
    assert blob is not None and net == blob.data and network_desc_head(net) == (1, 2, 3)


def test_bdma_output_through_the_address_list() -> None:
    port = RecordingPort()
    with _runtime(port) as rt:
        rt.load(write_nvdla_loadable(bdma_loadable(REGRESSION_INTERFACE)))
        out = rt.allocateSystemMemory(2048)
        rt.bindOutputTensor(0, out)
        rt.submit()
        assert bytes(out.bytes_view()) == bytes(range(256)) * 8
        rt.submit()  # again: the same task, the same bytes
        assert len(port.submitted) == 2


def test_bind_checks() -> None:
    with _runtime(RecordingPort()) as rt:
        rt.load(write_nvdla_loadable(bdma_loadable()))
        small = rt.allocateSystemMemory(100)
        with pytest.raises(DlaError) as e:
            rt.bindOutputTensor(0, small)
        assert e.value.code == NvError.InvalidSize and "needs 2048 bytes" in e.value.message
        with pytest.raises(DlaError) as e:
            rt.bindOutputTensor(1, small)
        assert e.value.code == NvError.BadParameter
        with pytest.raises(DlaError) as e:
            rt.getInputTensorDesc(0)
        assert e.value.code == NvError.BadParameter


# -- EMU tasks ---------------------------------------------------------------------------------------

def _buffer_2018(index: int, fmt: int, w: int, h: int, c: int, line: int, surf: int, size: int) -> bytes:
    return struct.pack("<hIHHHHII", index, size, fmt, w, h, c, line, surf).ljust(256, b"\0")


def emu_loadable(values: np.ndarray, power: tuple[float, float, float] = (1.0, 1.0, 0.0),
                 order: tuple[int, ...] = (0, 1)) -> M.NvdlaLoadable:
    """Input (1x1xC FP16) -> EMU POWER -> internal -> EMU SOFTMAX -> output, 2018 EMU layout, two tasks
    chained as NVIDIA's compiler chains them: task 0's post action, event 0, signals sync point 0 to 1;
    task 1's pre action, event 1, waits for it to reach 1."""
    c = values.size
    size = 32 * -(-c // 16)
    p, scale, shift = power
    blobs = {
        "net0": struct.pack("<hhH", 1, 2, 1).ljust(256, b"\0"),
        "op0": struct.pack("<B3f", 0, p, scale, shift).ljust(16, b"\0"),
        "buf0": _buffer_2018(3, 2, 1, 1, c, 32, 32, size) + _buffer_2018(4, 2, 1, 1, c, 32, 32, size),
        "net1": struct.pack("<hhH", 1, 2, 1).ljust(256, b"\0"),
        "op1": struct.pack("<BB", 1, 1).ljust(16, b"\0"),
        "buf1": _buffer_2018(3, 2, 1, 1, c, 32, 32, size) + _buffer_2018(4, 2, 1, 1, c, 32, 32, size),
    }
    memory = [M.MemoryListEntry(i, len(raw), flags=SET, contents=(name,), offsets=(0,))
              for i, (name, raw) in enumerate(blobs.items())]
    n = len(memory)
    memory += [M.MemoryListEntry(n, size, flags=M.MemoryFlags.ALLOC | M.MemoryFlags.INPUT, tensor_desc_id=0),
               M.MemoryListEntry(n + 1, size, flags=M.MemoryFlags.ALLOC),
               M.MemoryListEntry(n + 2, size, flags=M.MemoryFlags.ALLOC | M.MemoryFlags.OUTPUT,
                                 tensor_desc_id=1)]
    tensors = tuple(M.TensorDescListEntry(name, i, n + 2 * i, size, data_format=M.DataFormat.NCxHWx,
                                          data_type=M.DataType.HALF, c=c, strides=(2, 32, 32, 0, 0, 0, 0, 0))
                    for i, name in enumerate(("data", "prob")))
    addresses = tuple(M.AddressListEntry(i, i, 0, 0) for i in range(len(memory)))
    tasks = (M.TaskListEntry(0, M.Interface.EMU1, -1, (0, 1, 2, n, n + 1), (), (0,)),
             M.TaskListEntry(1, M.Interface.EMU1, -1, (3, 4, 5, n + 1, n + 2), (1,), ()))
    return M.NvdlaLoadable(
        task_list=tasks, memory_list=tuple(memory), address_list=addresses,
        event_list=(M.EventListEntry(0, val=1, op=M.EventOp.SIGNAL),
                    M.EventListEntry(1, val=1, op=M.EventOp.WAIT)),
        blobs=tuple(M.Blob(k, len(v), M.Interface.EMU1, 0, M.Version(0, 0, 1), v) for k, v in blobs.items()),
        tensor_desc_list=tensors, submit_list=tuple(M.SubmitListEntry(i, (t,)) for i, t in enumerate(order)))


def _run_emu(lo: M.NvdlaLoadable, halves: np.ndarray) -> np.ndarray:
    with _runtime(RecordingPort()) as rt:
        rt.load(write_nvdla_loadable(lo))
        assert (rt.getNumInputTensors(), rt.getNumOutputTensors()) == (1, 1)
        x = rt.allocateSystemMemory(rt.getInputTensorDesc(0).size)
        y = rt.allocateSystemMemory(rt.getOutputTensorDesc(0).size)
        x.array(np.uint16)[:halves.size] = halves
        rt.bindInputTensor(0, x)
        rt.bindOutputTensor(0, y)
        rt.submit()
        return y.array(np.uint16)[:halves.size].copy()


def test_half_rounding_ties_away_from_zero() -> None:
    f = np.array([1 + 2**-11, -(1 + 2**-11), 2**-25, 1.5 * 2**-25, 2**-26, 65519, 65520, 2**-24 * 1.5, 0.1],
                 np.float32)
    assert [int(v) for v in float_to_half_bits(f)] == [0x3C01, 0xBC01, 0x0001, 0x0001, 0x0000, 0x7BFF, 0x7C00,
                                                       0x0002, 0x2E66]
    assert int(float_to_half_bits(np.frombuffer(struct.pack("<I", 0x7FC00000), np.float32))[0]) == 0x7E00


def test_emu_softmax_rounds_its_tie_away_from_zero() -> None:
    # softmax([2^-10, 0]) in float32 is exactly [0.5 + 2^-12, ...]: a tie between 0x3800 and 0x3801.
    x = np.array([0x1400, 0x0000], np.uint16)
    assert softmax_fp32(x.view(np.float16).astype(np.float32))[0] == np.float32(0.5 + 2**-12)
    assert [int(v) for v in _run_emu(emu_loadable(x.view(np.float16)), x)] == [0x3801, 0x37FF]


def test_emu_power_then_softmax_hand_computed() -> None:
    # POWER: (1 + 1 * x)^2 of [0, 1, -1, 0] = [1, 4, 0, 1]; softmax of that: e^(v - 4) / sum
    x = np.array([0.0, 1.0, -1.0, 0.0], np.float16)
    y = _run_emu(emu_loadable(x, power=(2.0, 1.0, 1.0)), x.view(np.uint16))
    v = np.array([1, 4, 0, 1], np.float64)
    expected = np.exp(v - 4) / np.exp(v - 4).sum()
    assert np.allclose(y.view(np.float16).astype(np.float64), expected, atol=2**-11)
    assert int(y[1]) == int(float_to_half_bits(softmax_fp32(v.astype(np.float32)))[1])
    zeros = _run_emu(emu_loadable(np.zeros(4, np.float16)), np.zeros(4, np.uint16))  # NN_L0_0's zero input
    assert [int(v) for v in zeros] == [0x3400] * 4  # softmax of equal values: 0.25


def test_events_must_be_signaled_before_a_task_waits() -> None:
    lo = emu_loadable(np.zeros(2, np.float16), order=(1, 0))
    with pytest.raises(DlaError) as e:
        _run_emu(lo, np.zeros(2, np.uint16))
    assert e.value.code == NvError.InvalidState
    assert "task 1 waits (event 1) for sync point 0 to reach 1" in e.value.message


def test_emu_cube_past_its_memory_is_refused() -> None:
    lo = emu_loadable(np.zeros(2, np.float16))
    bad = _buffer_2018(3, 2, 4, 1, 2, 32, 32, 32) + _buffer_2018(4, 2, 4, 1, 2, 32, 32, 32)  # 4 wide: 128 B
    blobs = tuple(M.Blob(b.name, len(bad), b.interface, 0, b.version, bad) if b.name == "buf0" else b
                  for b in lo.blobs)
    with pytest.raises(DlaError) as e:
        _run_emu(dataclasses.replace(lo, blobs=blobs), np.zeros(2, np.uint16))
    assert e.value.code == NvError.InvalidSize and "POWER src" in e.value.message


def test_session_runs_an_nvdla_loadable_on_dense_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    import pydla.session

    port = RecordingPort()
    monkeypatch.setattr(pydla.session, "open_port", lambda *a, **k: port.port)
    x = np.array([0.0, 1.0, -1.0, 0.0], np.float16).reshape(1, 4, 1, 1)
    with pydla.Session(write_nvdla_loadable(emu_loadable(x.reshape(-1), power=(2.0, 1.0, 1.0)))) as sess:
        assert [(t.name, t.shape, t.dtype) for t in sess.inputs] == [("data", (1, 4, 1, 1), np.float16)]
        (y,) = sess.run(None, {"data": x})
    v = softmax_fp32(np.array([1, 4, 0, 1], np.float32))
    assert y.shape == (1, 4, 1, 1)
    assert y.reshape(-1).view(np.uint16).tolist() == float_to_half_bits(v).tolist()


def _desc(dims: tuple[int, int, int, int], dtype: M.DataType, strides: tuple[int, ...], size: int,
          fmt: M.DataFormat = M.DataFormat.NCxHWx) -> NvdlaTensorDesc:
    return NvdlaTensorDesc("t", size, dims, fmt, dtype, M.DataCategory.FEATURE, M.PixelFormat.FEATURE,
                           M.PixelMapping.PITCH_LINEAR, (*strides, 0, 0, 0, 0, 0), 0, "input", 0)


def test_dense_offsets_of_nvdla_layouts() -> None:
    # NN_L0_0's input: 1x1x28x28 FP16 on nv_full (32-byte atoms): pixel (h, w) at h*896 + w*32
    nn = element_offsets(_desc((1, 1, 28, 28), M.DataType.HALF, (2, 896, 25088), 25088))
    assert nn.shape == (1, 1, 28, 28) and nn[0, 0, 2, 3] == 2 * 896 + 3 * 32
    # nv_small INT8 8x8x32: 8-byte atoms, 4 surfaces of 8 channels
    small = element_offsets(_desc((1, 32, 8, 8), M.DataType.INT8, (1, 64, 512), 2048))
    assert small[0, 13, 2, 5] == 1 * 512 + 2 * 64 + 5 * 8 + 5
    # a FEATURE tensor marked NCHW (as NVIDIA's regression outputs are) is a surface all the same
    marked = element_offsets(_desc((1, 32, 8, 8), M.DataType.INT16, (2, 256, 2048), 4096, M.DataFormat.NCHW))
    assert marked[0, 17, 1, 2] == 2048 + 256 + 2 * 32 + 1 * 2
    # one pixel a line says nothing of the atom: 32 bytes, as NVIDIA's application gathers images
    assert element_offsets(_desc((1, 1, 1, 1), M.DataType.INT8, (1, 256, 2048), 2048)).tolist() == [[[[0]]]]
    # a pitch-linear A8B8G8R8 image: bytes R, G, B, A per pixel; channel k (R, G, B) at component k
    image = dataclasses.replace(_desc((1, 3, 2, 2), M.DataType.UINT8, (1, 8, 16), 16),
                                pixel_format=M.PixelFormat.A8B8G8R8)
    assert element_offsets(image)[0].tolist() == [[[0, 4], [8, 12]], [[1, 5], [9, 13]], [[2, 6], [10, 14]]]
    # names go from the word's most significant component: B8G8R8A8 is bytes A, R, G, B
    bgra = dataclasses.replace(image, pixel_format=M.PixelFormat.B8G8R8A8)
    assert element_offsets(bgra)[0, :, 0, 1].tolist() == [5, 6, 7]
    # batches: one cube after another (strides[3] 0), or strides[3] bytes apart
    batch = _desc((2, 1, 2, 2), M.DataType.INT8, (1, 64, 128), 512)
    assert element_offsets(batch)[:, 0, 1, 1].tolist() == [64 + 32, 128 + 64 + 32]
    apart = dataclasses.replace(batch, strides=(1, 64, 128, 256, 0, 0, 0, 0))
    assert element_offsets(apart)[:, 0, 1, 1].tolist() == [96, 256 + 96]
    cases = [(_desc((1, 32, 8, 8), M.DataType.INT8, (1, 64, 512), 2047), NvError.InvalidSize,
              "its elements reach byte 2048 of a 2047-byte buffer"),
             (dataclasses.replace(image, pixel_format=M.PixelFormat.A2B10G10R10), NvError.NotSupported,
              "pixel format A2B10G10R10 (packed 10-bit or semi-planar)"),
             (dataclasses.replace(image, dims=(1, 5, 2, 2)), NvError.BadValue,
              "5 channels, pixel format A8B8G8R8 has 4"),
             (dataclasses.replace(image, data_type=M.DataType.INT16), NvError.BadValue,
              "data type INT16 (2-byte elements) for pixel format A8B8G8R8 (1-byte components)"),
             (dataclasses.replace(image, pixel_mapping=M.PixelMapping(1)), NvError.NotSupported,
              "pixel mapping"),
             (dataclasses.replace(apart, size=352), NvError.InvalidSize, "reach byte 353 of a 352-byte")]
    for bad, code, words in cases:
        with pytest.raises(DlaError) as e:
            element_offsets(bad)
        assert e.value.code == code and words in e.value.message, e.value.message


def _buffer_2019(index: int, fmt: int, c: int, line: int = 32, surf: int = 32, offset: int = 0) -> bytes:
    return struct.pack("<hIIHHHHII", index, offset, 32, fmt, 1, 1, c, line, surf).ljust(256, b"\0")


def emu_int8_loadable(op: bytes, src: bytes, dst: bytes, values: bytes) -> M.NvdlaLoadable:
    """One EMU task of the 2019 interface: a 24-byte operation container, INT8 buffers; the input is
    in the loadable (memory 3), the output bound (memory 4)."""
    blobs = {"net": struct.pack("<hhH", 1, 2, 1).ljust(256, b"\0"), "op": op, "buf": src + dst,
             "in": values.ljust(32, b"\0")}
    memory = [M.MemoryListEntry(i, len(raw), flags=SET, contents=(name,), offsets=(0,))
              for i, (name, raw) in enumerate(blobs.items())]
    out_flags = M.MemoryFlags.ALLOC | M.MemoryFlags.OUTPUT
    memory.append(M.MemoryListEntry(4, 32, flags=out_flags, tensor_desc_id=0))
    tensor = M.TensorDescListEntry("out", 0, 4, 32, data_format=M.DataFormat.NCxHWx,
                                   data_type=M.DataType.INT8, c=len(values),
                                   strides=(1, 32, 32, 0, 0, 0, 0, 0))
    return M.NvdlaLoadable(
        task_list=(M.TaskListEntry(0, M.Interface.EMU1, -1, (0, 1, 2, 3, 4)),), memory_list=tuple(memory),
        address_list=tuple(M.AddressListEntry(i, i, 0, 0) for i in range(5)),
        blobs=tuple(M.Blob(k, len(v), M.Interface.EMU1, 0, M.Version(0, 0, 1), v) for k, v in blobs.items()),
        tensor_desc_list=(tensor,), submit_list=(M.SubmitListEntry(0, (0,)),))


def _run_int8(lo: M.NvdlaLoadable) -> list[int]:
    with _runtime(RecordingPort()) as rt:
        rt.load(write_nvdla_loadable(lo))
        y = rt.allocateSystemMemory(32)
        rt.bindOutputTensor(0, y)
        rt.submit()
        return y.array(np.int8).tolist()


def test_emu_2019_interface_int8_power_and_softmax() -> None:
    # POWER: y = (shift + scale * x * in_scale) ^ power / out_scale, clamped to int8 and truncated
    power = struct.pack("<B3x2f3f", 0, 0.5, 2.0, 2.0, 1.0, 3.0)
    values = bytes(np.array([1, -2, 100, 0], np.int8).view(np.uint8))
    got = _run_int8(emu_int8_loadable(power, _buffer_2019(3, 0, 4), _buffer_2019(4, 0, 4), values))
    # x * 0.5 -> 0.5, -1, 50, 0; 3 + 1 * that -> 3.5, 2, 53, 3; squared 12.25, 4, 2809, 9;
    # / 2 -> 6.125, 2, 1404.5, 4.5
    assert got[:4] == [6, 2, 127, 4] and got[4:] == [0] * 28
    # SOFTMAX of int8 [10, 0] scaled by 0.1 -> halves [1, 0] -> [0.731, 0.269] in halves, / (1 / 127)
    softmax = struct.pack("<B3x2fB3x", 1, 0.1, 1 / 127, 1).ljust(24, b"\0")
    values = bytes(np.array([10, 0], np.int8).view(np.uint8))
    got = _run_int8(emu_int8_loadable(softmax, _buffer_2019(3, 0, 2), _buffer_2019(4, 0, 2), values))
    halves = np.array([np.exp(1) / (np.exp(1) + 1), 1 / (np.exp(1) + 1)], np.float16).astype(np.float32)
    assert got[:2] == [int(v) for v in np.trunc(halves / np.float32(1 / 127))] == [92, 34]


def test_emu_descriptor_mutations_raise_dla_errors_only() -> None:
    """Random bytes in the EMU descriptors: each run ends or raises DlaError, nothing else."""
    rng = np.random.default_rng(7)
    base = emu_loadable(np.array([0.5, -1.0, 2.0], np.float16))
    outcomes = {"ran": 0, "refused": 0}
    with _runtime(RecordingPort()) as rt:
        x, y = rt.allocateSystemMemory(32), rt.allocateSystemMemory(32)
        for _ in range(100):
            blobs = []
            for b in base.blobs:
                data = bytearray(b.data)
                for _ in range(3):
                    data[int(rng.integers(0, min(28, len(data))))] = int(rng.integers(0, 256))
                blobs.append(dataclasses.replace(b, data=bytes(data)))
            try:
                rt.load(write_nvdla_loadable(dataclasses.replace(base, blobs=tuple(blobs))))
                rt.bindInputTensor(0, x)
                rt.bindOutputTensor(0, y)
                rt.submit()
                outcomes["ran"] += 1
            except DlaError:
                outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and outcomes["ran"] > 0 and sum(outcomes.values()) == 100


def test_emu_cube_extent_is_exact() -> None:
    from pydla.umd.nvdla_emu import BufferDesc, _elements

    # 17 FP16 channels, 16 per atom: channel 16 is at the surface stride 32, its last byte 33
    cube = BufferDesc(0, 0, 34, 2, 1, 1, 17, 32, 32)
    with _runtime(RecordingPort()) as rt:
        fits, short = rt.allocateSystemMemory(34), rt.allocateSystemMemory(33)
        _, offsets = _elements([(fits, 0)], cube, 16, 2, "t")
        assert int(offsets.max()) == 32
        with pytest.raises(DlaError) as e:
            _elements([(short, 0)], cube, 16, 2, "t")
        assert e.value.code == NvError.InvalidSize and "needs 34 bytes" in e.value.message


def test_emu_layout_is_told_by_the_buffer_format() -> None:
    from pydla.umd.nvdla_emu import _is_2019_layout

    fp16_2018 = np.frombuffer(_buffer_2018(3, 2, 28, 28, 1, 896, 25088, 25088), np.uint8)
    int8_2019 = np.frombuffer(_buffer_2019(3, 0, 4), np.uint8)
    # the operation list's size would say the other layout: the buffer's format decides
    assert not _is_2019_layout(24, 1, fp16_2018) and _is_2019_layout(16, 1, int8_2019)
    both = np.frombuffer(_buffer_2019(3, 3, 4, offset=0).replace(b"\x20\x00\x00\x00", b"\x02\x00\x00\x00", 1),
                         np.uint8)  # size 2 reads as the 2018 format too: the size rule decides
    assert _is_2019_layout(24, 1, both) and not _is_2019_layout(16, 1, both)


def test_non_blocking_submit_and_refused_layout_change() -> None:
    port = RecordingPort()
    with _runtime(port) as rt:
        rt.load(write_nvdla_loadable(bdma_loadable()))
        out = rt.allocateSystemMemory(2048)
        rt.bindOutputTensor(0, out)
        (sync,) = rt.submitNonBlocking()
        sync.wait(10_000)
        assert bytes(out.bytes_view()) == bytes(range(256)) * 8 and len(port.submitted) == 1
        rt.setOutputTensorDesc(0, rt.getOutputTensorDesc(0))  # the loadable's own layout: nothing changes
        with pytest.raises(DlaError) as e:
            rt.setOutputTensorDesc(0, dataclasses.replace(rt.getOutputTensorDesc(0), dims=(1, 2, 1, 1)))
        assert e.value.code == NvError.NotSupported
        assert ("dims (1, 2, 1, 1) differs from the loadable's (1, 1, 1, 1): an NVDLA Loadable's tensor "
                "keeps its dims") in e.value.message
        rt.unload()
        assert rt.nvdla is None
        with pytest.raises(DlaError) as e:
            rt.submit()
        assert e.value.code == NvError.NotInitialized


def test_a_dla_task_is_prepared_once_per_bindings() -> None:
    port = RecordingPort()
    prepared: list[object] = []
    real = port.port.NvDlaPrepareTask

    def prepare(h: object, task: object) -> object:
        prepared.append(task)
        return real(h, task)

    port.port.NvDlaPrepareTask = prepare
    with _runtime(port) as rt:
        rt.load(write_nvdla_loadable(bdma_loadable(REGRESSION_INTERFACE)))
        first, second = rt.allocateSystemMemory(2048), rt.allocateSystemMemory(2048)
        rt.bindOutputTensor(0, first)
        for _ in range(3):
            rt.submit()
        assert len(prepared) == 1 and len(port.submitted) == 3
        assert all(t.nvdla_interface == (0, 10, 0) for t in port.submitted)  # kept by the prepared task
        rt.bindOutputTensor(0, second)  # a new binding: prepared again, with the new address list
        rt.submit()
        assert len(prepared) == 2 and port.submitted[-1].address_list[-1][0] is second
        assert bytes(second.bytes_view()) == bytes(range(256)) * 8

