"""Semver parsing and the compatibility check used wherever two sides of a contract meet."""

from __future__ import annotations

import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.version import Compatibility, ContractVersion, check_compatible, parse_semver

HASH = 0x0123456789ABCDEF
OTHER_HASH = 0xFEDCBA9876543210


def _v(version: tuple[int, int, int], layout_hash: int = HASH, name: str = "device_api") -> ContractVersion:
    return ContractVersion(name, version, layout_hash)


def _check(local: ContractVersion, peer: ContractVersion, **kwargs: bool) -> Compatibility:
    return check_compatible(local, peer, local_role="host", peer_role="device", **kwargs)


def _mismatch(local: ContractVersion, peer: ContractVersion) -> str:
    with pytest.raises(DlaError) as info:
        _check(local, peer)
    assert info.value.code == NvError.VersionMismatch
    return str(info.value)


# -- parse_semver -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("0.0.0", (0, 0, 0)),
    ("1.2.3", (1, 2, 3)),
    ("10.20.30", (10, 20, 30)),
    ("65535.0.1", (65535, 0, 1)),
])
def test_parse_semver_accepts_major_minor_patch(text: str, expected: tuple[int, int, int]) -> None:
    assert parse_semver(text) == expected


@pytest.mark.parametrize("text", [
    "", "1", "1.2", "1.2.3.4", "01.2.3", "1.02.3", "1.2.03", "v1.2.3", "1.2.x", "-1.2.3",
    "1.2.3-rc1", "1.2.3+build", " 1.2.3", "1.2.3 ", "1..3", "1.2.3\n",
])
def test_parse_semver_rejects_anything_else(text: str) -> None:
    with pytest.raises(DlaError) as info:
        parse_semver(text)
    assert info.value.code == NvError.BadValue
    assert "MAJOR.MINOR.PATCH" in str(info.value)


# -- check_compatible -------------------------------------------------------------------------------


def test_identical_versions() -> None:
    assert _check(_v((1, 2, 3)), _v((1, 2, 3))) is Compatibility.IDENTICAL


def test_contract_version_of_api_and_str() -> None:
    from pydla.deviceapi.generated import trace

    cv = ContractVersion.of(trace.API)
    assert cv == ContractVersion("trace", trace.VERSION, trace.LAYOUT_HASH64)
    assert cv.version_string == ".".join(map(str, trace.VERSION))
    assert f"{trace.LAYOUT_HASH64:016x}" in str(cv)
    assert _check(cv, cv) is Compatibility.IDENTICAL


def test_peer_with_older_minor_is_accepted() -> None:
    assert _check(_v((1, 3, 0)), _v((1, 1, 4), OTHER_HASH)) is Compatibility.PEER_OLDER


def test_peer_with_older_patch_is_accepted() -> None:
    assert _check(_v((1, 3, 2)), _v((1, 3, 0))) is Compatibility.PEER_OLDER


def test_peer_with_newer_minor_is_an_error_naming_both_and_what_to_upgrade() -> None:
    text = _mismatch(_v((1, 1, 0)), _v((1, 2, 0), OTHER_HASH))
    assert "1.1.0" in text
    assert "1.2.0" in text
    assert "host" in text
    assert "device" in text
    assert "the device is newer" in text.lower()
    assert "upgrade the host" in text.lower()


def test_peer_with_newer_minor_is_accepted_when_asked() -> None:
    result = _check(_v((1, 1, 0)), _v((1, 2, 0), OTHER_HASH), accept_newer_peer=True)
    assert result is Compatibility.PEER_NEWER


@pytest.mark.parametrize(("local", "peer", "newer", "older"), [
    ((2, 0, 0), (1, 3, 1), "host", "device"),
    ((1, 3, 1), (2, 0, 0), "device", "host"),
])
def test_major_mismatch_names_both_versions_the_newer_side_and_what_to_upgrade(
        local: tuple[int, int, int], peer: tuple[int, int, int], newer: str, older: str) -> None:
    for accept in (False, True):
        with pytest.raises(DlaError) as info:
            _check(_v(local), _v(peer, OTHER_HASH), accept_newer_peer=accept)
        assert info.value.code == NvError.VersionMismatch
        text = str(info.value)
        assert "2.0.0" in text
        assert "1.3.1" in text
        assert "major" in text
        assert f"the {newer} is newer" in text.lower()
        assert f"upgrade the {older}" in text.lower()


def test_same_version_different_layout_hash_is_an_error() -> None:
    text = _mismatch(_v((1, 2, 3)), _v((1, 2, 3), OTHER_HASH))
    assert "1.2.3" in text
    assert "without a" in text
    assert f"{HASH:016x}" in text
    assert f"{OTHER_HASH:016x}" in text
    assert "host" in text
    assert "device" in text


def test_different_contract_names_are_an_error() -> None:
    text = _mismatch(_v((1, 0, 0)), _v((1, 0, 0), name="trace"))
    assert "device_api" in text
    assert "trace" in text
    assert "host" in text
    assert "device" in text
