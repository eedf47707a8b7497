"""Symbolic input dimensions: refused with each named and the flag shown; sized by input_shapes /
--input-shape; a bad shape (unknown input, wrong rank, non-positive, against a fixed dimension) is a
one-line error naming it. Also `pydla compile` and `pydla run` with --input-shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pydla.cli import main
from pydla.compiler.api import compile_model
from pydla.compiler.input_shapes import (
    check_input_shapes,
    parse_input_shape,
    parse_input_shapes,
    with_input_shapes,
)
from pydla.errors import DlaError, NvError
from pydla.loadable.container import Loadable
from tests.compiler import exporter_models as em


def _two_inputs(x_dims: Any = ("batch", "sequence", 4), y_dims: Any = ("batch", 1, 4)) -> onnx.ModelProto:
    """y broadcast over x's sequence: x + y (x: (batch, sequence, 4), y: (batch, 1, 4))."""
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, y_dims)],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                                             ["batch", "sequence", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _error(m: onnx.ModelProto, shapes: Any = None) -> DlaError:
    with pytest.raises(DlaError) as info:
        compile_model(m, input_shapes=shapes)
    assert "\n" not in info.value.message
    return info.value


def test_without_shapes_each_symbolic_dimension_is_named_with_the_flag() -> None:
    e = _error(_two_inputs())
    assert e.code == NvError.BadParameter
    assert "input 'x' [batch, sequence, 4] has dynamic dimensions" in e.message
    assert "input 'y' [batch, 1, 4] has dynamic dimensions" in e.message
    # compile_model's caller is told the parameter it uses, the command line's the flag
    assert ("input_shapes={'x': (1, sequence, 4), 'y': (1, 1, 4)} (sequence: the sizes to compile for)"
            in e.message)
    assert "--input-shape" not in e.message
    e = _error(_two_inputs(), parse_input_shapes([]))
    assert "--input-shape x=1,sequence,4 --input-shape y=1,1,4" in e.message
    assert "input_shapes" not in e.message
    # a caller that passes a plain mapping past the API's check is shown both
    with pytest.raises(DlaError) as info:
        with_input_shapes(_two_inputs(), {})
    assert "--input-shape x=1,sequence,4 --input-shape y=1,1,4" in info.value.message
    assert "input_shapes={'x': (1, sequence, 4), 'y': (1, 1, 4)}" in info.value.message


def test_an_unnamed_dimension_and_an_input_without_a_shape_are_named() -> None:
    e = _error(_two_inputs(x_dims=[None, 3, 4], y_dims=None), parse_input_shapes([]))
    assert "input 'x' [?, 3, 4] has dynamic dimensions" in e.message
    assert "input 'y' declares no shape" in e.message and "--input-shape y=D0,D1,..." in e.message


def test_only_the_inputs_still_without_sizes_are_asked_for() -> None:
    e = _error(_two_inputs(), parse_input_shapes(["x=2,3,4"]))
    assert "'x'" not in e.message and "--input-shape y=1,1,4" in e.message


@pytest.mark.parametrize("shapes,api,flag", [
    ({"z": (1, 2, 4)}, "input_shapes['z']: the model has no input 'z' (its inputs: x, y)",
     "--input-shape z: the model has no input 'z' (its inputs: x, y)"),
    ({"x": (1, 2)},
     "input_shapes['x'] = (1, 2): 2 dimensions, but input 'x' has 3 ([batch, sequence, 4])",
     "--input-shape x=1,2: 2 dimensions, but input 'x' has 3 ([batch, sequence, 4])"),
    ({"x": (1, 2, 5)}, "input_shapes['x'] = (1, 2, 5): dimension 2 of input 'x' is fixed at 4 in the model",
     "--input-shape x=1,2,5: dimension 2 of input 'x' is fixed at 4 in the model"),
    ({"x": (1, 0, 4)}, "input_shapes['x'] = (1, 0, 4): dimension 0 is not positive",
     "--input-shape x=1,0,4: dimension 0 is not positive"),
    ({"x": (2, 3, 4), "y": (1, 1, 4)},
     "input_shapes['y']: dimension 0 is 'batch', given 2 elsewhere and 1 here",
     "--input-shape y: dimension 0 is 'batch', given 2 elsewhere and 1 here"),
])
def test_a_bad_shape_is_a_one_line_error_naming_it_as_the_caller_gave_it(
        shapes: dict[str, tuple[int, ...]], api: str, flag: str) -> None:
    e = _error(_two_inputs(), shapes)
    assert e.code == NvError.BadParameter
    assert api in e.message
    as_flags = [f"{name}={','.join(map(str, dims))}" for name, dims in shapes.items()]
    try:
        given = parse_input_shapes(as_flags)
    except DlaError as refused:  # a size the flag's parser refuses itself
        e = refused
    else:
        e = _error(_two_inputs(), given)
    assert e.code == NvError.BadParameter
    assert flag in e.message


@pytest.mark.parametrize("value,fragment", [
    ([("x", (1, 2, 4))], "input_shapes of type list: give a dict"),
    ({"x": "1,2,4"}, "input_shapes['x'] = '1,2,4': give a tuple of positive ints"),
    ({"x": (1, 2.5, 4)}, "input_shapes['x'] = [1, 2.5, 4]: every dimension must be an int"),
    ({"x": (True, 2, 4)}, "every dimension must be an int"),
    ({"x": (1, -2, 4)}, "dimension -2 is not positive"),
    ({3: (1, 2, 4)}, "input_shapes: key 3 is not an input name"),
])
def test_the_api_checks_input_shapes_types(value: Any, fragment: str) -> None:
    with pytest.raises(DlaError) as info:
        check_input_shapes(value)
    assert info.value.code == NvError.BadParameter and fragment in info.value.message


def test_numpy_integers_and_lists_are_dimensions() -> None:
    assert check_input_shapes({"x": [np.int64(1), 2, np.int32(4)]}) == {"x": (1, 2, 4)}
    assert check_input_shapes(None) == {}


@pytest.mark.parametrize("text,fragment", [
    ("x", "--input-shape 'x': write NAME=D0,D1,..."),
    ("x=", "write NAME=D0,D1,..."),
    ("=1,2", "write NAME=D0,D1,..."),
    ("x=1,a", "the dimensions '1,a' are not integers"),
    ("x=1,,2", "are not integers"),
    ("x=1,0", "dimension 0 is not positive"),
])
def test_the_flag_text_is_checked(text: str, fragment: str) -> None:
    with pytest.raises(DlaError) as info:
        parse_input_shape(text)
    assert info.value.code == NvError.BadParameter and fragment in info.value.message


def test_the_flag_text_forms() -> None:
    assert parse_input_shape("input_ids=1,128") == ("input_ids", (1, 128))
    assert parse_input_shape("input:0=2x3x5") == ("input:0", (2, 3, 5))
    assert parse_input_shape("a=b=1, 2") == ("a=b", (1, 2))  # a name may hold '='
    with pytest.raises(DlaError, match="given twice"):
        parse_input_shapes(["x=1,2", "x=1,3"])


def test_shapes_of_a_static_input_are_accepted_when_they_agree() -> None:
    m = _two_inputs(x_dims=[2, 3, 4], y_dims=[2, 1, 4])
    blob = compile_model(m, input_shapes={"x": (2, 3, 4)}).blob
    assert {t.name: t.dims for t in Loadable.open(blob).tensors()}["z"] == (2, 3, 4)


def test_stale_symbolic_value_info_does_not_conflict() -> None:
    """An exporter's outputs carry its symbolic names (and names of its own making for computed
    dimensions) or, when left out of the dynamic axes, the sizes of the example it traced, as its
    value_info does: the outputs take the sizes given or are inferred, the intermediate shapes are
    inferred again."""
    m = _two_inputs()
    m.graph.node.append(helper.make_node("Relu", ["z"], ["r"]))
    m.graph.node.append(helper.make_node("Relu", ["r"], ["w"]))
    m.graph.node.append(helper.make_node("Relu", ["r"], ["v"]))
    m.graph.output.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, ["batch", "Relu_dim_1", 4]))
    m.graph.output.append(helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 3, 4]))  # not dynamic
    # traced with a batch of 1 and a sequence of 3: recorded as fixed sizes
    m.graph.value_info.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 3, 4]))
    blob = compile_model(m, input_shapes={"x": (2, 3, 4), "y": (2, 1, 4)}).blob
    tensors = {t.name: t.dims for t in Loadable.open(blob).tensors()}
    assert tensors["z"] == tensors["w"] == tensors["v"] == (2, 3, 4)


# -- the command line ---------------------------------------------------------------------------------


def test_pydla_compile_with_input_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gpt.onnx"
    onnx.save(em.gpt_block(), str(path))
    assert main(["compile", str(path), "--quiet", "--input-shape", "inputs_embeds=2,6,32"]) == 0
    tensors = {t.name: t.dims for t in Loadable.open(tmp_path / "gpt.dla").tensors()}
    assert tensors == {"inputs_embeds": (2, 6, 32), "hidden_states": (2, 6, 32)}
    assert main(["compile", str(path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "input 'inputs_embeds' [batch, sequence, 32] has dynamic dimensions" in err
    assert "--input-shape inputs_embeds=1,sequence,32 (sequence: the sizes to compile for)" in err
    assert main(["compile", str(path), "--input-shape", "inputs_embeds=2,6"]) == 1
    assert "2 dimensions, but input 'inputs_embeds' has 3" in capsys.readouterr().err
    assert main(["compile", str(path), "--input-shape", "embeds=2,6,32"]) == 1
    assert "the model has no input 'embeds' (its inputs: inputs_embeds)" in capsys.readouterr().err


def test_pydla_run_with_input_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "block.onnx"
    onnx.save(em.mobilenet_v3_block(), str(path))
    assert main(["run", str(path), "--input-shape", "x=3,16,12,12"]) == 0
    assert "features" in capsys.readouterr().out
    # a dynamic batch alone: batch 1, said
    assert main(["run", str(path)]) == 0
    assert capsys.readouterr().out.startswith(
        "input 'x' [batch, 16, 12, 12]: running with batch 1, its only dynamic dimension "
        "(--input-shape x=N,16,12,12 for another)\ninput x: random float32 (1, 16, 12, 12)\n")
    assert main(["compile", str(path), "-o", str(tmp_path / "block.dla")]) == 0
    assert capsys.readouterr().out.startswith(
        "input 'x' [batch, 16, 12, 12]: compiled with batch 1, its only dynamic dimension "
        "(--input-shape x=N,16,12,12 for another)\n")
    assert Loadable.open(tmp_path / "block.dla").tensors()[0].dims == (1, 16, 12, 12)
    # another dynamic dimension: asked for, worded alike by run and compile
    gpt = tmp_path / "gpt.onnx"
    onnx.save(em.gpt_block(), str(gpt))
    assert main(["run", str(gpt)]) == 1
    run_err = capsys.readouterr().err
    assert main(["compile", str(gpt)]) == 1
    compile_err = capsys.readouterr().err
    for err in (run_err, compile_err):
        assert err.startswith("pydla: error: input 'inputs_embeds' [batch, sequence, 32] has dynamic "
                              "dimensions") and err.endswith("[BadParameter]\n"), err
        assert "--input-shape inputs_embeds=1,sequence,32 (sequence: the sizes to " in err


def test_an_input_that_is_no_tensor_is_refused_as_such() -> None:
    m = _two_inputs()
    m.graph.input[1].CopyFrom(helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, None))
    e = _error(m, {"x": (1, 2, 4)})
    assert e.code == NvError.NotSupported
    assert e.message == "input 'y' is of type sequence_type: pydla compiles tensor inputs"


def test_pydla_run_of_a_loadable_checks_input_shapes(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "block.dla"
    path.write_bytes(compile_model(em.channel_shuffle(), input_shapes={"x": (2, 8, 6, 6)}).blob)
    assert main(["run", str(path), "--input-shape", "x=2,8,6,6"]) == 0
    assert "output y: float32 (2, 8, 6, 6)" in capsys.readouterr().out
    assert main(["run", str(path), "--input-shape", "x=1,8,6,6"]) == 1
    err = capsys.readouterr().err
    assert "the loadable's input 'x' has shape (2, 8, 6, 6), fixed when it was compiled" in err
