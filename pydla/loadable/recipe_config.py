"""A recipe against its device configuration: the configuration its header names (``xclbin``, XRT's
key, or ``device``) is loaded, and every kernel's ``instance`` must name a compute unit of the
configuration's IP_LAYOUT, as XRT requires of a kernel instance in the xclbin.

The header's value is a bundled configuration's name (``full``, ``small``) or a configuration file
next to the recipe (a JSON device configuration, whatever its suffix: XRT's ``design.xclbin`` is one
when it holds pydla's configuration). An instance matches a compute unit by its instance name, by
its ``kernel:instance`` name or by its kernel's name (XRT's xrt::kernel takes all three).

Used where a configuration may be loaded: :func:`pydla.loadable.recipe.load_recipe` (and so
``pydla validate recipe.json``), and by a standalone recipe the runner opens
(:meth:`pydla.loadable.recipe_file.RecipeFile.check_device`): the device its header names must be the
one the runner runs on (:func:`check_header_device`). The runtime layers themselves never load one:
they learn their device through their port.

Usage::

    config = check_config(recipe, Path("recipe.json"))        # RecipeError on an unknown instance
    problems = compute_unit_errors(recipe, config)             # [(JSON path, message)], for any source
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.loadable.recipe import Recipe, RecipeError
from pydla.loadable.recipe_file import resolve_file
from pydla.target.config import DeviceConfig, bundled_configs, load_config


def recipe_config(recipe: Recipe, path: Path, *, allow_unsafe_paths: bool = False) -> DeviceConfig:
    """The device configuration the header of ``recipe`` (read from ``path``) names; RecipeError
    with the header's JSON path when it cannot be found or loaded."""
    name = recipe.device
    try:
        if name in bundled_configs():
            return load_config(name)
        what = f"device configuration ({recipe.device_path[1:].replace('/', '.')})"
        return load_config(resolve_file(path, name, what, allow_unsafe_paths=allow_unsafe_paths))
    except RecipeError:
        raise
    except DlaError as e:
        message = e.message.removeprefix(f"{path}: ")  # RecipeError names the recipe itself
        if e.code == NvError.FileNotFound:
            message += f"; nor is it a bundled configuration ({', '.join(bundled_configs())})"
        raise RecipeError(str(path), [(recipe.device_path, message)]) from e


def compute_unit_errors(recipe: Recipe, config: DeviceConfig) -> list[tuple[str, str]]:
    """(JSON path, message) for each kernel whose instance is no compute unit of ``config``; none
    when the configuration declares no IP_LAYOUT (nothing to check against)."""
    layout = config.ip_layout
    if not layout:
        return []
    known = {n for cu in layout for n in (cu.instance, cu.name, cu.kernel)}
    available = ", ".join(f"{cu.instance} ({cu.name})" for cu in layout)
    errors = []
    raw = recipe.raw.get("resources", {}).get("kernels", [])
    for i, k in enumerate(raw):
        instance = k.get("instance") if isinstance(k, dict) else None
        if isinstance(instance, str) and instance and instance not in known:
            errors.append((f"/resources/kernels/{i}/instance",
                           f"'{instance}' is no compute unit of device configuration '{config.name}' "
                           f"(its IP_LAYOUT has: {available})"))
    return errors


def check_config(recipe: Recipe, path: Path, *, allow_unsafe_paths: bool = False) -> DeviceConfig:
    """Load the configuration ``recipe`` names and check its kernels' instances; RecipeError listing
    every unknown instance with its JSON path."""
    config = recipe_config(recipe, path, allow_unsafe_paths=allow_unsafe_paths)
    errors = compute_unit_errors(recipe, config)
    if errors:
        raise RecipeError(str(path), errors)
    return config


def _facts(hw_version: int, blocks: Any, precisions: Any, units: Any) -> tuple[Any, ...]:
    return hw_version, frozenset(blocks), frozenset(precisions), tuple(units)


def check_header_device(recipe: Recipe, path: Path, info: Any, *, allow_unsafe_paths: bool = False) -> None:
    """NvError NotSupported, naming both, when the device configuration the header of ``recipe``
    names is not the device ``info`` describes (a port's NvDlaDeviceInfo): another hardware version,
    blocks, precisions or compute units (a configuration and its headed variant are the same
    device). The header's file not found or not a configuration: the RecipeError of
    :func:`recipe_config`."""
    config = recipe_config(recipe, path, allow_unsafe_paths=allow_unsafe_paths)
    wanted = _facts(config.hw_version, config.blocks, config.precisions, (cu.name for cu in config.ip_layout))
    have = _facts(info.hw_version, info.blocks, info.precisions, info.compute_units)
    if wanted != have:
        key = recipe.device_path.rsplit("/", 1)[-1]
        raise DlaError(NvError.NotSupported,
                       f"{path}: header.{key} '{recipe.device}' is device configuration '{config.name}', and "
                       f"the runtime runs on '{info.name}' (another device): open the runtime on the "
                       f"recipe's device (createRuntime(config=...), pydla run --config)")
