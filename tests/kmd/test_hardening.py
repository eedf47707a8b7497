"""Descriptors built to hurt: references the operation does not use, work without bound, an in-place
fused pair, and more events than a dependency count holds. Each is refused cleanly (or works), and
the driver keeps serving."""

from __future__ import annotations

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import dla_task as T
from pydla.firmware.graph import OP_DESC_SIZE, SURFACE_DESC_SIZE
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.loadable.taskbuilder import TaskBuilder


@pytest.fixture
def kmd():
    dev = VirtualDevice("full")
    k = Kmd(VirtualDevicePort(dev))
    yield k
    k.close()
    dev.close()


def _patch(built, part: int, index: int, size: int, cls, **fields):
    blob = bytearray(built.descriptors)
    desc = cls.from_buffer(blob, built.addresses[part][1] + index * size)
    for key, value in fields.items():
        target = desc
        *path, last = key.split("__")
        for p in path:
            target = getattr(target, p)
        setattr(target, last, value)
    del desc, target
    built.descriptors = bytes(blob)
    return built


def _sdp_task():
    tb = TaskBuilder()
    tb.sdp(tb.cube("x", (2, 4, 4)), tb.cube("y", (2, 4, 4)), act="relu")
    return tb.build()


def _good_job_runs(kmd) -> None:
    ctx = kmd.open_context()
    loaded = _sdp_task().load(kmd, ctx)
    x = np.arange(-16, 16, dtype=np.float32)
    kmd.bo_array(ctx, loaded.handles["x"])[:] = x.view(np.uint8)
    kmd.submit(ctx, loaded.addresses, timeout_ms=2000).wait(5000)
    np.testing.assert_array_equal(kmd.bo_array(ctx, loaded.handles["y"]).view(np.float32), np.maximum(x, 0))


@pytest.mark.parametrize("field", ["bias__address", "scale__address", "ew__address", "prelu__address"])
def test_an_unused_reference_out_of_range_is_refused_before_any_register(kmd, field: str) -> None:
    built = _patch(_sdp_task(), 3, 0, SURFACE_DESC_SIZE, T.dla_sdp_surface_desc_t, **{field: 200})
    ctx = kmd.open_context()
    loaded = built.load(kmd, ctx)
    trace = kmd.port.device.record_trace()
    with pytest.raises(DlaError, match="address-list index 200") as e:
        kmd.submit(ctx, loaded.addresses)
    assert e.value.code == NvError.BadParameter
    assert not [a for a in trace if a.op == "W"]
    _good_job_runs(kmd)


def test_bdma_work_is_bounded(kmd) -> None:
    tb = TaskBuilder()
    tb.bdma(tb.ref("a", 64), tb.ref("b", 64), line_size=1, line_repeat=1 << 30, src_line_stride=0,
            dst_line_stride=0, surf_repeat=1 << 30, src_surf_stride=0, dst_surf_stride=0)
    ctx = kmd.open_context()
    loaded = tb.build().load(kmd, ctx)
    with pytest.raises(DlaError, match="per operation"):
        kmd.submit(ctx, loaded.addresses, timeout_ms=100)
    _good_job_runs(kmd)


def test_pdp_kernel_and_deconv_stride_are_bounded(kmd) -> None:
    tb = TaskBuilder()
    tb.pdp(tb.cube("x", (1, 1, 1)), tb.cube("y", (1, 1, 1)), kernel=(1, 1))
    built = _patch(tb.build(), 2, 0, OP_DESC_SIZE, T.dla_pdp_op_desc_t, kernel_width=4_000_000)
    ctx = kmd.open_context()
    with pytest.raises(DlaError, match="kernel"):
        kmd.submit(ctx, built.load(kmd, ctx).addresses, timeout_ms=100)
    tb = TaskBuilder()
    conv = tb.conv(tb.cube("x", (1, 2, 1)), tb.weights("w", (1, 1, 1, 1)), weight_shape=(1, 1, 1, 1),
                   deconv=True, stride=(2, 1))
    tb.sdp(conv, tb.cube("y", (1, 3, 1)))
    built = _patch(tb.build(), 2, 0, OP_DESC_SIZE, T.dla_conv_op_desc_t, stride_y=1 << 28)
    with pytest.raises(DlaError, match="strides and dilations"):
        kmd.submit(ctx, built.load(kmd, ctx).addresses, timeout_ms=100)
    _good_job_runs(kmd)


def test_an_in_place_fused_convolution_runs(kmd) -> None:
    tb = TaskBuilder()
    x = tb.cube("x", (2, 4, 4))
    conv = tb.conv(x, tb.weights("w", (2, 2, 1, 1)), weight_shape=(2, 2, 1, 1))
    tb.sdp(conv, x, act="relu")  # the result overwrites the input
    built = tb.build()
    ctx = kmd.open_context()
    loaded = built.load(kmd, ctx)
    xv = np.random.default_rng(0).standard_normal((2, 4, 4)).astype(np.float32)
    w = np.array([[1.0, 2.0], [-1.0, 0.5]], np.float32)
    kmd.bo_array(ctx, loaded.handles["x"])[:] = xv.view(np.uint8).ravel()
    kmd.bo_array(ctx, loaded.handles["w"])[:] = w.view(np.uint8).ravel()
    kmd.submit(ctx, loaded.addresses, timeout_ms=2000).wait(5000)
    got = kmd.bo_array(ctx, loaded.handles["x"]).view(np.float32).reshape(2, 4, 4)
    np.testing.assert_allclose(got, np.maximum(np.einsum("kc,chw->khw", w, xv), 0), rtol=1e-6)


def test_a_pair_edge_on_completion_is_refused(kmd) -> None:
    tb = TaskBuilder()
    conv = tb.conv(tb.cube("x", (1, 2, 2)), tb.weights("w", (1, 1, 1, 1)), weight_shape=(1, 1, 1, 1))
    tb.sdp(conv, tb.cube("y", (1, 2, 2)))
    built = tb.build()
    blob = bytearray(built.descriptors)
    size = 36
    conv_desc = T.dla_common_op_desc_t.from_buffer(blob, built.addresses[1][1])
    sdp_desc = T.dla_common_op_desc_t.from_buffer(blob, built.addresses[1][1] + size)
    conv_desc.consumers[2].index, conv_desc.consumers[2].event = 1, int(T.dla_event_e.OP_COMPLETED)
    sdp_desc.dependency_count += 1
    del conv_desc, sdp_desc
    built.descriptors = bytes(blob)
    ctx = kmd.open_context()
    with pytest.raises(DlaError, match="fused pair"):
        kmd.submit(ctx, built.load(kmd, ctx).addresses)


def test_more_than_255_events_is_an_overflow_in_the_builder() -> None:
    tb = TaskBuilder()
    for i in range(256):
        tb.bdma(tb.ref(f"s{i}", 4), tb.ref("sum", 4, offset=4 * i), line_size=4)
    tb.pdp(tb.cube("sum", (1, 16, 16)), tb.cube("y", (1, 16, 16)), kernel=(1, 1))
    with pytest.raises(DlaError, match="256 events") as e:
        tb.build()
    assert e.value.code == NvError.OverFlow
