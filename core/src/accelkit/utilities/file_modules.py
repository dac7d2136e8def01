"""Modules imported from a file by name (a CLI's ``path/to/models.py:Net``), without changing ``sys.path``.

``accelkit fit --model lib/models.py:Net`` and a configuration's ``class_path: lib/models.py:Net`` import the file
as module ``models``. Putting ``lib`` first on ``sys.path`` for that would make every module in ``lib`` shadow any
other of its name for the rest of the process (a ``lib/yaml.py`` replacing PyYAML), and would stay there. Instead,
:func:`import_file` registers the one name for the one file with a finder on ``sys.meta_path``
(:class:`FileModuleFinder`): ``import models`` finds that file and nothing else changes. While the file itself runs,
its folder is on ``sys.path`` (so that it imports its neighbours, as a script would), and taken off after.

Processes started with the ``spawn`` method unpickle classes by module name, so the names registered are also in the
environment variable :data:`ENVIRONMENT_VARIABLE`, which :func:`install_from_environment` (run by accelkit's workers
before they unpickle the run) reads back.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["ENVIRONMENT_VARIABLE", "REGISTERED", "FileModuleFinder", "import_file", "install_from_environment"]

#: ``{"models": "/abs/lib/models.py"}`` as JSON: the modules of this process imported from files, for its workers
ENVIRONMENT_VARIABLE = "ACCELKIT_FILE_MODULES"

#: module name -> the file it is imported from (this process's registrations)
REGISTERED: dict[str, Path] = {}


class _FolderDuringImport(importlib.machinery.SourceFileLoader):
    """Runs the file with its folder first on ``sys.path`` and restores ``sys.path`` after, whatever happens."""

    def exec_module(self, module: ModuleType) -> None:
        folder = str(Path(self.path).parent)
        saved = list(sys.path)
        sys.path.insert(0, folder)
        try:
            super().exec_module(module)
        finally:
            sys.path[:] = saved


class FileModuleFinder(importlib.abc.MetaPathFinder):
    """Finds exactly the module names in :data:`REGISTERED`, each at its file; no other name."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        """The spec of ``fullname`` when it is registered (``None`` otherwise: the next finder looks)."""
        file = REGISTERED.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(fullname, file, loader=_FolderDuringImport(fullname, str(file)))


def _install() -> None:
    if not any(isinstance(finder, FileModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, FileModuleFinder())


def import_file(path: str | os.PathLike) -> ModuleType:
    """The module of the Python file ``path``, imported under its stem (``lib/models.py`` -> ``models``) once per
    process; ``sys.path`` is the same after.

    :raises ImportError: another module of that name is imported already (from another file or a package): name
        the class by that module's path instead, or rename the file.
    """
    file = Path(path).resolve()
    name = file.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where is not None and Path(where).resolve() == file:
            REGISTERED.setdefault(name, file)
            _publish()
            return loaded
        raise ImportError(f"{os.fspath(path)!r} would be imported as module {name!r}, but a module of that name is "
                          f"imported already (from {where or 'no file'}); rename the file, or name the class by "
                          f"{name}.<Class> if that module is the one meant", name=name)
    REGISTERED[name] = file
    _install()
    _publish()
    try:
        return importlib.import_module(name)
    except BaseException:
        REGISTERED.pop(name, None)
        sys.modules.pop(name, None)
        _publish()
        raise


def _publish() -> None:
    if REGISTERED:
        os.environ[ENVIRONMENT_VARIABLE] = json.dumps({name: str(file) for name, file in REGISTERED.items()})
    else:
        os.environ.pop(ENVIRONMENT_VARIABLE, None)


def install_from_environment() -> None:
    """Register the modules :data:`ENVIRONMENT_VARIABLE` names (the launching process's file modules), so that
    unpickling a class of one imports it from its file; nothing when the variable is unset or unreadable."""
    text = os.environ.get(ENVIRONMENT_VARIABLE)
    if not text:
        return
    try:
        named = json.loads(text)
    except ValueError:
        return
    if isinstance(named, dict):
        REGISTERED.update({str(k): Path(v) for k, v in named.items() if isinstance(v, str) and v.endswith(".py")})
        _install()
