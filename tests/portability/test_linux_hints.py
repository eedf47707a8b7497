"""The Linux port's errors name the directory the user gave and what to run about it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pydla import DlaError, NvError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux port")


@pytest.mark.parametrize(("given", "directory", "opened"), [
    ("missing", "missing", "missing/dla0"),         # a directory that does not exist (yet)
    ("served", "served", "served/dla0"),            # an empty directory: no daemon serves it
    ("served/dla0", "served", "served/dla0"),       # a device file in it
    ("gone/dla1", "gone", "gone/dla1"),
])
def test_a_missing_daemon_is_named_by_its_directory(tmp_path: Path, given: str, directory: str,
                                                    opened: str) -> None:
    from pydla.portability.linux import LinuxPort

    (tmp_path / "served").mkdir()
    with pytest.raises(DlaError) as e:
        LinuxPort(tmp_path / given)
    assert e.value.code == NvError.DeviceNotFound
    assert f"{tmp_path / opened}: No such file or directory" in e.value.message
    assert f"`pydla kmd --mount {tmp_path / directory}` running?" in e.value.message
    assert "`pydla devices` lists the daemons" in e.value.message
