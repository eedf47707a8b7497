"""User templates (``pydla deviceapi generate --template``): finding, naming and rendering them.

A user template is a Jinja file with the design's delimiters (``<% %>``, ``<< >>``, ``<# #>``)
that turns a spec into any text: another language, documentation, a dispatch table. It receives
what the bundled templates receive (:func:`pydla.deviceapi.render.context`).

Naming: a template file ``NAME.jinja`` writes ``NAME``, with ``{spec}`` in it replaced by the
spec's name (``{spec}_types.rs.jinja`` -> ``device_api_types.rs``); ``--output`` names the file
instead when there is one spec and one template. In a directory, every ``*.jinja`` file is a
template except those starting with ``_``, which other templates include or import.

Every problem is a DlaError naming the template file and line: a syntax error, an undefined name
(an error, never silently empty), a missing include, an exception in an expression.
"""

from __future__ import annotations

import os
from pathlib import Path

import jinja2

from pydla.deviceapi.model import Spec
from pydla.deviceapi.render import context, environment
from pydla.errors import DlaError, NvError

SUFFIX = ".jinja"
SPEC_PLACEHOLDER = "{spec}"


def find_templates(paths: list[Path]) -> list[Path]:
    """The template files that ``--template`` arguments name: files as given, directories expanded."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.iterdir()
                            if p.is_file() and p.name.endswith(SUFFIX) and not p.name.startswith("_"))
            if not inside:
                raise DlaError(NvError.FileNotFound,
                               f"--template {path}: the directory holds no *{SUFFIX} template "
                               "(files starting with '_' are only included by others)")
            found += inside
        elif path.is_file():
            if not path.name.endswith(SUFFIX) or path.name == SUFFIX:
                raise DlaError(NvError.BadParameter,
                               f"--template {path}: a template's file name ends in '{SUFFIX}' (the "
                               f"output is named after it without '{SUFFIX}')")
            found.append(path)
        else:
            raise DlaError(NvError.FileNotFound, f"--template {path}: no such file or directory")
    return found


def output_name(template: Path, spec: Spec) -> str:
    """``NAME.jinja`` -> ``NAME`` with ``{spec}`` replaced by the spec's name."""
    return template.name[: -len(SUFFIX)].replace(SPEC_PLACEHOLDER, spec.name)


def render_template(template: Path, spec: Spec, source: str, output: str) -> str:
    """The text of ``template`` rendered for ``spec``; DlaError naming file and line otherwise."""
    env = environment(jinja2.FileSystemLoader(str(template.parent)))
    try:
        compiled = env.get_template(template.name)
        return compiled.render(context(spec, source, template.name, output))
    except jinja2.TemplateSyntaxError as e:
        where = f"{_path(e.filename, template)}:{e.lineno}"
        raise DlaError(NvError.BadValue, f"{where}: template syntax error: {e.message}") from None
    except UnicodeDecodeError as e:
        raise DlaError(NvError.FileReadFailed,
                       f"{_where(e, template)}: not UTF-8 text (byte {e.start}); templates are "
                       "UTF-8") from None
    except jinja2.TemplateNotFound as e:
        raise DlaError(NvError.FileNotFound,
                       f"{_where(e, template)}: template '{e.name}' not found; includes and imports are "
                       f"looked up in {template.parent}") from None
    except jinja2.UndefinedError as e:
        raise DlaError(NvError.BadValue,
                       f"{_where(e, template)}: {e.message}: a template may use only what it receives "
                       "(spec, g, cgh, source, template, output, the filters) and the attributes that "
                       "exist; see 'Templates' in the contract authors' guide") from None
    except DlaError as e:
        raise DlaError(e.code, f"{_where(e, template)}: {e.message}") from None
    except Exception as e:
        # A user template is foreign code: whatever an expression raises (a division by zero, a bad
        # index, a helper's TypeError) is reported at its line rather than as a traceback.
        raise DlaError(NvError.BadValue, f"{_where(e, template)}: {type(e).__name__}: {e}") from None


def _path(filename: str | None, template: Path) -> str:
    return os.path.normpath(filename) if filename else str(template)


def _where(error: BaseException, template: Path) -> str:
    """``file:line`` of the innermost template frame of ``error``'s traceback.

    Jinja rewrites tracebacks so that a template's frames carry the template's file name and line;
    Python frames (pydla's helpers, jinja itself) end in ``.py`` or are ``<...>``.
    """
    where = str(template)
    tb = error.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.endswith(".py") and not name.startswith("<"):
            where = f"{os.path.normpath(name)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where
