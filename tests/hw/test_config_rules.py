"""The speed rules of a device configuration: optional fields with the documented defaults, checked
like every other field."""

from __future__ import annotations

from typing import Any

import pytest

from pydla import DlaError, NvError
from pydla.target.config import SHIFT_MAX_EXTRA, SHIFT_MIN_CHANNELS, load_config, parse_config
from tests.hw.regs import raw_config


def test_bundled_configs_declare_the_defaults() -> None:
    for name in ("full", "small"):
        cfg = load_config(name)
        assert (cfg.tap_major_min_channels, cfg.tap_major_max_extra) == (SHIFT_MIN_CHANNELS, SHIFT_MAX_EXTRA)


def test_rules_are_optional_and_default_to_the_constants() -> None:
    cfg = parse_config(raw_config())
    assert (cfg.tap_major_min_channels, cfg.tap_major_max_extra) == (SHIFT_MIN_CHANNELS, SHIFT_MAX_EXTRA)
    cfg = parse_config(raw_config(tap_major_min_channels=4, tap_major_max_extra=1))
    assert (cfg.tap_major_min_channels, cfg.tap_major_max_extra) == (4, 1.0)
    assert isinstance(cfg.tap_major_max_extra, float)


def test_tap_major_pays_counts_the_extra_columns() -> None:
    cfg = load_config("full")
    assert cfg.tap_major_pays(3, 1, 1, 14) and cfg.tap_major_pays(3, 1, 2, 7)  # 2/14, 1/7
    assert not cfg.tap_major_pays(3, 1, 1, 7) and not cfg.tap_major_pays(3, 1, 2, 6)  # 2/7, 1/6
    assert cfg.tap_major_pays(3, 2, 1, 28) and not cfg.tap_major_pays(3, 2, 1, 14)  # dilation 2: 4
    loose = parse_config(raw_config(tap_major_max_extra=0.5))
    assert loose.tap_major_pays(3, 1, 1, 7) and not loose.tap_major_pays(3, 1, 1, 3)


@pytest.mark.parametrize("field, value, words", [
    ("tap_major_min_channels", 0, ["tap_major_min_channels", ">= 1"]),
    ("tap_major_min_channels", 1.5, ["tap_major_min_channels", "int"]),
    ("tap_major_min_channels", True, ["tap_major_min_channels", "int"]),
    ("tap_major_min_channels", None, ["tap_major_min_channels", "int"]),
    ("tap_major_max_extra", -0.1, ["tap_major_max_extra", ">= 0"]),
    ("tap_major_max_extra", float("inf"), ["tap_major_max_extra", "finite"]),
    ("tap_major_max_extra", float("nan"), ["tap_major_max_extra", "finite"]),
    ("tap_major_max_extra", "0.15", ["tap_major_max_extra", "float"]),
])
def test_bad_rules_are_refused_naming_the_field(field: str, value: Any, words: list[str]) -> None:
    with pytest.raises(DlaError) as e:
        parse_config(raw_config(**{field: value}), "test config")
    assert e.value.code == NvError.BadValue
    for word in [*words, "test config"]:
        assert word in str(e.value), (word, str(e.value))


@pytest.mark.parametrize(("content", "code", "words"), [
    (b"[" * 5000 + b"]" * 5000, NvError.BadValue, "nested too deep"),
    (b'{"name": "\xff"}', NvError.BadValue, "not UTF-8"),
    (b'{"name": ', NvError.BadValue, "not valid JSON"),
])
def test_a_bad_config_file_is_a_dla_error(tmp_path: Any, content: bytes, code: NvError, words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(DlaError, match=words) as e:
        load_config(path)
    assert e.value.code == code and str(path) in str(e.value)
