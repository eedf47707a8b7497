"""Versions of binary contracts, and the check used wherever two sides meet.

The policy (the device API's "Handling Mismatching API Versions", made concrete):

- a different contract name, or a different major version: an error that names both versions, says
  which side is newer and what to upgrade;
- the same version but a different layout hash: an error, because the layout changed without a
  version bump (the same goes for a patch-only difference: patches may not change the layout);
- the peer has an older minor or patch version: accepted (this side keeps backward compatibility);
- the same major and minor and the same layout hash, a different patch: accepted either way;
- the peer has a newer minor version: accepted only when the caller says it can ignore what it does
  not know (``accept_newer_peer``), otherwise an error saying to upgrade this side.

Usage::

    check_compatible(ContractVersion.of(api.API), peer, local_role="host", peer_role="device")
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Protocol

from pydla.errors import DlaError, NvError

_SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")


def parse_semver(text: str) -> tuple[int, int, int]:
    """``"1.2.3"`` -> ``(1, 2, 3)``; anything else is a DlaError."""
    m = _SEMVER.fullmatch(text)
    if m is None:
        raise DlaError(NvError.BadValue, f"version '{text}' is not MAJOR.MINOR.PATCH")
    return int(m[1]), int(m[2]), int(m[3])


class _HasVersion(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> tuple[int, int, int]: ...
    @property
    def layout_hash64(self) -> int: ...


@dataclass(frozen=True)
class ContractVersion:
    """What one side says about a contract: its name, semver and 64-bit layout hash."""

    name: str
    version: tuple[int, int, int]
    layout_hash64: int

    @classmethod
    def of(cls, api: _HasVersion) -> ContractVersion:
        """From a generated module's ``API`` or a loaded :class:`~pydla.deviceapi.model.Spec`."""
        return cls(api.name, tuple(api.version), api.layout_hash64)  # type: ignore[arg-type]

    @property
    def version_string(self) -> str:
        return ".".join(map(str, self.version))

    def __str__(self) -> str:
        return f"{self.name} {self.version_string} (layout {self.layout_hash64:016x})"


class Compatibility(enum.Enum):
    IDENTICAL = "identical"
    PEER_OLDER = "peer older"
    PEER_NEWER = "peer newer"


def check_compatible(
    local: ContractVersion,
    peer: ContractVersion,
    *,
    local_role: str = "local side",
    peer_role: str = "peer",
    accept_newer_peer: bool = False,
) -> Compatibility:
    """Raise DlaError(VersionMismatch) unless ``local`` can talk to ``peer``; say how they relate."""
    if local.name != peer.name:
        raise DlaError(NvError.VersionMismatch,
                       f"contract mismatch: the {local_role} speaks {local.name}, "
                       f"the {peer_role} speaks {peer.name}")
    lv, pv, name = local.version, peer.version, local.name
    both = (f"the {local_role} has {name} {local.version_string}, "
            f"the {peer_role} has {peer.version_string}")
    if lv[0] != pv[0]:
        newer, older = (local_role, peer_role) if lv[0] > pv[0] else (peer_role, local_role)
        target = max(lv, pv)
        raise DlaError(NvError.VersionMismatch,
                       f"{name} major version mismatch: {both}. The {newer} is newer: "
                       f"upgrade the {older} to {name} {target[0]}.x (>= {'.'.join(map(str, target))}), "
                       f"or use a {newer} built for {name} {min(lv, pv)[0]}.x")
    if lv[:2] == pv[:2]:
        if local.layout_hash64 != peer.layout_hash64:
            raise DlaError(NvError.VersionMismatch,
                           f"{name} layout mismatch: {both}, but the layout hashes differ "
                           f"({local.layout_hash64:016x} vs {peer.layout_hash64:016x}): the layout "
                           "changed without a minor or major version bump. Rebuild both sides "
                           "from the same spec; `pydla deviceapi diff` tells the bump required")
        # Same major.minor and layout: a patch difference changes no byte on the wire.
        if lv == pv:
            return Compatibility.IDENTICAL
        return Compatibility.PEER_OLDER if pv < lv else Compatibility.PEER_NEWER
    if pv < lv:
        return Compatibility.PEER_OLDER
    if not accept_newer_peer:
        raise DlaError(NvError.VersionMismatch,
                       f"{name} version mismatch: {both}. The {peer_role} is newer: "
                       f"upgrade the {local_role} to {name} >= {peer.version_string}")
    return Compatibility.PEER_NEWER
