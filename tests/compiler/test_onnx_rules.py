"""Invalid ONNX refused as onnx's checker and onnxruntime refuse it, each with a one-line DlaError
naming the node or tensor and the value: duplicate producers, out-of-range opsets and IR versions,
an initializer that contradicts its graph input, cycles, strings that are not UTF-8, operators of a
domain pydla does not know. And every message of a library behind an error (onnx's shape
inference) is one line, its whole text kept for -v."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla import DlaError, NvError
from pydla.compiler.api import compile_model
from pydla.logconfig import Detail
from tests.compiler.support import model


def _relu(**kw: Any) -> onnx.ModelProto:
    return model([helper.make_node("Relu", ["x"], ["y"])], {"x": (1, 3, 4, 4)}, ["y"], **kw)


def _refused(m: onnx.ModelProto | str | Path) -> DlaError:
    with pytest.raises(DlaError) as info:
        compile_model(m)
    message = info.value.message
    assert message.isprintable(), message  # one line, no control characters
    return info.value


def _onnxruntime_refuses(m: onnx.ModelProto | bytes) -> str:
    data = m if isinstance(m, bytes) else m.SerializeToString()
    with pytest.raises(Exception) as info:
        ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return str(info.value)


def test_two_nodes_producing_one_tensor_are_refused() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"], name="a"),
               helper.make_node("Sigmoid", ["x"], ["y"], name="b")], {"x": (1, 3, 4, 4)}, ["y"])
    assert "Duplicate definition of name (y)" in _onnxruntime_refuses(m)
    e = _refused(m)
    assert e.code == NvError.BadValue
    assert e.message == ("tensor 'y' is defined twice: the output of node 'a' (Relu) and the output of node "
                         "'b' (Sigmoid) (an ONNX graph defines each name once)")


@pytest.mark.parametrize("nodes,inits,fragment", [
    ([helper.make_node("Relu", ["x"], ["x"], name="r")], {},
     "tensor 'x' is defined twice: a graph input and the output of node 'r' (Relu)"),
    ([helper.make_node("Relu", ["x"], ["w"], name="r"), helper.make_node("Relu", ["x"], ["y"])],
     {"w": np.ones(1, np.float32)}, "tensor 'w' is defined twice: an initializer and the output of node 'r'"),
    ([helper.make_node("Split", ["x"], ["y", "y"], name="s", axis=1, num_outputs=2)], {},
     "tensor 'y' is defined twice: the output of node 's' (Split) and the output of node 's' (Split)"),
])
def test_a_name_defined_twice_in_any_way_is_refused(nodes: list[Any], inits: dict[str, np.ndarray],
                                                    fragment: str) -> None:
    m = model(nodes, {"x": (1, 4, 4, 4)}, ["y"], inits=inits, opset=18)
    assert fragment in _refused(m).message


def test_an_opset_beyond_the_newest_is_refused() -> None:
    m = _relu(opset=9999)
    _onnxruntime_refuses(m)
    e = _refused(m)
    newest = onnx.defs.onnx_opset_version()
    assert e.code == NvError.NotSupported
    assert e.message == (f"ONNX opset 9999: the newest opset this onnx {onnx.__version__} (and so pydla) "
                         f"knows is {newest}; export the model for opset {newest} or earlier")
    m = _relu(opset=newest)
    assert compile_model(m).operations == {"SDP": 1}  # the newest itself is taken


def test_an_opset_imported_twice_or_below_1_is_refused() -> None:
    m = _relu()
    m.opset_import.append(helper.make_opsetid("ai.onnx", 17))
    assert _refused(m).message == "opset_import: domain 'ai.onnx' is imported twice (versions 13 and 17)"
    m = _relu()
    m.opset_import.append(helper.make_opsetid("com.me", -2))
    assert _refused(m).message == "opset_import: domain 'com.me' version -2: opset versions start at 1"


@pytest.mark.parametrize("ir_version,code,fragment", [
    (0, NvError.BadValue, "ir_version 0: the model does not set its IR version"),
    (99, NvError.NotSupported,
     f"ir_version 99: newer than this onnx {onnx.__version__} reads (IR versions 1 to {onnx.IR_VERSION})"),
])
def test_an_ir_version_out_of_range_is_refused(ir_version: int, code: NvError, fragment: str) -> None:
    m = _relu()
    m.ir_version = ir_version
    e = _refused(m)
    assert e.code == code and e.message.startswith(fragment)
    m.ir_version = onnx.IR_VERSION
    assert compile_model(m).operations == {"SDP": 1}


def test_an_input_whose_initializer_has_another_shape_or_type_is_refused() -> None:
    m = model([helper.make_node("Add", ["x", "x"], ["y"])], {"x": (1, 3, 4, 4)}, ["y"],
              inits={"x": np.ones((2, 2), np.float32)})
    assert "Shape of initializer x does not match" in _onnxruntime_refuses(m)
    assert _refused(m).message == ("graph input 'x' is declared of shape [1, 3, 4, 4], but its initializer "
                                   "has shape [2, 2]")
    m = model([helper.make_node("Add", ["x", "x"], ["y"])], {"x": (2, 2)}, ["y"],
              inits={"x": np.ones((2, 2), np.int64)})
    assert _refused(m).message == "graph input 'x' is declared float, but its initializer is int64"
    # the same shape (and a symbolic dimension, which any size fills) is an input's default value
    m = model([helper.make_node("Add", ["x", "x"], ["y"])], {"x": ("n", 2)}, ["y"],
              inits={"x": np.ones((3, 2), np.float32)})
    assert compile_model(m).operations


def test_a_cycle_is_named_node_by_node() -> None:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Sigmoid", ["a"], ["y"], name="out")]
    m = model(nodes, {"x": (1, 3)}, ["y"])
    assert "not acyclic" in _onnxruntime_refuses(m)
    assert _refused(m).message == ("the graph has a cycle: node 'relu' (Relu) -> node 'add' (Add) -> node "
                                   "'relu' (Relu) (an ONNX graph is acyclic)")


def test_nodes_out_of_order_are_named_with_the_later_producer() -> None:
    nodes = [helper.make_node("Sigmoid", ["a"], ["y"], name="second"),
             helper.make_node("Relu", ["x"], ["a"], name="first")]
    assert _refused(model(nodes, {"x": (1, 3)}, ["y"])).message == (
        "node 'second' (Sigmoid): input 'a' is the output of a later node, node 'first' (Relu): an ONNX "
        "graph lists its nodes in topological order")


def test_a_long_chain_is_checked_without_recursion() -> None:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(5000)]
    nodes.insert(0, helper.make_node("Add", ["x", "t5000"], ["t0"]))
    nodes.append(helper.make_node("Identity", ["t5000"], ["y"]))
    message = _refused(model(nodes, {"x": (1, 3)}, ["y"])).message
    assert message.startswith("the graph has a cycle: node 'Relu_")


def _with_bytes(m: onnx.ModelProto, text: str, raw: bytes) -> bytes:
    data = m.SerializeToString()
    assert data.count(text.encode()) >= 1 and len(text.encode()) == len(raw)
    return data.replace(text.encode(), raw)


@pytest.mark.parametrize("field,text,raw,path", [
    ("op_type", "R\u00ffu", b"R\xff\xfeu", "model.graph.node[0].op_type b'R\\xff\\xfeu'"),
    ("name", "n\u00ff", b"n\xc3\x28", "model.graph.node[0].name b'n\\xc3('"),
    ("output", "o\u00ff", b"o\x80\x80", "model.graph.node[0].output[0] b'o\\x80\\x80'"),
])
def test_a_string_that_is_not_utf8_is_refused_in_one_line(tmp_path: Path, field: str, text: str, raw: bytes,
                                                          path: str) -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    setattr(node, field, text) if field != "output" else node.output.__setitem__(0, text)
    m = model([node, helper.make_node("Identity", [node.output[0]], ["z"])], {"x": (1, 3)}, ["z"])
    file = tmp_path / "bad.onnx"
    file.write_bytes(_with_bytes(m, text, raw))
    e = _refused(file)
    assert e.code == NvError.BadValue
    assert e.message == (f"{path}: not UTF-8 text (ONNX strings are UTF-8; the model is corrupt or was "
                         "written by a faulty tool)")


def test_an_operator_of_a_custom_domain_is_named_not_its_opset_import() -> None:
    m = model([helper.make_node("MyOp", ["x"], ["y"], name="mine", domain="com.me")], {"x": (1, 3)}, ["y"])
    assert _refused(m).message == ("node 'mine' (com.me MyOp): the model imports no opset of domain 'com.me' "
                                   "(its opset_import lacks it)")
    m.opset_import.append(helper.make_opsetid("com.me", 1))
    e = _refused(m)
    assert e.code == NvError.NotSupported
    assert e.message == ("node 'mine' (com.me MyOp): operator 'MyOp' of domain 'com.me' is not one pydla "
                         "knows: it compiles ONNX's operators (domain '') and custom SHAVE kernels (domain "
                         "'ai.pydla')")


def test_a_model_with_another_domain_imported_but_unused_compiles() -> None:
    """Shape inference sees every opset the model imports (it used to see two)."""
    m = _relu()
    m.opset_import.append(helper.make_opsetid("com.me", 3))
    m.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    assert compile_model(m).operations == {"SDP": 1}


def test_shape_inference_errors_are_one_line_with_the_whole_report_as_detail() -> None:
    """onnx's report of a failed inference runs over several lines: the message is the first, the
    rest is the chained Detail (what `pydla -v` shows)."""
    m = model([helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
               helper.make_node("MatMul", ["x", "w"], ["b"], name="mm2"),
               helper.make_node("Add", ["a", "b"], ["y"])],
              {"x": (2, 3)}, ["y"], inits={"w": np.ones((4, 5), np.float32)})
    e = _refused(m)
    assert e.code == NvError.BadValue
    assert e.message.startswith("ONNX shape inference failed: [ShapeInferenceError]")
    assert isinstance(e.__cause__, Detail)
    assert len(str(e.__cause__).strip().splitlines()) > 1
    assert str(e.__cause__).splitlines()[0].strip() in e.message


def test_names_holding_control_characters_are_escaped() -> None:
    m = model([helper.make_node("Frob", ["x"], ["y"], name="evil\n\x1b[31mred")], {"x": (1, 3)}, ["y"])
    e = _refused(m)
    assert "node 'evil\\n\\x1b[31mred' (Frob)" in e.message


def test_an_initializer_that_cannot_be_read_is_one_line() -> None:
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], {"x": (1, 3)}, ["y"])
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    w.raw_data = b"\x00" * 5  # 5 bytes for three floats
    m.graph.initializer.append(w)
    e = _refused(m)
    assert e.message.startswith("initializer 'w' cannot be read: ")


def test_invalid_models_keep_onnxruntime_s_verdict_on_valid_ones() -> None:
    """The rules refuse nothing onnxruntime runs among the usual forms: an input listed with its
    initializer (older exporters), an output that is a graph input, ai.onnx spelled out."""
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], {"x": (1, 3), "w": (3,)}, ["y", "x"],
              inits={"w": np.ones(3, np.float32)})
    m.opset_import[0].domain = "ai.onnx"
    ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert compile_model(m).operations
    assert TensorProto.FLOAT == m.graph.input[0].type.tensor_type.elem_type
