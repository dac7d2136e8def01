"""One saved configuration for every command: the ``config.yaml`` a ``fit`` run writes is read by ``validate``,
``test`` and ``predict``, through the same script's :class:`~accelkit.cli.CLI` and through the ``accelkit`` command.

A CLI built for fixed classes (``CLI(Net, Digits)``) parses its model and data groups without a class path
(``model: {hidden: 12}``), while the ``accelkit`` command, which can train any Module, needs one
(``model: {class_path: models.Net, init_args: {hidden: 12}}``); a file written in one form was refused by the other
("does not accept option ..."). So the saved file always names the classes (``with_class_paths()``, which also
writes the values that argument links filled in, so that a command without the links builds the same objects), and
a fixed-class CLI reads that form too (``accept_class_paths()``, applied to every configuration it loads while
``fixed_classes()`` says which groups are fixed).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import yaml

if TYPE_CHECKING:
    from jsonargparse import Namespace

#: the sub-commands whose configurations nest under their names in a top-level configuration file
STAGES = ("fit", "validate", "test", "predict")

_FIXED: ContextVar[dict[str, type]] = ContextVar("accelkit_cli_fixed_classes")  # unset: none ({})
_STARTED_IN: ContextVar[Path | None] = ContextVar("accelkit_cli_started_in", default=None)


class ClassPathMismatch(yaml.YAMLError):
    """A configuration names, for a group the CLI builds with a fixed class, another class (reported as a
    configuration error)."""


def class_path_of(cls: type) -> str:
    """The dotted path a configuration names ``cls`` by."""
    return f"{cls.__module__}.{cls.__qualname__}"


@contextlib.contextmanager
def fixed_classes(classes: dict[str, type]) -> Iterator[None]:
    """While parsing: the groups built with a fixed class (``{"model": Net}``), whose ``class_path`` form
    ``accept_class_paths()`` turns into the plain form."""
    token = _FIXED.set(dict(classes))
    try:
        yield
    finally:
        _FIXED.reset(token)


def accept_class_paths(value: Any, classes: dict[str, type] | None = None) -> Any:
    """``value`` (a loaded configuration) with each fixed-class group written as ``{class_path, init_args}`` turned
    into its init arguments, when the class path names that class; at the top level and under a sub-command's
    name. Anything else is returned as it is.

    :raises ClassPathMismatch: the class path names another class than the one the CLI builds.
    """
    classes = _FIXED.get({}) if classes is None else classes
    if not classes or not isinstance(value, dict):
        return value
    out = dict(value)
    for key, cls in classes.items():
        group = out.get(key)
        if isinstance(group, dict) and "class_path" in group:
            named = group["class_path"]
            # another path to the same class (a re-export) is imported to compare; a path naming a class of
            # another name is refused without importing anything
            if named not in (class_path_of(cls), cls.__name__) and not _names_file_of(named, cls) and (
                    is_file_form(named) or str(named).rpartition(".")[2] != cls.__name__ or _import(named) is not cls):
                raise ClassPathMismatch(
                    f"{key}.class_path is {named!r}, but this command builds its {key} from {class_path_of(cls)} "
                    f"(a CLI given that class, without subclass_mode_{'model' if key == 'model' else 'data'}=True): "
                    f"remove the class_path, name {class_path_of(cls)}, or run the configuration with "
                    f"`accelkit <command> --config ...`, which takes any class")
            out[key] = {**{k: v for k, v in group.items() if k not in ("class_path", "init_args", "dict_kwargs")},
                        **dict(group.get("init_args") or {})}
    for stage in STAGES:
        if isinstance(out.get(stage), dict):
            out[stage] = accept_class_paths(out[stage], classes)
    return out


def import_class_path(path: str) -> object:
    """The object a configuration's dotted ``class_path`` names (``torch.optim.SGD``), resolved as jsonargparse
    resolves it (its only use of jsonargparse's ``_util``), or that a file-form one names (:func:`import_file_form`).
    Call it only where a class is asked for."""
    from jsonargparse._util import import_object

    return import_file_form(path) if is_file_form(path) else import_object(path)


def _names_file_of(named: object, cls: type) -> bool:
    """Whether a file-form class path names ``cls`` in the file its module was imported from (nothing imported)."""
    if not is_file_form(named) or named.rpartition(":")[2] != cls.__qualname__:
        return False
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return file is not None and Path(file).resolve() == file_form_location(named)


def _import(path: str) -> object:
    try:
        return import_class_path(path)
    except Exception:  # noqa: BLE001 - not importable: the parser reports the class path
        return None


def with_class_paths(text: str, config: Namespace, classes: dict[str, type]) -> str:
    """``text`` (a dumped configuration) with each fixed-class group in ``{class_path, init_args}`` form, its init
    arguments completed from ``config`` with the values the dump leaves out (those argument links filled in), so
    that any command rebuilds the same objects from the file. The header comment lines are kept."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        return text
    for key, cls in classes.items():
        group = data.get(key)
        if not isinstance(group, dict) or "class_path" in group:
            continue
        init = dict(group)
        parsed = config.get(key) if hasattr(config, "get") else None
        parsed = parsed.as_dict() if parsed is not None and hasattr(parsed, "as_dict") else parsed
        for name, value in (parsed or {}).items():
            if name not in init and _plain(value):
                init[name] = value
        data[key] = {"class_path": class_path_of(cls), "init_args": init}
    header = "".join(itertools.takewhile(lambda line: line.startswith("#"), text.splitlines(keepends=True)))
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _plain(value: object) -> bool:
    """Whether ``value`` is plain data a YAML file holds (numbers, strings, lists and dicts of them)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


_CLASS_PATH_LINE = re.compile(r"^(\s*(?:-\s+)?class_path:\s+)([\w.]+)[ \t]*$", re.MULTILINE)
_FILE_FORM = re.compile(r"\.py:[\w.]+$")


def file_form_class_paths(text: str) -> str:
    """``text`` (a dumped configuration) with the class paths of modules imported from a file outside the current
    folder (``--model examples/digits.py:Net`` imports module ``digits``, which ``digits.Net`` would not find from
    here) written in the file form, ``examples/digits.py:Net`` (relative to the current folder when under it),
    which every command reads back (:func:`import_file_form`, where the argument asks for a class). A module
    importable by its name from the current folder keeps its dotted path."""
    from accelkit.cli.class_paths import FILE_MODULES

    if not FILE_MODULES:
        return text
    here = Path.cwd().resolve()

    def file_form(match: re.Match) -> str:
        parts = match.group(2).split(".")
        for cut in range(len(parts) - 1, 0, -1):
            file = FILE_MODULES.get(".".join(parts[:cut]))
            if file is not None and file.parent != here:
                shown = file.relative_to(here) if file.is_relative_to(here) else file
                return f"{match.group(1)}{shown.as_posix()}:{'.'.join(parts[cut:])}"
        return match.group(0)

    return _CLASS_PATH_LINE.sub(file_form, text)


def is_file_form(named: object) -> TypeGuard[str]:
    """Whether a ``class_path`` is of the file form, ``examples/digits.py:Net``."""
    return isinstance(named, str) and _FILE_FORM.search(named) is not None


def file_form_location(named: str) -> Path:
    """The file a file-form ``class_path`` names, resolved: relative to the current folder, else to the folder the
    command started in (jsonargparse reads a configuration file from that file's folder; the path was written
    relative to where the command ran)."""
    location = named.rpartition(":")[0]
    started = _STARTED_IN.get()
    if started is not None and not Path(location).is_file() and (started / location).is_file():
        return (started / location).resolve()
    return Path(location).resolve()


def import_file_form(named: str) -> object:
    """The object a file-form ``class_path`` names, its file imported as a module of its stem
    (:func:`accelkit.utilities.file_modules.import_file`; recorded for :func:`file_form_class_paths`). Called only
    where an argument's annotation asks for a class (:mod:`accelkit.cli.class_path_safety`).

    :raises ImportError: no such file, or no such name in it.
    """
    from accelkit.cli.class_paths import FILE_MODULES
    from accelkit.utilities.file_modules import import_file

    file = file_form_location(named)
    if not file.is_file():
        raise ImportError(f"class_path {named!r}: no such file {str(file)!r}")
    module = import_file(file)
    FILE_MODULES[module.__name__] = file
    found: object = module
    for part in named.rpartition(":")[2].split("."):
        if not hasattr(found, part):
            raise ImportError(f"class_path {named!r}: {file.name} has no {part!r}")
        found = getattr(found, part)
    return found


@contextlib.contextmanager
def started_in(folder: Path) -> Iterator[None]:
    """While parsing: the folder the command runs in, against which :func:`file_form_location` also resolves
    a relative file (jsonargparse reads a configuration file from that file's folder)."""
    token = _STARTED_IN.set(folder)
    try:
        yield
    finally:
        _STARTED_IN.reset(token)
