"""Headed mode: the version handshake's verdict, and the names of what the firmware answers.

The host KMD applies the Device API code generation design's mismatch policy
(:func:`pydla.deviceapi.version.check_compatible`: semver and layout hash) to the version the
firmware reports in ``version_query_rsp``, as the host side that keeps backward compatibility: a
newer minor firmware is accepted (it only appended messages and fields), an older one only when it
has what this host needs (:data:`MIN_FIRMWARE`).
"""

from __future__ import annotations

from typing import Any

from pydla.deviceapi.generated import device_api as api
from pydla.deviceapi.version import ContractVersion, check_compatible
from pydla.errors import DlaError, NvError

MIN_FIRMWARE = (1, 1)  # task_submit_list_cmd, task_status_cmd and task_failed_evt came in device_api 1.1
NVDLA_FIRMWARE = (1, 2)  # task_submit_list_cmd's nvdla_task (an NVDLA task's interface version): 1.2


def check_firmware(rsp: Any, status_major: int) -> ContractVersion:
    """The firmware's version from its ``version_query_rsp``; DlaError VersionMismatch naming both
    versions and the side to upgrade when this host cannot talk to it."""
    v = rsp.api
    firmware = ContractVersion(api.NAME, (int(v.major), int(v.minor), int(v.patch)), int(v.layout_hash))
    host = ContractVersion.of(api.API)
    check_compatible(host, firmware, local_role="host KMD", peer_role="device firmware",
                     accept_newer_peer=True)
    if firmware.version[:2] < MIN_FIRMWARE:
        need = ".".join(map(str, MIN_FIRMWARE))
        raise DlaError(NvError.VersionMismatch,
                       f"{api.NAME} version mismatch: the host KMD has {api.NAME} {host.version_string}, "
                       f"the device firmware has {firmware.version_string}, which lacks task_submit_list "
                       "(a task by its address list). The host KMD is newer: upgrade the device firmware "
                       f"to {api.NAME} >= {need}.0")
    if status_major and status_major != firmware.version[0]:
        raise DlaError(NvError.BadValue,
                       f"the device firmware says {api.NAME} {firmware.version_string} but mcu_status "
                       f"says major {status_major}")
    return firmware


def check_nvdla_firmware(have: ContractVersion | None, task_id: int) -> None:
    """An NVDLA task needs a firmware that reads its interface version (device_api 1.2): VersionMismatch
    when the attached firmware (``have``, None before the handshake) is older."""
    if have is not None and have.version[:2] < NVDLA_FIRMWARE:
        need = ".".join(map(str, NVDLA_FIRMWARE))
        raise DlaError(NvError.VersionMismatch,
                       f"task {task_id}: {api.NAME} version mismatch: the host KMD has {api.NAME} "
                       f"{'.'.join(map(str, api.VERSION))}, the device firmware has {have.version_string}, "
                       "which lacks task_submit_list's nvdla_task (an NVDLA task's firmware interface "
                       f"version). The host KMD is newer: upgrade the device firmware to {api.NAME} >= "
                       f"{need}.0")


def nv_error(code: int) -> NvError:
    """An NVDLA error code the firmware sent (one this host does not know: ResourceError)."""
    return NvError(code) if code in NvError._value2member_map_ else NvError.ResourceError


def status_name(status: int) -> str:
    known = api.dla_status_e._value2member_map_.get(status)
    return known.name if known is not None else f"status {status}"
