"""The standard targets of :mod:`pydla.testing.fuzz` over pydla's own readers: the loadable (loaded
and run against the original's outputs), its control-code ELFs and run recipe, a kernel ELF, every
device-API message, the trace ring, a device configuration, and the KMD daemon's ioctl handler.

Usage::

    target = loadable_target(blob)           # a pydla.testing.fuzz Target
    report = run_campaign([target], cases=1000)
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.testing.fuzz import SilentDifference, Target


def loadable_target(blob: bytes) -> Target:
    """A loadable is parsed; when that passes it is loaded and run in-process, and its outputs must
    equal the original's bit for bit."""
    from pydla.loadable.container import Loadable
    from pydla.session import Session

    with Session(blob) as sess:
        rng = np.random.default_rng(0)
        feeds = {t.name: sample(rng, t.sizes, t.dtype) for t in sess.inputs}
        expected = sess.run(feeds)

    def check(data: bytes) -> None:
        Loadable(data)  # cheap: most corruptions end here
        with Session(data) as s:
            got = s.run(feeds)
        for name, want in expected.items():
            value = got.get(name)
            if value is None or value.shape != want.shape or value.dtype != want.dtype \
                    or value.tobytes() != want.tobytes():
                raise SilentDifference(f"output {name!r} differs from the original loadable's")

    return Target("loadable", [blob], check, elf=True)


def sample(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    if np.dtype(dtype).kind in "iub":
        return rng.integers(0, 2 if np.dtype(dtype).kind == "b" else 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def control_code_target(blob: bytes) -> Target:
    from pydla.elf.controlcode import ControlCode
    from pydla.elf.reader import ElfReader
    from pydla.loadable.container import CTRL

    elf = ElfReader(blob)
    seeds = [bytes(elf.section(n)) for n in elf.section_names if n.startswith(CTRL)]
    return Target("control-code", seeds, lambda data: _touch(ControlCode(data)), elf=True)


def _touch(obj: Any) -> None:
    """Read what a consumer would read of a parsed object (lazy readers fail late)."""
    for name in ("patches", "arguments", "sections"):
        getattr(obj, name, None)


def recipe_target(blob: bytes) -> Target:
    from pydla.elf.reader import ElfReader
    from pydla.loadable.container import RECIPE
    from pydla.loadable.recipe import loads, parse_recipe

    seed = bytes(ElfReader(blob).section(RECIPE))
    return Target("recipe", [seed], lambda data: _touch(parse_recipe(loads(data, "recipe"))), json=True)


def kernel_elf_target() -> Target:
    from pydla.elf.kernel import KernelElf
    from pydla.elf.writer import STT_FUNC, ElfWriter

    w = ElfWriter()
    w.add_section(".text", bytes(range(64)), align=4)
    w.add_section(".rodata", b"\x01\x02\x03\x04" * 8, align=4)
    w.add_symbol("entry", ".text", value=0, size=64, sym_type=STT_FUNC)
    return Target("kernel-elf", [w.build()], lambda data: _touch(KernelElf(data)), elf=True)


def device_api_target() -> Target:
    from pydla.deviceapi.generated import device_api
    from pydla.deviceapi.runtime import decode

    seeds = [bytes(cls.new()) for cls in device_api.API.messages.values()]

    def check(data: bytes) -> None:
        msg = decode(device_api.API, bytearray(data))
        msg.to_dict()

    return Target("device-api", seeds, check)


def trace_ring_target() -> Target:
    from pydla.deviceapi.generated import trace
    from pydla.deviceapi.trace import TraceRing, read_ring

    ring = TraceRing.create(1024, trace.API)
    for i, cls in enumerate(trace.API.trace_events.values()):
        ring.emit(cls(), timestamp_ns=100 + i)
    seed = bytes(ring.buffer)

    def check(data: bytes) -> None:
        contents = read_ring(bytearray(data), trace.API)
        for event in contents.events:
            str(event)

    return Target("trace-ring", [seed], check)


def device_config_target() -> Target:
    from importlib import resources

    from pydla.target.config import parse_config

    folder = resources.files("pydla.target").joinpath("configs")
    seeds = [folder.joinpath(f"{n}.json").read_bytes() for n in ("full", "small")]

    def check(data: bytes) -> None:
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise DlaError(NvError.BadValue, f"device config: not JSON: {e}") from None
        parse_config(raw, "fuzzed config")

    return Target("device-config", seeds, check, json=True)


def ioctl_target() -> Target:
    """The KMD daemon's ioctl handler (what a client process sends through its device file), called
    in this process with mutated arguments of every command: its answer is an errno (FuseError), or
    success. An input is the command number (4 bytes) and the argument struct's bytes; the seeds are
    valid calls on a client that holds a buffer, a sync object and a prepared task, named in the
    seeds by marker values that each case replaces with the real handles (a mutated marker is then
    a handle nobody holds). Linux only."""
    import ctypes
    import os

    from pydla.deviceapi.generated import dla_uapi as U
    from pydla.linux.daemon import KmdDaemon
    from pydla.linux.fuse_context import FuseError, RequestContext
    from pydla.uapi.ioctl import COMMANDS
    from pydla.uapi.shm import SharedBuffer

    bo_mark, sync_mark = 0x5A5A0001, 0x5A5A0002
    daemon = KmdDaemon("full", mode="deterministic", max_wait_ms=5)
    state: dict[str, Any] = {}
    shm = SharedBuffer(4096)
    addresses = (U.dla_address_t * 2)()
    fences = (U.dla_fence_t * 1)()
    handshake = U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                                  layout_hash64=U.LAYOUT_HASH64)

    def call(nr: int, args: Any) -> Any:
        _, out = daemon.ioctl(state["client"], RequestContext(1, 0, 2, 0, 0, os.getpid()), COMMANDS[nr],
                              bytes(args))
        return type(args).from_buffer_copy(out)

    def fresh_client() -> None:
        if "client" in state:
            daemon.release(state["client"])
        state["client"] = daemon.open_client(0, os.getpid())
        call(U.dla_ioctl_e.HANDSHAKE, handshake)
        bo = call(U.dla_ioctl_e.BO_CREATE, U.dla_bo_create_t(size=4096, fd=shm.fd)).handle
        sync = call(U.dla_ioctl_e.SYNC_CREATE, U.dla_sync_create_t(initial=0)).sync
        # the memory SUBMIT and PREPARE read through the caller's pid names the real handles
        addresses[0], addresses[1] = U.dla_address_t(handle=bo), U.dla_address_t(handle=bo, offset=64)
        fences[0] = U.dla_fence_t(sync=sync, value=1)
        state["bo"], state["sync"] = bo, sync
        state["marks"] = {bo_mark.to_bytes(4, "little"): bo.to_bytes(4, "little"),
                          sync_mark.to_bytes(4, "little"): sync.to_bytes(4, "little")}
        state["age"] = 0

    fresh_client()
    fence = U.dla_fence_t(sync=sync_mark, value=1)
    calls: list[tuple[int, Any]] = [
        (U.dla_ioctl_e.HANDSHAKE, handshake),
        (U.dla_ioctl_e.GET_PARAM, U.dla_get_param_t(param=int(U.dla_param_e.NUM_DEVICES))),
        (U.dla_ioctl_e.BO_INFO, U.dla_bo_info_t(handle=bo_mark)),
        (U.dla_ioctl_e.BO_DESTROY, U.dla_bo_destroy_t(handle=bo_mark)),
        (U.dla_ioctl_e.SUBMIT, U.dla_submit_t(addresses=ctypes.addressof(addresses), num_addresses=2,
                                              post_fences=ctypes.addressof(fences), num_post_fences=1,
                                              timeout_ms=50)),
        (U.dla_ioctl_e.WAIT, U.dla_wait_t(fence=fence, timeout_ms=1)),
        (U.dla_ioctl_e.SYNC_SIGNAL, U.dla_sync_signal_t(fence=fence)),
        (U.dla_ioctl_e.SYNC_QUERY, U.dla_sync_query_t(sync=sync_mark)),
        (U.dla_ioctl_e.SYNC_DESTROY, U.dla_sync_destroy_t(sync=sync_mark)),
        (U.dla_ioctl_e.PREPARE, U.dla_prepare_t(addresses=ctypes.addressof(addresses), num_addresses=2)),
        (U.dla_ioctl_e.SUBMIT_PREPARED, U.dla_submit_prepared_t(prepared=1, timeout_ms=50)),
        (U.dla_ioctl_e.RELEASE_PREPARED, U.dla_release_prepared_t(prepared=1)),
        (U.dla_ioctl_e.RING_SETUP, U.dla_ring_setup_t()),
    ]
    seeds = [int(nr).to_bytes(4, "little") + bytes(args) for nr, args in calls]

    def check(data: bytes) -> None:
        state["age"] += 1
        if state["age"] >= 100 or not state["client"].compatible:
            fresh_client()  # what mutated calls made or broke goes with the old client
        nr = int.from_bytes(data[:4].ljust(4, b"\0"), "little")
        payload = data[4:]
        for mark, real in state["marks"].items():
            payload = payload.replace(mark, real)
        try:
            daemon.ioctl(state["client"], RequestContext(1, 0, 2, 0, 0, os.getpid()), COMMANDS.get(nr, nr),
                         payload)
        except FuseError as e:  # the daemon's answer: an errno, with the reason in LAST_ERROR
            if nr in (U.dla_ioctl_e.BO_DESTROY, U.dla_ioctl_e.SYNC_DESTROY):
                state["age"] = 100
            raise DlaError(NvError.BadParameter, f"errno {e.errno}: {e.message}") from None
        if nr in (U.dla_ioctl_e.BO_DESTROY, U.dla_ioctl_e.SYNC_DESTROY):
            state["age"] = 100  # the next case starts with a buffer and a sync again

    return Target("ioctl", seeds, check)
