"""One saved configuration for every command: the ``config.yaml`` a ``fit`` run writes is read by ``validate``,
``test`` and ``predict``, through the same script's :class:`~accelkit.cli.CLI` and through the ``accelkit`` command.

A CLI built for fixed classes (``CLI(Net, Digits)``) parses its model and data groups without a class path
(``model: {hidden: 12}``), while the ``accelkit`` command, which can train any Module, needs one
(``model: {class_path: models.Net, init_args: {hidden: 12}}``); a file written in one form was refused by the other
("does not accept option ..."). So the saved file always names the classes (:func:`with_class_paths`, which also
writes the values that argument links filled in, so that a command without the links builds the same objects), and
a fixed-class CLI reads that form too (:func:`accept_class_paths`, applied to every configuration it loads while
:func:`fixed_classes` says which groups are fixed).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import yaml

#: the sub-commands whose configurations nest under their names in a top-level configuration file
STAGES = ("fit", "validate", "test", "predict")

_FIXED: ContextVar[dict[str, type]] = ContextVar("accelkit_cli_fixed_classes", default={})


class ClassPathMismatch(yaml.YAMLError):
    """A configuration names, for a group the CLI builds with a fixed class, another class (reported as a
    configuration error)."""


def class_path_of(cls: type) -> str:
    """The dotted path a configuration names ``cls`` by."""
    return f"{cls.__module__}.{cls.__qualname__}"


@contextlib.contextmanager
def fixed_classes(classes: dict[str, type]) -> Iterator[None]:
    """While parsing: the groups built with a fixed class (``{"model": Net}``), whose ``class_path`` form
    :func:`accept_class_paths` turns into the plain form."""
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
    classes = _FIXED.get() if classes is None else classes
    if not classes or not isinstance(value, dict):
        return value
    out = dict(value)
    for key, cls in classes.items():
        group = out.get(key)
        if isinstance(group, dict) and "class_path" in group:
            named = group["class_path"]
            # another path to the same class (a re-export) is imported to compare; a path naming a class of
            # another name is refused without importing anything
            if named not in (class_path_of(cls), cls.__name__) and (
                    str(named).rpartition(".")[2] != cls.__name__ or _import(named) is not cls):
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


def import_class_path(path: str) -> Any:
    """The object a configuration's dotted ``class_path`` names (``torch.optim.SGD``), resolved as jsonargparse
    resolves it (its only use of jsonargparse's ``_util``)."""
    from jsonargparse._util import import_object

    return import_object(path)


def _import(path: Any) -> Any:
    try:
        return import_class_path(path)
    except Exception:  # noqa: BLE001 - not importable: the parser reports the class path
        return None


def with_class_paths(text: str, config: Any, classes: dict[str, type]) -> str:
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
        parsed = parsed.as_dict() if hasattr(parsed, "as_dict") else parsed
        for name, value in (parsed or {}).items():
            if name not in init and _plain(value):
                init[name] = value
        data[key] = {"class_path": class_path_of(cls), "init_args": init}
    header = "".join(itertools.takewhile(lambda line: line.startswith("#"), text.splitlines(keepends=True)))
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _plain(value: Any) -> bool:
    """Whether ``value`` is plain data a YAML file holds (numbers, strings, lists and dicts of them)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False
