"""The ONNX custom operator ShaveKernel (domain ai.pydla): a kernel author's C kernel, built in the
test, in a model compiled by pydla's compiler and run by pydla.Session, against numpy; its
attributes (a kernel path from the model's directory, an embedded ELF, params, output shape and
type); the errors of a bad node; a configuration without tiles; ``pydla info``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pydla
from pydla.cli import main
from pydla.compiler.api import compile_model
from pydla.kernels import build
from pydla.session import Session

ROOT = Path(__file__).resolve().parents[2]
SCALE_ADD = ROOT / "examples" / "kernels" / "scale_add.c"
RNG = np.random.default_rng(4)

# out = x + y (two inputs, int32 or float32: dataType says which).
ADD2 = r"""
#include "memref.h"

typedef struct __attribute__((packed)) { MemRefData x, y, out; } Add2Params;

void add2(uint32_t argsAddr, uint32_t argsSize) {
    KERNEL_CHECK(argsSize == sizeof(Add2Params));
    const Add2Params *p = (const Add2Params *)(uintptr_t)argsAddr;
    view_t x, y, out;
    view_of(&p->x, &x);
    view_of(&p->y, &y);
    output_view(&p->out, &x, &out);
    int32_t n = 1;
    for (uint32_t i = 0; i < x.ndims; i++) n *= x.dims[i];
    if (p->x.dataType == SHAVE_DATA_TYPE_I32)
        for (int32_t i = 0; i < n; i++)
            ((int32_t *)out.data)[i] = ((const int32_t *)x.data)[i] + ((const int32_t *)y.data)[i];
    else
        for (int32_t i = 0; i < n; i++)
            ((float *)out.data)[i] = ((const float *)x.data)[i] + ((const float *)y.data)[i];
}
"""


@pytest.fixture(scope="module")
def kdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory holding the kernels' ELFs."""
    if build.compiler() is None:
        pytest.skip(f"no RISC-V C compiler: {build.INSTALL_HINT}")
    d = tmp_path_factory.mktemp("custom")
    (d / "add2.c").write_text(ADD2)
    (d / "scale_add.elf").write_bytes(build.build_kernel(SCALE_ADD))
    (d / "add2.elf").write_bytes(build.build_kernel(d / "add2.c"))
    return d


def _params(a: float, b: float) -> Any:
    return numpy_helper.from_array(np.array([a, b], np.float32))


def _model(nodes: list[Any], inputs: dict[str, tuple[tuple[int, ...], int]], outputs: list[str],
           inits: tuple[Any, ...] = ()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "custom",
                          [helper.make_tensor_value_info(n, t, s) for n, (s, t) in inputs.items()],
                          [helper.make_tensor_value_info(n, 0, None) for n in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.pydla", 1)])
    m.ir_version = 8
    return m


def _scale_add_model(**attrs: Any) -> onnx.ModelProto:
    """x -> Relu -> ShaveKernel (x * a + b) -> Sigmoid -> y: device operations on either side."""
    attrs.setdefault("kernel", "scale_add.elf")
    attrs.setdefault("params", _params(2.0, -1.0))
    attrs = {k: v for k, v in attrs.items() if v is not None}  # None: leave the attribute out
    return _model([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("ShaveKernel", ["r"], ["k"], domain="ai.pydla", name="sa", **attrs),
                   helper.make_node("Sigmoid", ["k"], ["y"])],
                  {"x": ((2, 3, 16), TensorProto.FLOAT)}, ["y"])


def _expected(x: np.ndarray, a: float = 2.0, b: float = -1.0) -> np.ndarray:
    k = np.maximum(x, 0) * np.float32(a) + np.float32(b)
    return (1 / (1 + np.exp(-k.astype(np.float64)))).astype(np.float32)


def test_a_model_with_the_custom_operator_runs_through_session(kdir: Path) -> None:
    path = kdir / "model.onnx"
    onnx.save(_scale_add_model(), path)
    x = RNG.standard_normal((2, 3, 16)).astype(np.float32)
    with Session(path) as sess:  # the kernel path is relative to the model file's directory
        y = sess.run({"x": x})["y"]
    np.testing.assert_allclose(y, _expected(x), rtol=1e-3, atol=1e-4)
    compiled = compile_model(path)
    assert compiled.operations["SHAVE"] == 1 and compiled.cpu_runs == []


def test_in_an_fp16_compile_the_kernel_sees_the_models_float32(kdir: Path) -> None:
    x = RNG.standard_normal((2, 3, 16)).astype(np.float32)
    compiled = compile_model(_scale_add_model(), precision="fp16", base_dir=kdir)
    with Session(compiled.blob) as sess:  # the kernel traps on anything but FP32 data
        np.testing.assert_allclose(sess.run({"x": x})["y"], _expected(x), rtol=5e-3, atol=5e-3)


def test_an_embedded_kernel_and_a_model_in_memory(kdir: Path) -> None:
    elf = np.frombuffer((kdir / "scale_add.elf").read_bytes(), np.uint8)
    m = _scale_add_model(kernel=None, kernel_elf=numpy_helper.from_array(elf), params=b"\0\0\x80\x3f\0\0\0\0")
    x = RNG.standard_normal((2, 3, 16)).astype(np.float32)
    with Session(m) as sess:
        np.testing.assert_allclose(sess.run({"x": x})["y"], _expected(x, 1.0, 0.0), rtol=1e-3, atol=1e-4)
    # A relative path in a model given in memory starts at base_dir (default: the current directory).
    blob = compile_model(_scale_add_model(), base_dir=kdir).blob
    with Session(blob) as sess:
        np.testing.assert_allclose(sess.run({"x": x})["y"], _expected(x), rtol=1e-3, atol=1e-4)


def test_two_inputs_a_constant_one_and_an_output_shape_and_type(kdir: Path) -> None:
    c = RNG.integers(-50, 50, (4, 8)).astype(np.int32)
    m = _model([helper.make_node("ShaveKernel", ["x", "c"], ["y"], domain="ai.pydla", kernel="add2.elf",
                                 output_shape=[4, 8], output_dtype=TensorProto.INT32)],
               {"x": ((4, 8), TensorProto.INT32)}, ["y"], (numpy_helper.from_array(c, "c"),))
    x = RNG.integers(-1000, 1000, (4, 8)).astype(np.int32)
    blob = compile_model(m, base_dir=kdir).blob
    with Session(blob) as sess:
        y = sess.run({"x": x})["y"]
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, x + c)


def test_a_rebuilt_kernel_is_not_served_from_the_compile_cache(kdir: Path, tmp_path: Path) -> None:
    d = tmp_path / "model"
    d.mkdir()
    onnx.save(_model([helper.make_node("ShaveKernel", ["x", "x"], ["y"], domain="ai.pydla", kernel="k.elf")],
                     {"x": ((8,), TensorProto.FLOAT)}, ["y"]), d / "m.onnx")
    x = np.arange(8, dtype=np.float32)
    shutil.copy(kdir / "add2.elf", d / "k.elf")
    with Session(d / "m.onnx") as sess:
        np.testing.assert_array_equal(sess.run({"x": x})["y"], x + x)
    # Another kernel at the same path, the model unchanged: scale_add with its 8 bytes of params
    # missing traps (argsSize 96 != 72), which shows the new ELF ran.
    shutil.copy(kdir / "scale_add.elf", d / "k.elf")
    with pytest.raises(pydla.DlaError, match="TRAP"), Session(d / "m.onnx") as sess:
        sess.run({"x": x})


BAD_NODES = {
    "missing file": (dict(kernel="nothere.elf"), "nothere.elf': no such file"),
    "outside the model's directory": (dict(kernel="../x.elf"), "may not leave the model's directory"),
    "both forms": (dict(kernel_elf=b"\x7fELF"), "one of them"),
    "unknown attribute": (dict(kernal="x"), "unknown attribute.*kernal"),
    "bad output_dtype": (dict(output_dtype=TensorProto.DOUBLE), "output_dtype 11"),
    "bad output_shape": (dict(output_shape=[4, 0]), r"output_shape \[4, 0\]"),
    "not an ELF": (dict(kernel="model.onnx"), "not a SHAVE kernel ELF"),
    "stripped entry": (dict(entry="scale_add"), "no symbol table"),
    "params of strings": (dict(params=helper.make_tensor("p", TensorProto.STRING, [1], [b"a"])),
                          "tensor of object"),
}


@pytest.mark.parametrize("case", sorted(BAD_NODES))
def test_bad_nodes_are_errors_naming_the_node_and_the_attribute(kdir: Path, case: str) -> None:
    attrs, message = BAD_NODES[case]
    onnx.save(_scale_add_model(), kdir / "model.onnx")
    with pytest.raises(pydla.DlaError, match=f"node 'sa' .*{message}"):
        compile_model(_scale_add_model(**attrs), base_dir=kdir)


def test_other_operators_of_the_domain_and_the_custom_node_without_tiles(kdir: Path) -> None:
    m = _scale_add_model()
    m.graph.node[1].op_type = "Other"
    with pytest.raises(pydla.DlaError, match=r"domain 'ai\.pydla' has one operator, ShaveKernel"):
        compile_model(m, base_dir=kdir)
    m.graph.node[1].domain = "com.example"
    with pytest.raises(pydla.DlaError, match=r"domain '?com\.example"):
        compile_model(m, base_dir=kdir)
    with pytest.raises(pydla.DlaError, match="'small' has none") as e:
        compile_model(_scale_add_model(), config="small", base_dir=kdir)
    assert e.value.code == pydla.NvError.NotSupported


def test_too_large_for_cmx_names_the_node(kdir: Path) -> None:
    m = _model([helper.make_node("ShaveKernel", ["x"], ["y"], domain="ai.pydla", kernel="scale_add.elf",
                                 name="big", params=_params(1, 0))],
               {"x": ((512, 1024), TensorProto.FLOAT)}, ["y"])
    with pytest.raises(pydla.DlaError, match=r"node 'big' .*bytes of CMX") as e:
        compile_model(m, base_dir=kdir)
    assert e.value.code == pydla.NvError.InsufficientMemory


def test_pydla_info_lists_the_custom_kernel(kdir: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.dla").write_bytes(compile_model(_scale_add_model(), base_dir=kdir).blob)
    assert main(["info", str(tmp_path / "m.dla")]) == 0
    out = capsys.readouterr().out
    assert "shave kernels: " in out and "shave_custom_scale_add" in out
    assert "kernel task 0: 'shave_custom_scale_add'" in out and "72 argument bytes" in out
