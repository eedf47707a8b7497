"""Generating every output of a spec, and checking that committed outputs are not stale.

The bundled specs generate into the package itself (``pydla/deviceapi/generated`` for Python,
``pydla/deviceapi/include/pydla`` for C and C++) and those files are committed.

Usage::

    stale = generate_bundled(check=True)      # [] when every committed file is up to date
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydla.deviceapi import include_dir, templates_user
from pydla.deviceapi.loader import UserSchema
from pydla.deviceapi.model import Spec
from pydla.deviceapi.render import LANGUAGES, render
from pydla.deviceapi.spec import bundled_specs_dir, load_spec
from pydla.errors import DlaError, NvError

# Order matters only for reading: imports come first.
BUNDLED = ("headers", "device_api", "trace", "dla_regs", "dla_task", "loadable", "cpu_library", "dla_uapi",
           "shave", "dla_interface", "nvdla_v1_regs", "nvdla_v2_regs", "nvdla_smmu", "nvdla_mcu")
PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Output:
    """One generated file: which spec and language, where it goes, and its text."""

    spec: Spec
    language: str
    path: Path
    text: str

    def is_current(self) -> bool:
        try:
            return self.path.is_file() and self.path.read_text(encoding="utf-8") == self.text
        except (OSError, UnicodeDecodeError):
            return False  # unreadable counts as stale: writing it says what is wrong


def output_path(out_dir: Path | None, spec_name: str, language: str) -> Path:
    """Where an output goes: the package's own places, or flat in ``out_dir``/pydla/ for C."""
    suffix = LANGUAGES[language]
    if out_dir is None:
        base = PACKAGE_DIR / "generated" if language == "python" else include_dir() / "pydla"
    else:
        base = out_dir if language == "python" else out_dir / "pydla"
    return base / f"{spec_name}{suffix}"


def outputs_for(spec_file: Path, out_dir: Path | None = None,
                languages: tuple[str, ...] = tuple(LANGUAGES), templates: tuple[Path, ...] = (),
                output: Path | None = None, user_schema: UserSchema | None = None,
                partial: bool = False) -> list[Output]:
    """Render ``spec_file`` into each of ``languages`` and with each user template.

    A user template's output goes to ``output`` when given, else into ``out_dir`` (default: the
    current directory) named after the template (:func:`templates_user.output_name`). With
    ``partial``, items whose types are not defined are left out (``spec.omitted``) and the rest rendered.
    """
    spec = load_spec(spec_file, user_schema, partial=partial)
    try:
        source = spec_file.resolve().relative_to(PACKAGE_DIR.parent.parent).as_posix()
    except ValueError:
        source = spec_file.name
    outputs = [Output(spec, lang, output_path(out_dir, spec.name, lang), render(spec, lang, source))
               for lang in languages]
    for template in templates:
        name = templates_user.output_name(template, spec)
        path = output if output is not None else (out_dir or Path()) / name
        text = templates_user.render_template(template, spec, source, path.name)
        outputs.append(Output(spec, f"template {template}", path, text))
    return outputs


def check_distinct(outputs: list[Output]) -> None:
    """DlaError when two outputs would be written to one file (the second would overwrite the first)."""
    seen: dict[Path, Output] = {}
    for out in outputs:
        key = out.path.resolve()
        first = seen.setdefault(key, out)
        if first is not out:
            raise DlaError(NvError.BadParameter,
                           f"{out.path}: both {first.spec.name} ({first.language}) and {out.spec.name} "
                           f"({out.language}) would be written here; put {{spec}} in the template's "
                           "file name, or generate one spec at a time")


def bundled_outputs(out_dir: Path | None = None,
                    languages: tuple[str, ...] = tuple(LANGUAGES)) -> list[Output]:
    outputs: list[Output] = []
    for name in BUNDLED:
        outputs += outputs_for(bundled_specs_dir() / f"{name}.yaml", out_dir, languages)
    return outputs


_VERSION_LINE = re.compile(r"^VERSION = \((\d+), (\d+), (\d+)\)$", re.M)
_HASH_LINE = re.compile(r"^LAYOUT_HASH64 = (0x[0-9a-f]+)$", re.M)


def _version_and_hash(text: str) -> tuple[tuple[int, ...], str] | None:
    version, layout = _VERSION_LINE.search(text), _HASH_LINE.search(text)
    if version is None or layout is None:
        return None
    return tuple(int(g) for g in version.groups()), layout.group(1)


def check_version_bump(out: Output) -> None:
    """DlaError when ``out`` (a Python output) would replace a file of the same contract version
    with another layout hash: the layout changed (perhaps only through a spec it imports, whose hash
    its own covers) without the version bump that tells the other side (`pydla deviceapi diff`)."""
    if out.language != "python" or not out.path.is_file():
        return
    old = _version_and_hash(out.path.read_text(encoding="utf-8"))
    new = _version_and_hash(out.text)
    if old is not None and new is not None and old[0] == new[0] and old[1] != new[1]:
        version = ".".join(map(str, new[0]))
        raise DlaError(NvError.VersionMismatch,
                       f"{out.spec.name} {version}: its layout hash changes ({old[1]} -> {new[1]}) but its "
                       "version does not; bump the spec's Version (a change in a spec it imports counts: "
                       "its hash covers them); `pydla deviceapi diff` says which part")


def write(outputs: list[Output]) -> list[Output]:
    """Write the outputs that differ from what is on disk; return those written. Refused (nothing
    written) when a contract's layout changed at the same version (:func:`check_version_bump`)."""
    for out in outputs:
        check_version_bump(out)
    written = []
    for out in outputs:
        if not out.is_current():
            try:
                out.path.parent.mkdir(parents=True, exist_ok=True)
                out.path.write_text(out.text, encoding="utf-8")
            except OSError as e:
                raise DlaError(NvError.FileWriteFailed,
                               f"{out.path}: cannot write it: {e.strerror}") from None
            written.append(out)
    return written


def stale(outputs: list[Output]) -> list[Output]:
    """The outputs whose file is missing or differs from a fresh render."""
    return [out for out in outputs if not out.is_current()]
