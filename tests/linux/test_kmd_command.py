"""``pydla kmd`` without the privilege to mount: one line saying root (CAP_SYS_ADMIN) is needed, at
once, before any device is built (not "/dev/fuse cannot be opened: Permission denied")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pydla.cli import main
from pydla.linux import kmd_command


def status(tmp_path: Path, cap_eff: str) -> str:
    path = tmp_path / f"status-{cap_eff}"
    path.write_text(f"Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nCapInh:\t0000000000000000\n"
                    f"CapPrm:\t{cap_eff}\nCapEff:\t{cap_eff}\nCapBnd:\t000001ffffffffff\n")
    return str(path)


def test_may_mount_reads_the_effective_capabilities(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert kmd_command.may_mount(status(tmp_path, "000001ffffffffff"))  # root's
    assert kmd_command.may_mount(status(tmp_path, "0000000000200000"))  # CAP_SYS_ADMIN alone (bit 21)
    assert not kmd_command.may_mount(status(tmp_path, "0000000000000000"))  # a user's
    assert not kmd_command.may_mount(status(tmp_path, "000001ffffdfffff"))  # all but CAP_SYS_ADMIN
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # no /proc: whether the process is root
    assert not kmd_command.may_mount(str(tmp_path / "missing"))


def test_a_user_is_told_root_is_needed_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(kmd_command, "may_mount", lambda: False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(kmd_command, "KmdDaemon", lambda *a, **k: pytest.fail("a daemon was built"))
    assert main(["kmd", "--mount", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"pydla: error: pydla kmd needs root: it mounts {tmp_path} through /dev/fuse")
    assert "uid 1000" in err and "CAP_SYS_ADMIN" in err and "fusermount" in err and "sudo" in err


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv(1) to drop CAP_SYS_ADMIN")
def test_without_cap_sys_admin_as_typed(tmp_path: Path) -> None:
    result = subprocess.run(["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", sys.executable,
                             "-m", "pydla", "kmd", "--mount", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "needs CAP_SYS_ADMIN" in result.stderr, result.stderr
    assert not os.path.ismount(tmp_path)
