"""What the `pydla` command prints when it refuses something: one line (control characters escaped,
a long message cut at a word with a hint that -v shows it), the whole of it with -v (the traceback
and the detail a library reported). Tried on the invalid models the compiler refuses, on files that
are no model, and on the messages that used to differ between commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from pydla import DlaError, NvError
from pydla.cli import main
from pydla.logconfig import MESSAGE_CHARS, VERBOSE_HINT, Detail, error_lines, one_line, printable
from tests.compiler.support import model

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo_model.onnx"


def _err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 1
    return capsys.readouterr().err


def _one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    line = err[:-1]
    assert line.isprintable() and line.startswith("pydla: error: "), line
    return line


# -- the rule itself ------------------------------------------------------------------------------


def test_control_characters_are_escaped() -> None:
    assert printable("a\nb\x1b[31mc\td\u2028e\x00") == "a\\nb\\x1b[31mc\\td\\u2028e\\x00"
    assert printable("plain text, ünïcode") == "plain text, ünïcode"
    line, cut = one_line("  name 'x\ny'  ")
    assert (line, cut) == ("name 'x\\ny'", False)


def test_a_long_message_is_cut_at_a_word_with_the_hint() -> None:
    words = " ".join(f"word{i}" for i in range(200))
    (line,) = error_lines(DlaError(NvError.BadValue, words), verbose=False)
    assert line.endswith(f" ... [BadValue] {VERBOSE_HINT}")
    shown = line.removeprefix("pydla: error: ").split(" ... ")[0]
    assert len(shown) <= MESSAGE_CHARS and words.startswith(shown) and words[len(shown)] == " "


def test_a_detail_behind_the_message_is_hinted_and_shown_with_verbose() -> None:
    try:
        raise DlaError(NvError.BadValue, "inference failed: first") from Detail("first\nsecond\nthird")
    except DlaError as e:
        error = e
    (line,) = error_lines(error, verbose=False)
    assert line == f"pydla: error: inference failed: first [BadValue] {VERBOSE_HINT}"
    verbose = error_lines(error, verbose=True)
    text = "\n".join(verbose)
    assert "pydla.logconfig.Detail: first\nsecond\nthird" in text and "Traceback" in text
    assert verbose[-1] == "pydla: error: inference failed: first [BadValue]"
    # a detail that only repeats the message adds no hint
    try:
        raise DlaError(NvError.BadValue, "parse failed (Wire format was corrupt)") \
            from Detail("Wire format was corrupt")
    except DlaError as e:
        assert error_lines(e, verbose=False) == [
            "pydla: error: parse failed (Wire format was corrupt) [BadValue]"]


def test_a_message_of_several_lines_is_its_headline_then_the_tools_diagnostics() -> None:
    """A multi-line message is a headline and a tool's diagnostics (a compiler's output, a spec's
    problems): the headline is the error's line; the diagnostics follow, indented as the tool wrote
    them, control characters escaped, 20 of them without -v, all with -v."""
    error = DlaError(NvError.BadValue, "kernel k: the build failed:\nk.c:1:24: error: expected expression\n"
                                       "    1 | int x = ;\x07\n      |         ^")
    assert error_lines(error, verbose=False) == [
        "pydla: error: kernel k: the build failed [BadValue]", "  k.c:1:24: error: expected expression",
        "      1 | int x = ;\\x07", "        |         ^"]
    assert error_lines(error, verbose=True)[-4:] == error_lines(error, verbose=False)
    problems = "\n".join(f"  p{i}" for i in range(30))
    many = DlaError(NvError.BadValue, f"30 problem(s) in the spec:\n{problems}")
    shown = error_lines(many, verbose=False)
    assert shown[0] == "pydla: error: 30 problem(s) in the spec [BadValue]"
    assert shown[1:21] == [f"  p{i}" for i in range(20)]
    assert shown[21:] == ["  ... 10 more line(s) (-v shows them all)"]
    assert error_lines(many, verbose=True)[-30:] == [f"  p{i}" for i in range(30)]
    # one line stays one line
    assert error_lines(DlaError(NvError.BadValue, "one\x1b[2J"), verbose=False) == [
        "pydla: error: one\\x1b[2J [BadValue]"]


# -- the compiler's refusals through the command line ----------------------------------------------


def _save(tmp_path: Path, m: onnx.ModelProto, name: str = "m.onnx") -> str:
    path = tmp_path / name
    onnx.save(m, str(path))
    return str(path)


def _relu(**kw: Any) -> onnx.ModelProto:
    return model([helper.make_node("Relu", ["x"], ["y"])], {"x": (1, 3, 4, 4)}, ["y"], **kw)


def _duplicate() -> onnx.ModelProto:
    return model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Sigmoid", ["x"], ["y"])],
                 {"x": (1, 3, 4, 4)}, ["y"])


def _ir(version: int) -> onnx.ModelProto:
    m = _relu()
    m.ir_version = version
    return m


@pytest.mark.parametrize("build,fragment", [
    (_duplicate, "tensor 'y' is defined twice"),
    (lambda: _relu(opset=9999), "ONNX opset 9999: the newest opset"),
    (lambda: _ir(0), "ir_version 0: the model does not set its IR version"),
    (lambda: _ir(99), "ir_version 99: newer than this onnx"),
    (lambda: model([helper.make_node("Frob", ["x"], ["y"], name="a\nb\x1b[2J")], {"x": (1, 3)}, ["y"]),
     "node 'a\\nb\\x1b[2J' (Frob): the Frob operator is not supported"),
])
def test_an_invalid_model_is_one_line_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          build: Any, fragment: str) -> None:
    line = _one_line(_err(capsys, ["compile", _save(tmp_path, build())]))
    assert fragment in line


def test_the_list_of_supported_operators_is_cut_and_whole_with_verbose(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, model([helper.make_node("Frob", ["x"], ["y"])], {"x": (1, 3)}, ["y"]))
    line = _one_line(_err(capsys, ["compile", path]))
    assert line.endswith(f"[NotSupported] {VERBOSE_HINT}") and "Xor" not in line
    err = _err(capsys, ["compile", path, "-v"])
    assert "Traceback" in err and "Unsqueeze, Where, Xor) [NotSupported]" in err.splitlines()[-1]


def test_onnx_s_multi_line_report_is_one_line_and_whole_with_verbose(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = model([helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
               helper.make_node("MatMul", ["x", "w"], ["b"], name="mm2"),
               helper.make_node("Add", ["a", "b"], ["y"])],
              {"x": (2, 3)}, ["y"], inits={"w": np.ones((4, 5), np.float32)})
    path = _save(tmp_path, m)
    line = _one_line(_err(capsys, ["compile", path]))
    assert line.startswith("pydla: error: ONNX shape inference failed: [ShapeInferenceError]")
    assert "node name: mm2" not in line and line.endswith(VERBOSE_HINT)
    err = _err(capsys, ["compile", path, "-v"])
    assert "(op_type:MatMul, node name: mm2)" in err and "Traceback" in err


def test_a_custom_domain_operator_is_named_on_the_command_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    m = model([helper.make_node("MyOp", ["x"], ["y"], name="mine", domain="com.me")], {"x": (1, 3)}, ["y"])
    m.opset_import.append(helper.make_opsetid("com.me", 1))
    line = _one_line(_err(capsys, ["compile", _save(tmp_path, m)]))
    assert "No opset import" not in line
    assert "node 'mine' (com.me MyOp): operator 'MyOp' of domain 'com.me' is not one pydla knows" in line


def test_config_small_names_the_node_and_the_configuration_that_takes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = model([helper.make_node("Transpose", ["x"], ["t"], name="to_nhwc", perm=[0, 2, 3, 1]),
               helper.make_node("Relu", ["t"], ["y"])], {"x": (1, 3, 4, 4)}, ["y"])
    path = _save(tmp_path, m)
    line = _one_line(_err(capsys, ["compile", path, "--config", "small"]))
    assert line == ("pydla: error: node 'to_nhwc' (Transpose): pydla computes it with the RUBIK block, which "
                    "device config 'small' does not have (its blocks: CONV, SDP, PDP, CDP); compile for "
                    "device config 'full' or 'full-headed', which have it (--config full) [NotSupported]")
    assert main(["compile", path, "--config", "full", "--quiet"]) == 0


# -- files that are no model: one wording for every command ----------------------------------------


@pytest.mark.parametrize("content,fragment", [
    (b"", "the file is empty (0 bytes), not an ONNX model or a loadable"),
    (DEMO.read_bytes()[:3000],
     "not an ONNX model or a loadable, or a truncated one: it does not parse as ONNX ("),
])
def test_run_compile_info_and_validate_word_a_bad_onnx_file_alike(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, content: bytes,
        fragment: str) -> None:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    lines = {command: _one_line(_err(capsys, [command, str(path)]))
             for command in ("compile", "run", "info", "validate")}
    assert len(set(lines.values())) == 1, lines
    assert lines["run"].startswith(f"pydla: error: {path}: {fragment}")
    # named otherwise, the content still decides
    other = tmp_path / "model.bin"
    other.write_bytes(content)
    assert fragment in _one_line(_err(capsys, ["info", str(other)]))


def test_info_of_a_whole_onnx_model_says_to_compile_it(capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line(_err(capsys, ["info", str(DEMO)]))
    assert f"{DEMO} is an ONNX model, not a loadable: compile it with" in line


def test_a_truncated_onnx_model_is_not_taken_for_one_by_info(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(DEMO.read_bytes()[:len(DEMO.read_bytes()) // 2])
    for argv in (["info", str(path)], ["info", str(path), "--list-sections"], ["validate", str(path)]):
        line = _one_line(_err(capsys, argv))
        assert "compile it first" not in line and "does not parse as ONNX" in line


def test_the_library_raises_the_same_wording(tmp_path: Path) -> None:
    import pydla
    from pydla.compiler.api import compile_model

    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    messages = []
    for call in (lambda: compile_model(path), lambda: pydla.Session(path)):
        with pytest.raises(DlaError) as info:
            call()
        messages.append(info.value.message)
    assert messages[0] == messages[1]
    assert messages[0] == f"{path}: the file is empty (0 bytes), not an ONNX model or a loadable"


def test_a_signalling_nan_among_the_weights_prints_no_numpy_warning(recwarn: pytest.WarningsRecorder) -> None:
    from pydla.compiler.api import compile_model

    weights = np.ones((4, 3, 1, 1), np.float32)
    weights.view(np.uint32)[0, 0, 0, 0] = 0x7FA00000  # a signalling NaN, as a corrupt file may hold
    m = model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": (1, 3, 4, 4)}, ["y"], inits={"w": weights})
    assert compile_model(m).operations
    warned = [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert not warned, warned
