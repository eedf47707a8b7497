"""pydla.Session and the NVDLA runtime API's setInputTensorDesc / setOutputTensorDesc on NVDLA Loadables
whose tensors are batches or pitch-linear images: dense numpy arrays packed into the loadable's
surfaces and unpacked from them, byte for byte. The loadables are pydla's writer's: one BDMA copy of
2048 bytes from the bound input to the bound output, their tensor descriptors as each test says."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.samples import bdma_loadable
from pydla.loadable.nvdla.writer import write_nvdla_loadable

STRIDES_32 = (1, 256, 2048, 0, 0, 0, 0, 0)


def copying_loadable(**tensor: Any) -> bytes:
    """The BDMA sample with its source an input (bind id 0) and both tensors described by ``tensor``
    (fields of TensorDescListEntry): the device copies the input's 2048 bytes to the output."""
    lo = bdma_loadable()
    memory = list(lo.memory_list)
    src = next(i for i, m in enumerate(memory) if m.contents == ("m4_BDMASrc_i4",))
    memory[src] = M.MemoryListEntry(memory[src].id, 2048, flags=M.MemoryFlags.ALLOC | M.MemoryFlags.INPUT,
                                    tensor_desc_id=1)
    (out,) = lo.tensor_desc_list
    fields = {"size": 2048, **tensor}
    tensors = (dataclasses.replace(out, **fields),
               dataclasses.replace(out, name="m4_BDMASrc_i4", id=1, mem_id=memory[src].id, **fields))
    blobs = tuple(b for b in lo.blobs if b.name != "m4_BDMASrc_i4")
    return write_nvdla_loadable(dataclasses.replace(lo, memory_list=tuple(memory), tensor_desc_list=tensors,
                                                    blobs=blobs))


def _session(tmp_path: Path, blob: bytes) -> pydla.Session:
    path = tmp_path / "copy_fbuf"
    path.write_bytes(blob)
    return pydla.Session(str(path), config="nv_full")


def _device_input(sess: pydla.Session) -> bytes:
    staging = sess._current.nvdla  # type: ignore[union-attr]
    return bytes(staging.device[("input", 0)].bytes_view())


def test_a_batch_of_two_feature_cubes_packs_and_unpacks(tmp_path: Path) -> None:
    # 2 x 32 x 4 x 8 INT8 in 32-byte atoms: a line of 8 atoms (256 bytes), a surface of 4 lines, the
    # second batch right after the first cube (strides[3] 0)
    sess = _session(tmp_path, copying_loadable(n=2, c=32, h=4, w=8, strides=(1, 256, 1024, 0, 0, 0, 0, 0)))
    x = np.random.default_rng(1).integers(-128, 128, (2, 32, 4, 8), dtype=np.int8)
    (y,) = sess.run({"m4_BDMASrc_i4": x}).values()
    assert y.shape == (2, 32, 4, 8) and y.dtype == np.int8 and np.array_equal(y, x)
    raw = _device_input(sess)
    assert raw[1024 + 2 * 256 + 3 * 32 + 5] == x[1, 5, 2, 3].view(np.uint8)
    sess.close()


def test_a_batch_with_its_own_stride(tmp_path: Path) -> None:
    sess = _session(tmp_path, copying_loadable(n=2, c=8, h=2, w=8, strides=(1, 256, 512, 1024, 0, 0, 0, 0)))
    x = np.arange(2 * 8 * 2 * 8, dtype=np.int64).reshape(2, 8, 2, 8).astype(np.int8)
    (y,) = sess.run({"m4_BDMASrc_i4": x}).values()
    assert np.array_equal(y, x)
    raw = _device_input(sess)
    assert raw[1024 + 256 + 7 * 32 + 6] == x[1, 6, 1, 7].view(np.uint8)
    assert raw[512:1024] == bytes(512)  # between the batches: zero
    sess.close()


@pytest.mark.parametrize(("fmt", "channels", "order"), [
    (M.PixelFormat.A8B8G8R8, 4, (0, 1, 2, 3)),   # bytes R, G, B, A
    (M.PixelFormat.B8G8R8A8, 3, (1, 2, 3)),      # bytes A, R, G, B; three channels: A stays 0
    (M.PixelFormat.R8, 1, (0,))])
def test_a_pitch_linear_image_packs_and_unpacks(tmp_path: Path, fmt: M.PixelFormat, channels: int,
                                                order: tuple[int, ...]) -> None:
    bpp = 1 if fmt == M.PixelFormat.R8 else 4
    w = 256 // bpp
    sess = _session(tmp_path, copying_loadable(c=channels, h=8, w=w, data_type=M.DataType.UINT8,
                                               pixel_format=fmt, strides=(1, 256, 2048, 0, 0, 0, 0, 0)))
    x = np.random.default_rng(2).integers(0, 256, (1, channels, 8, w), dtype=np.uint8)
    (y,) = sess.run({"m4_BDMASrc_i4": x}).values()
    assert y.dtype == np.uint8 and np.array_equal(y, x)
    raw = np.frombuffer(_device_input(sess), np.uint8).reshape(8, w, bpp)
    for k, component in enumerate(order):
        assert np.array_equal(raw[:, :, component], x[0, k])
    if fmt == M.PixelFormat.B8G8R8A8:
        assert not raw[:, :, 0].any()  # no alpha channel given: zero
    sess.close()


def test_what_does_not_convert_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(DlaError) as e:
        _session(tmp_path, copying_loadable(c=3, h=8, w=64, data_type=M.DataType.UINT8,
                                            pixel_format=M.PixelFormat.A2B10G10R10, strides=STRIDES_32))
    assert e.value.code == NvError.NotSupported
    assert "pixel format A2B10G10R10 (packed 10-bit or semi-planar) does not convert" in e.value.message
    with pytest.raises(DlaError) as e:  # two cubes of 2048 bytes do not fit 2048
        _session(tmp_path, copying_loadable(n=2, c=32, h=8, w=8, strides=STRIDES_32))
    assert e.value.code == NvError.InvalidSize and "reach byte 4096 of a 2048-byte buffer" in e.value.message


# -- setInputTensorDesc / setOutputTensorDesc ---------------------------------------------------------


def _feature_runtime() -> tuple[Any, bytes]:
    """A runtime with the copying loadable of one 32 x 4 x 8 INT8 cube (32-byte atoms: a line of 256
    bytes, a surface of 1024)."""
    blob = copying_loadable(c=32, h=4, w=8, strides=(1, 256, 1024, 0, 0, 0, 0, 0))
    rt = pydla.createRuntime(config="nv_full")
    rt.load(blob)
    return rt, blob


def _offsets(line: int, surface: int) -> np.ndarray:
    c, h, w = np.meshgrid(np.arange(32), np.arange(4), np.arange(8), indexing="ij")
    return (c // 32) * surface + h * line + w * 32 + c % 32


@pytest.mark.parametrize("blocking", [True, False])
def test_a_layout_with_other_strides_is_converted_around_each_run(blocking: bool) -> None:
    rt, _ = _feature_runtime()
    with rt:
        wide = dataclasses.replace(rt.getInputTensorDesc(0), size=4096, strides=(1, 512, 2048, 0, 0, 0, 0, 0))
        rt.setInputTensorDesc(0, wide)
        assert rt.getInputTensorDesc(0) == wide  # what was set is what is described from now on
        out_desc = dataclasses.replace(rt.getOutputTensorDesc(0), size=3072,
                                       strides=(1, 768, 3072, 0, 0, 0, 0, 0))
        rt.setOutputTensorDesc(0, out_desc)
        x = np.random.default_rng(3).integers(0, 256, (32, 4, 8), dtype=np.uint8)
        src, dst = rt.allocateSystemMemory(4096), rt.allocateSystemMemory(3072)
        src.bytes_view()[:] = 0xEE  # bytes outside the tensor: never copied
        src.bytes_view()[_offsets(512, 2048)] = x
        dst.bytes_view()[:] = 0x11
        with pytest.raises(DlaError) as e:  # set, not bound again
            rt.submit()
        assert e.value.code == NvError.InvalidState
        assert "input 0 'm4_BDMASrc_i4': its layout was set: bind its memory again" in e.value.message
        rt.bindInputTensor(0, src)
        rt.bindOutputTensor(0, dst)
        if blocking:
            rt.submit()
        else:
            (sync,) = rt.submitNonBlocking()
            sync.wait(10_000)
        got = np.frombuffer(bytes(dst.bytes_view()), np.uint8)
        assert np.array_equal(got[_offsets(768, 3072)], x)
        gaps = np.ones(3072, bool)
        gaps[_offsets(768, 3072).reshape(-1)] = False
        assert set(got[gaps].tolist()) == {0x11}  # the output's padding: the application's own bytes
        # the loadable's own layout again: bound as it is
        rt.setInputTensorDesc(0, dataclasses.replace(wide, size=2048, strides=(1, 256, 1024, 0, 0, 0, 0, 0)))
        assert rt.getInputTensorDesc(0).strides[1] == 256


@pytest.mark.parametrize(("change", "code", "words"), [
    ({"dims": (1, 16, 4, 8)}, NvError.NotSupported,
     "dims (1, 16, 4, 8) differs from the loadable's (1, 32, 4, 8)"),
    ({"data_type": M.DataType.UINT8}, NvError.NotSupported,
     "data_type UINT8 differs from the loadable's INT8"),
    ({"pixel_format": M.PixelFormat.R8}, NvError.NotSupported, "pixel_format R8 differs"),
    ({"strides": (2, 256, 1024, 0, 0, 0, 0, 0)}, NvError.NotSupported,
     "strides[0] 2 differs from the loadable's 1: only the line, surface and batch strides (1, 2, 3) may "
     "change"),
    ({"strides": (1, 256, 1024, 0, 9, 0, 0, 0)}, NvError.NotSupported, "strides[4] 9"),
    ({"strides": (1, 128, 1024, 0, 0, 0, 0, 0)}, NvError.BadValue, "strides [1, 128, 1024, 0]: elements of "
                                                                    "'m4_BDMASrc_i4' overlap"),
    ({"strides": (1, 512, 2048, 0, 0, 0, 0, 0)}, NvError.InvalidSize, "its elements reach byte 1792 of a "
                                                                      "1024-byte buffer"),
    ({"strides": (1, -1, 1024, 0, 0, 0, 0, 0)}, NvError.BadParameter, "must be 8 integers"),
    ({"size": 0}, NvError.BadParameter, "bufferSize 0 must be 1..2^40")])
def test_what_the_loadable_s_tensor_does_not_allow_is_refused_naming_the_field(
        change: dict[str, Any], code: NvError, words: str) -> None:
    rt, _ = _feature_runtime()
    with rt:
        desc = dataclasses.replace(rt.getInputTensorDesc(0), **{"size": 1024, **change})
        with pytest.raises(DlaError) as e:
            rt.setInputTensorDesc(0, desc)
        assert e.value.code == code and words in e.value.message, e.value.message
        assert e.value.message.startswith("setInputTensorDesc(0): ")
        assert rt.getInputTensorDesc(0).strides[1] == 256  # unchanged
        with pytest.raises(DlaError) as e:
            rt.setInputTensorDesc(0, "not a descriptor")
        assert e.value.code == NvError.BadParameter and "an NvdlaTensorDesc" in e.value.message
