"""Private names of the core a plugin uses (issue 36, item 9): found by reading its source, not by running it.

A name starting with ``_`` is private whatever module it is in (``docs/plugins.rst``, "Stability"): it may change or
go in any release, so a plugin that imports ``accelkit.loggers.tensorboard._flatten`` works today and breaks without
warning tomorrow. ``accelkit plugins`` and ``accelkit doctor`` name each such use, so its author hears of it.

The plugin's package is read with ``ast`` (nothing is imported or run for this; the entry-point module is the one
discovery already imported), every ``.py`` file under the folder of the entry point's top-level package (or its one
file, for a single-module plugin). A use is:

* ``from accelkit.x import _y`` and ``import accelkit._x`` / ``from accelkit._x import y`` (a private module);
* an attribute path through a name bound to the core, ``accelkit.x._y`` after ``import accelkit`` or ``tb._y``
  after ``import accelkit.loggers.tensorboard as tb`` or ``from accelkit.loggers import tensorboard``.

Dunder names (``accelkit.__about__``, ``__version__``) are not private. A use built at run time
(``getattr(module, "_" + name)``, ``importlib.import_module``) is not seen; a file that does not parse is skipped (it
cannot have been imported either).
"""

from __future__ import annotations

import ast
import os
import sys
import types
from dataclasses import asdict, dataclass
from typing import TypedDict, cast

#: the core's top-level package, whose private names are reported
CORE_PACKAGE = "accelkit"
#: at most this many source files are read per plugin (a plugin living inside a huge package stays cheap)
MAX_FILES = 2000
#: where the promise a private name is outside of is stated
STABILITY_PROMISE = "docs/plugins.rst, 'Stability'"


class PrivateNameRecord(TypedDict):
    """A :class:`PrivateNameUse` as plain data, as the JSON reports hold it."""

    name: str
    module: str
    file: str
    line: int


@dataclass(frozen=True)
class PrivateNameUse:
    """One use of a private core name in a plugin's source.

    :param name: the dotted name up to its private part (``"accelkit.loggers.tensorboard._flatten"``).
    :param module: the core module it is looked up in (``"accelkit.loggers.tensorboard"``).
    :param file: the source file that uses it.
    :param line: the line of the use in that file.
    """

    name: str
    module: str
    file: str
    line: int

    def as_dict(self) -> PrivateNameRecord:
        """The use as plain data (``name``, ``module``, ``file``, ``line``) for the JSON reports."""
        return cast(PrivateNameRecord, asdict(self))  # asdict gives the four fields, typed as they are


def _private_prefix(dotted: str) -> tuple[str, str] | None:
    """``(name, module)`` for the first private part of a dotted core name, ``None`` when it has none."""
    parts = dotted.split(".")
    if parts[0] != CORE_PACKAGE:
        return None
    for index, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
            return ".".join(parts[: index + 1]), ".".join(parts[:index])
    return None


def _dotted(node: ast.expr) -> tuple[str, list[str]] | None:
    """``(root name, [attributes...])`` of ``a.b.c``; ``None`` when the root is not a plain name."""
    attributes: list[str] = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return node.id, attributes[::-1]


def _imports(tree: ast.AST) -> tuple[dict[str, str], list[tuple[str, int]]]:
    """The names bound to core objects (local name -> dotted core name) and the dotted core names imported, with
    their lines."""
    bound: dict[str, str] = {}
    imported: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != CORE_PACKAGE:
                    continue
                imported.append((alias.name, node.lineno))
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[CORE_PACKAGE] = CORE_PACKAGE
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != CORE_PACKAGE:
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}" if alias.name != "*" else node.module
                imported.append((full, node.lineno))
                if alias.name != "*":
                    bound[alias.asname or alias.name] = full
    return bound, imported


def scan_source(text: str, filename: str) -> list[PrivateNameUse]:
    """Every use of a private core name in one file's source ``text`` (see the module's docstring for what counts);
    empty for a file that does not parse."""
    try:
        tree = ast.parse(text, filename=filename)
    except (SyntaxError, ValueError):
        return []
    bound, imported = _imports(tree)
    found: dict[tuple[str, int], PrivateNameUse] = {}

    def note(dotted: str, line: int) -> None:
        private = _private_prefix(dotted)
        if private is not None:
            found.setdefault((private[0], line), PrivateNameUse(private[0], private[1], filename, line))

    for dotted, line in imported:
        note(dotted, line)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            path = _dotted(node)
            if path is not None and path[0] in bound:
                note(".".join([bound[path[0]], *path[1]]), node.lineno)
    return sorted(found.values(), key=lambda use: (use.file, use.line, use.name))


def source_files(plugin: object) -> list[str]:
    """The ``.py`` files of the package a plugin object comes from (its top-level package's folders, or its one
    file), found through the modules already imported; none for the core's own plugins."""
    if isinstance(plugin, types.ModuleType):
        module_name = plugin.__name__
    else:
        module_name = plugin.__module__ if isinstance(plugin, type) else type(plugin).__module__
    top = str(module_name).split(".")[0]
    package = sys.modules.get(top)
    if top == CORE_PACKAGE or package is None:
        return []
    folders = list(getattr(package, "__path__", None) or [])
    if not folders:
        single = getattr(package, "__file__", None)
        return [single] if single and single.endswith(".py") else []
    files: list[str] = []
    for folder in folders:
        for root, dirs, names in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            files.extend(os.path.join(root, name) for name in sorted(names) if name.endswith(".py"))
            if len(files) >= MAX_FILES:
                return files[:MAX_FILES]
    return files


def private_core_names(plugin: object) -> list[PrivateNameUse]:
    """Every use of a private core name in the source of ``plugin`` (a loaded plugin object: a module, or an object
    whose class's module is read); empty for ``None`` and for the core's own plugins."""
    if plugin is None:
        return []
    uses: list[PrivateNameUse] = []
    for path in source_files(plugin):
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            continue  # not readable as source: nothing Python could have imported from it either
        uses.extend(scan_source(text, path))
    return uses
