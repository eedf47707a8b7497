"""Device configurations: data (JSON files in ``configs/``), not code; the description of a device
that the compiler, the loadable tools, the KMD and the virtual device all read.

A configuration says which functional blocks a device has, which precisions, how many device
instances a system has (what ``getMaxDevices()`` reports), the sizes of its memory and address
spaces, and the speed rules a compiler follows for it (optional fields, defaults below).
``load_config("full")`` loads a bundled one; a path loads a file of the same form.

Usage: ``cfg = load_config("small"); cfg.has_block("RUBIK")  # False``
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.generated.dla_regs import dla_precision_e
from pydla.errors import DlaError, NvError
from pydla.target.ip_layout import ComputeUnitInfo, parse_ip_layout
from pydla.target.nvdla_hw import NvdlaHwConfig, parse_nvdla
from pydla.target.shave import ShaveConfig, parse_shave
from pydla.target.xclbin_json import is_xclbin_form, keep_repeated_keys, xclbin_entries

_FIELDS: dict[str, type] = {
    "name": str,
    "description": str,
    "instances": int,
    "hw_version": int,
    "blocks": list,
    "precisions": list,
    "memory_bytes": int,
    "contexts": int,
    "iova_base": int,
    "iova_size": int,
}
PAGE = 4096
# What one operation may do, on every configuration: the device refuses more (BAD_CONFIG) and the
# KMD refuses it before any register is written, so that no job outlives its timeout or allocation.
MAX_BYTES_PER_OP = 1 << 30
# CONV runs a convolution with tap-major (RSKC) weights as one matrix product per kernel tap when it
# has at least this many input channels (fewer make products too thin); compilers choose RSKC then.
# The default of the configuration's "tap_major_min_channels" (the virtual device's CONV uses it).
SHIFT_MIN_CHANNELS = 16
# ... and for lines wide enough: each tap's product also computes (kernel width - 1) * dilation //
# stride extra columns per output line, at most this fraction of the line (measured with OpenBLAS's
# SkylakeX kernels, 3x3: stride 1, 512x7x7 1.19 ms tap-major against 1.09 ms im2col, 256x14x14 0.74
# against 1.01; stride 2, 256x14x14 to 7x7 0.55 against 0.62). The default of the configuration's
# "tap_major_max_extra".
SHIFT_MAX_EXTRA = 0.15
# Optional fields: name -> (types, default). A compiler reads them from the configuration it
# compiles for (DeviceConfig.tap_major_min_channels, DeviceConfig.tap_major_pays).
_OPTIONAL: dict[str, tuple[tuple[type, ...], Any]] = {
    "tap_major_min_channels": ((int,), SHIFT_MIN_CHANNELS),
    "tap_major_max_extra": ((int, float), SHIFT_MAX_EXTRA),
    # Compute units (pydla.target.ip_layout): XRT's IP_LAYOUT, and the clock their latencies count in.
    # A list of entries, or xclbinutil's dump (pydla.target.xclbin_json) with cu_models saying
    # which model computes each unit (by m_name or kernel name).
    "ip_layout": ((list, dict), []),
    "cu_models": ((dict,), {}),
    "clock_mhz": ((int, float), 1000),
    # SHAVE tiles (pydla.target.shave): none unless the configuration has the field.
    "shave": ((dict, type(None)), None),
    # One of NVDLA's hardware configurations (pydla.target.nvdla_hw): NVDLA's register map and C model.
    "nvdla": ((dict, type(None)), None),
    # The engine: {"command_processor": true} gives the device a command processor (GLB cp_*: the
    # driver submits a prepared job as one command, pydla.hw.cmdproc); false or absent keeps the
    # per-operation path. Never on an NVDLA configuration (faithful to NVDLA).
    "engine": ((dict,), {}),
}
MAX_KERNEL = 1024
MAX_STRIDE = 64


@dataclass(frozen=True)
class DeviceConfig:
    name: str
    description: str
    instances: int
    hw_version: int
    blocks: tuple[dla_block_e, ...]
    precisions: tuple[dla_precision_e, ...]
    memory_bytes: int
    contexts: int
    iova_base: int
    iova_size: int
    # Speed rules for compilers (see SHIFT_MIN_CHANNELS and SHIFT_MAX_EXTRA).
    tap_major_min_channels: int = SHIFT_MIN_CHANNELS
    tap_major_max_extra: float = SHIFT_MAX_EXTRA
    ip_layout: tuple[ComputeUnitInfo, ...] = ()
    clock_mhz: float = 1000.0
    shave: ShaveConfig | None = None
    # A microcontroller beside the blocks runs the engine scheduler (headed mode, pydla.hw.mcu): the
    # host reaches it through the device-API mailbox.
    headed: bool = False
    # One of NVDLA's hardware configurations (nv_full, nv_small, ...): its device implements NVDLA's
    # register map (pydla.hw.nvdla_device), not pydla's own; None for pydla's own configurations.
    nvdla: NvdlaHwConfig | None = None
    # The device has a command processor ("engine": {"command_processor": true}; pydla.hw.cmdproc).
    command_processor: bool = False

    @property
    def precision_names(self) -> tuple[str, ...]:
        """The precisions the device computes, by name: NVDLA's (INT8, INT16, FP16) on an NVDLA
        configuration, else pydla's own (FP32, FP16)."""
        if self.nvdla is not None:
            return self.nvdla.precisions
        return tuple(p.name for p in self.precisions)

    def compute_unit(self, name: str) -> ComputeUnitInfo | None:
        """The IP_LAYOUT entry named ``name`` ("kernel:instance" or the instance alone)."""
        return next((cu for cu in self.ip_layout if name in (cu.name, cu.instance)), None)

    # What one operation may do (the architecture's limits, the same on every configuration): the
    # KMD reads them through its device information, not as constants of this module.
    @property
    def max_bytes_per_op(self) -> int:
        return MAX_BYTES_PER_OP

    @property
    def max_kernel(self) -> int:
        return MAX_KERNEL

    @property
    def max_stride(self) -> int:
        return MAX_STRIDE

    def tap_major_pays(self, kernel_w: int, dilation_w: int, stride_w: int, out_w: int) -> bool:
        """Whether the extra columns of a tap-major convolution are few enough: at most
        ``tap_major_max_extra`` of an output line of ``out_w``."""
        return (kernel_w - 1) * dilation_w // stride_w <= self.tap_major_max_extra * out_w

    def has_block(self, block: dla_block_e | str) -> bool:
        if isinstance(block, str):
            return block.upper() in (b.name for b in self.blocks)
        return block in self.blocks

    @property
    def block_mask(self) -> int:
        return sum(1 << int(b) for b in self.blocks)


def bundled_configs() -> list[str]:
    folder = resources.files("pydla.target").joinpath("configs")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_config(name_or_path: str | Path | DeviceConfig = "full") -> DeviceConfig:
    """A bundled configuration by name (``full``, ``small``), or one from a JSON file."""
    if isinstance(name_or_path, DeviceConfig):
        return name_or_path
    text_name = str(name_or_path)
    if text_name in bundled_configs():
        source = f"bundled config '{text_name}'"
        text = resources.files("pydla.target").joinpath(f"configs/{text_name}.json").read_text()
    else:
        path = Path(text_name)
        if not path.is_file():
            raise DlaError(NvError.BadParameter,
                           f"device config '{text_name}': not a bundled config "
                           f"({', '.join(bundled_configs())}) nor a file")
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise DlaError(NvError.FileReadFailed, f"device config {source}: {e.strerror or e}") from e
        except UnicodeDecodeError as e:
            raise DlaError(NvError.BadValue,
                           f"device config {source}: not UTF-8 text (byte {e.start})") from e
    try:
        raw = json.loads(text, object_pairs_hook=keep_repeated_keys)  # xclbinutil repeats keys
    except json.JSONDecodeError as e:
        raise DlaError(NvError.BadValue, f"{source}: not valid JSON: {e}") from e
    except RecursionError:
        raise DlaError(NvError.BadValue, f"{source}: JSON nested too deep") from None
    return parse_config(raw, source)


def parse_config(raw: Any, source: str = "device config") -> DeviceConfig:
    """Check every field of a configuration and build it; errors name the field and value."""
    config = _parse_fields(raw, source)
    nvdla = parse_nvdla(raw.get("nvdla"), source)  # an NVDLA hardware configuration's facts
    if nvdla is None:
        return config
    _check_nvdla(raw, nvdla, source)
    return dataclasses.replace(config, nvdla=nvdla)


def _check_nvdla(raw: dict[str, Any], nvdla: NvdlaHwConfig, source: str) -> None:
    """What an NVDLA configuration's device has and has not: NVDLA's blocks and addresses only."""
    if raw.get("shave") is not None or raw.get("ip_layout"):
        raise DlaError(NvError.BadValue, f"{source}: an NVDLA configuration ('nvdla') has no SHAVE tiles "
                                         "nor compute units ('shave', 'ip_layout')")
    fp16 = "FP16" in nvdla.precisions
    if [p.upper() for p in raw["precisions"]] != (["FP16"] if fp16 else []):
        raise DlaError(NvError.BadValue, f"{source}: 'precisions' = {raw['precisions']!r} must be "
                                         f"{['FP16'] if fp16 else []!r}: the ones of 'nvdla.precisions' "
                                         "that pydla's precision enumeration names")
    end = raw["iova_base"] + raw["iova_size"]
    if end > 1 << nvdla.address_bits:
        raise DlaError(NvError.BadValue, f"{source}: 'iova_size': device addresses end at {end:#x}, past the "
                                         f"{nvdla.address_bits}-bit addresses of 'nvdla.address_bits'")


def _parse_fields(raw: Any, source: str) -> DeviceConfig:
    if not isinstance(raw, dict):
        raise DlaError(NvError.BadValue, f"{source}: must be a JSON object")
    unknown = sorted(set(raw) - set(_FIELDS) - set(_OPTIONAL) - {"headed"})
    if unknown:
        raise DlaError(NvError.BadValue, f"{source}: unknown field(s) {', '.join(unknown)}")
    for key, typ in _FIELDS.items():
        value = raw.get(key)
        if value is None:
            raise DlaError(NvError.BadValue, f"{source}: missing field '{key}'")
        if not isinstance(value, typ) or isinstance(value, bool):
            raise DlaError(NvError.BadValue, f"{source}: '{key}' must be a {typ.__name__}, "
                                             f"not {value!r}")
    optional: dict[str, Any] = {}
    for key, (types, default) in _OPTIONAL.items():
        value = raw.get(key, default)
        if not isinstance(value, types) or isinstance(value, bool):
            raise DlaError(NvError.BadValue, f"{source}: '{key}' must be a "
                                             f"{' or '.join(t.__name__ for t in types)}, not {value!r}")
        optional[key] = value
    headed = raw.get("headed", False)
    if not isinstance(headed, bool):  # the only boolean field (the others refuse a bool)
        raise DlaError(NvError.BadValue, f"{source}: 'headed' must be true or false, not {headed!r}")
    blocks = tuple(_member(dla_block_e, b, "blocks", source) for b in raw["blocks"])
    precisions = tuple(_member(dla_precision_e, p, "precisions", source) for p in raw["precisions"])
    checks = [
        (1 <= raw["instances"] <= 16, "instances", "1..16"),
        (0 <= raw["hw_version"] <= 0xFFFFFFFF, "hw_version", "a u32"),
        (len(blocks) > 0 and len(set(blocks)) == len(blocks), "blocks", "distinct and not empty"),
        (len(precisions) > 0 or optional["nvdla"] is not None, "precisions",
         "not empty (only an NVDLA configuration may list none: its own are in 'nvdla')"),
        (raw["memory_bytes"] >= PAGE, "memory_bytes", f">= {PAGE}"),
        (1 <= raw["contexts"] <= 0xFFFF, "contexts", "1..65535"),
        (raw["iova_base"] % PAGE == 0 and raw["iova_base"] > 0, "iova_base", "page-aligned and > 0"),
        (raw["iova_size"] >= PAGE and raw["iova_base"] + raw["iova_size"] <= 1 << 48, "iova_size",
         "at least a page, ending below 2^48"),
        (optional["tap_major_min_channels"] >= 1, "tap_major_min_channels", ">= 1"),
        (0 <= optional["tap_major_max_extra"] < math.inf, "tap_major_max_extra", "a finite number >= 0"),
        (0.001 <= optional["clock_mhz"] <= 100000, "clock_mhz", "0.001..100000"),
    ]
    for ok, key, rule in checks:
        if not ok:
            value = optional[key] if key in optional else raw[key]
            raise DlaError(NvError.BadValue, f"{source}: '{key}' = {value!r} must be {rule}")
    if dla_block_e.CONV in blocks and dla_block_e.SDP not in blocks:
        raise DlaError(NvError.BadValue, f"{source}: 'blocks': CONV needs SDP (its results fly to SDP)")
    return DeviceConfig(raw["name"], raw["description"], raw["instances"], raw["hw_version"],
                        blocks, precisions, raw["memory_bytes"], raw["contexts"], raw["iova_base"],
                        raw["iova_size"], optional["tap_major_min_channels"],
                        float(optional["tap_major_max_extra"]),
                        _ip_layout(optional["ip_layout"], optional["cu_models"], source),
                        float(optional["clock_mhz"]),
                        parse_shave(optional["shave"], source), headed,
                        command_processor=_command_processor(optional["engine"], optional["nvdla"], source))


def _command_processor(engine: dict[str, Any], nvdla: Any, source: str) -> bool:
    """The "engine" field's command_processor (false when absent); refused on an NVDLA configuration."""
    unknown = sorted(set(engine) - {"command_processor"})
    if unknown:
        raise DlaError(NvError.BadValue, f"{source}: 'engine' has unknown field(s) {', '.join(unknown)}")
    on = engine.get("command_processor", False)
    if not isinstance(on, bool):
        raise DlaError(NvError.BadValue,
                       f"{source}: 'engine.command_processor' must be true or false, not {on!r}")
    if on and nvdla is not None:
        raise DlaError(NvError.BadValue, f"{source}: 'engine.command_processor' is pydla's own: an NVDLA "
                                         "configuration ('nvdla') programs each operation from the host")
    return on


def _ip_layout(raw: Any, cu_models: dict[str, Any], source: str) -> tuple[ComputeUnitInfo, ...]:
    if is_xclbin_form(raw):
        raw = xclbin_entries(raw, cu_models, source)
    elif cu_models:
        raise DlaError(NvError.BadValue, f"{source}: 'cu_models' is for an 'ip_layout' in xclbinutil's form "
                                         f"(a list's entries name their own model)")
    return parse_ip_layout(raw, source)


def _member(enum_type: Any, name: Any, key: str, source: str) -> Any:
    try:
        return enum_type[str(name).upper()]
    except KeyError:
        names = ", ".join(m.name for m in enum_type)
        raise DlaError(NvError.BadValue, f"{source}: '{key}' has {name!r}; known: {names}") from None
