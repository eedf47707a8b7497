"""The composition root: the one place that builds virtual devices, their KMDs and the ports.

A :class:`Platform` is what a machine has: the device instances of one configuration, each built with
its KMD (over the in-process KMD port, :class:`~pydla.composition.virtual_port.VirtualDevicePort`)
the first time it is probed. The in-process port and the KMD daemon both get their drivers from one
(they are given it: neither reaches up for it), :func:`open_port` builds the port an application asks
for, and :func:`createRuntime` hands one to the UMD; nothing else builds a device, a driver or a
port.
From there capabilities travel through the interfaces, never as a configuration object: the KMD asks
its port (``dla_get_device_info``), the UMD asks its own (``NvDlaGetDeviceInfo``), answered from the
KMD in-process and through GET_PARAM on Linux.

Usage::

    platform = Platform("full", mode="threaded")
    kmd = platform.probe(0).kmd
    port = open_port("inprocess", "small")
    rt = createRuntime(config="small")          # pydla.createRuntime
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.errors import DlaError, NvError
from pydla.hw.device import VirtualDevice
from pydla.hw.nvdla_device import NvdlaDevice
from pydla.kmd.driver import DEFAULT_TIMEOUT_MS, Kmd
from pydla.kmd.recovery import BAN_AFTER_HANGS, DEFAULT_TDR_MS, check_recovery_args
from pydla.portability.inprocess import InProcessPort
from pydla.portability.interface import NvDlaPort, check_timeout_ms
from pydla.target.config import DeviceConfig, load_config

if TYPE_CHECKING:
    from pydla.umd.runtime import IRuntime

ConfigLike: TypeAlias = DeviceConfig | str | Path  # a configuration, a bundled one's name, or a file
PORTS = ("inprocess", "linux")


@dataclass(frozen=True)
class Probed:
    """A device instance and the driver bound to it."""

    device: VirtualDevice | NvdlaDevice
    kmd: Kmd

    def close(self) -> None:
        """The driver first (it aborts its jobs), then the device."""
        self.kmd.close()
        self.device.close()


def probe(config: ConfigLike = "full", *, instance: int = 0, mode: str = "deterministic",
          default_timeout_ms: int = DEFAULT_TIMEOUT_MS, tdr_ms: int = DEFAULT_TDR_MS) -> Probed:
    """Build device ``instance`` of ``config`` running in ``mode``, and bind a KMD to it (whose hang
    timeout is ``tdr_ms``: see :mod:`pydla.kmd.recovery`).

    Usage: ``probed = probe("small", mode="step"); probed.kmd.open_context()``
    """
    cfg = load_config(config)  # an NVDLA configuration's device implements NVDLA's register map
    device = VirtualDevice(cfg, instance=instance, mode=mode) if cfg.nvdla is None else \
        NvdlaDevice(cfg, instance=instance, mode=mode)
    try:
        kmd = Kmd(VirtualDevicePort(device), default_timeout_ms=default_timeout_ms, tdr_ms=tdr_ms)
    except BaseException:
        device.close()
        raise
    return Probed(device, kmd)


class Platform:
    """The device instances of one configuration, each probed (built with its KMD) on first use.
    Thread-safe; :meth:`close` closes what was probed."""

    def __init__(self, config: ConfigLike = "full", *, mode: str = "deterministic",
                 default_timeout_ms: int = DEFAULT_TIMEOUT_MS, tdr_ms: int = DEFAULT_TDR_MS) -> None:
        check_recovery_args(tdr_ms, BAN_AFTER_HANGS)  # at once, not at the first probe
        self._config = load_config(config)
        self.mode = mode
        self.default_timeout_ms = default_timeout_ms
        self.tdr_ms = tdr_ms
        self._lock = threading.Lock()
        self._probed: dict[int, Probed] = {}
        self._closed = False

    @property
    def name(self) -> str:
        """The configuration's name (for messages)."""
        return self._config.name

    @property
    def instances(self) -> int:
        """Device instances the machine has."""
        return self._config.instances

    def probe(self, instance: int) -> Probed:
        """Device ``instance`` and its KMD, built the first time."""
        with self._lock:
            if self._closed:
                raise DlaError(NvError.InvalidState, "the platform was closed")
            probed = self._probed.get(instance)
            if probed is None:
                probed = self._probed[instance] = probe(self._config, instance=instance, mode=self.mode,
                                                        default_timeout_ms=self.default_timeout_ms,
                                                        tdr_ms=self.tdr_ms)
            return probed

    def probe_all(self) -> list[Probed]:
        """Every instance, in order."""
        return [self.probe(i) for i in range(self.instances)]

    @property
    def probed(self) -> list[Probed]:
        """The instances built so far."""
        with self._lock:
            return list(self._probed.values())

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            probed = list(self._probed.values())
        for p in probed:
            p.close()


def open_port(spec: str | None = None, config: ConfigLike = "full", *,
              path: str | os.PathLike[str] | None = None, mode: str = "deterministic",
              timeout_ms: int = 10_000) -> NvDlaPort:
    """A new port from its name: ``inprocess``, ``linux`` (with ``path``) or ``linux:PATH``; None
    means ``$PYDLA_PORT``, else ``inprocess``. PATH is the KMD daemon's mount directory (or a device
    file in it). ``config`` and ``mode`` are those of the in-process port's devices (the daemon has
    its own).

    Usage: ``port = open_port("linux:/run/pydla")``
    """
    named = "port" if spec is not None else "$PYDLA_PORT"  # what messages call it: what the user set
    spec = spec if spec is not None else os.environ.get("PYDLA_PORT", "inprocess")
    check_port_spec(spec, named)
    name, _, rest = spec.partition(":")
    if name == "inprocess" and not rest:
        # The port's own devices: closed with it.
        return InProcessPort(Platform(config, mode=mode, default_timeout_ms=timeout_ms), owns_platform=True)
    if name == "linux":
        where = rest or (os.fspath(path) if path is not None else "")
        if not where:
            raise DlaError(NvError.BadParameter, "port 'linux' needs the daemon's mount directory: "
                                                 "createRuntime(port='linux', path='/run/pydla') or "
                                                 "PYDLA_PORT=linux:/run/pydla")
        if not sys.platform.startswith("linux"):
            raise DlaError(NvError.NotSupported, f"port 'linux' on {sys.platform}")
        from pydla.portability.linux import LinuxPort

        return LinuxPort(where)
    raise AssertionError(spec)  # check_port_spec let through only the names above


def check_port_spec(spec: str, named: str = "port") -> None:
    """That ``spec`` names a port :func:`open_port` opens, before anything is built; else NotSupported
    naming it as the user set it (``named``: "port", "--port", "$PYDLA_PORT").

    Usage: ``check_port_spec(args.port, "--port")``
    """
    name, _, rest = spec.partition(":")
    if not ((name == "inprocess" and not rest) or name == "linux"):
        raise DlaError(NvError.NotSupported, f"{named} '{spec}': available: {', '.join(PORTS)} (linux:PATH)")


def createRuntime(port: str | NvDlaPort | None = None, config: ConfigLike = "full",
                  device: int = 0, *, mode: str = "deterministic", timeout_ms: int = 10_000,
                  path: str | os.PathLike[str] | None = None) -> IRuntime:
    """The NVDLA runtime API's createRuntime: an :class:`~pydla.umd.runtime.IRuntime` on one device
    instance. The port is built here (the composition root) and handed to the runtime.

    Usage: ``rt = pydla.createRuntime(config="small")``; ``pydla.createRuntime("linux", path="/run/pydla")``

    Parameters:
        port: the portability layer: "inprocess" (driver and virtual device in this process),
            "linux" (with ``path``) or "linux:PATH" for the KMD daemon, None for ``$PYDLA_PORT``
            else in-process (see :func:`open_port`); or a port object
            (:class:`~pydla.portability.interface.NvDlaPort`), which the runtime uses and does not close.
        config: the in-process devices' configuration: "full" (2 instances), "small", a JSON file,
            or a configuration object; a daemon has its own.
        device: the device instance, 0..getMaxDevices()-1.
        mode: how in-process devices run: "deterministic" (in the caller's thread, reproducible
            to the register write), "threaded" (beside the host, as hardware runs) or "step"
            (driver development: the device advances when stepped).
        timeout_ms: how long submit() and close() wait for a run (a sync's wait takes its own).
        path: the KMD daemon's directory for ``port="linux"``.
    """
    from pydla.umd.runtime import IRuntime  # on first use: the KMD daemon composes no runtime

    timeout_ms = check_timeout_ms(timeout_ms, "createRuntime: timeout_ms")
    if port is not None and not isinstance(port, str):
        return IRuntime(port, device, timeout_ms=timeout_ms)
    opened = open_port(port, config, path=path, mode=mode, timeout_ms=timeout_ms)
    try:
        return IRuntime(opened, device, owns_port=True, timeout_ms=timeout_ms)
    except BaseException:
        close = getattr(opened, "close", None)
        if callable(close):
            close()
        raise
