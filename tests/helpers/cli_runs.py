"""Running a command-line program in the test's own process: the ``accelkit`` command through its entry point, a
LightningCLI script as ``__main__``, from a project folder, with the output the test reads.

A test that starts the same program several times needs a fresh interpreter for the first run only (that run
proves the program starts as a program); the later stages it drives (``validate``, ``test``, ``predict``, a second
``fit``, ``--print_config``) read files and parse arguments, and running them here saves an interpreter start and a
torch import each.

Whatever runs here imports the project's own modules (``models.py``, ``lib/nets.py``) as a program started in its
folder would; :func:`project_imports` makes sure it finds those, not a same-named module another test left in
``sys.modules``, and that no later test finds them.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest


@dataclass
class Done:
    """What a command run here left: its exit status and what it wrote to stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


def module_names(folder: Path) -> set[str]:
    """The top-level module names the Python files under ``folder`` can be imported as: the stem of every ``.py``
    file, at any depth (``lib/nets.py`` is imported as ``nets`` once ``lib`` is on ``sys.path``), and every folder
    holding an ``__init__.py``."""
    names = {path.stem for path in folder.rglob("*.py")}
    return names | {path.parent.name for path in folder.rglob("__init__.py")}


def _lies_under(module: ModuleType | None, folders: list[Path]) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and any(Path(file).resolve().is_relative_to(folder) for folder in folders)


@contextmanager
def project_imports(project: Path, also: tuple[str, ...] = ()) -> Iterator[None]:
    """Within: ``sys.modules`` holds no module named as one of ``project``'s files (nor one named in ``also``),
    as in a fresh interpreter started there, and :data:`accelkit.cli.class_paths.FILE_MODULES` and
    :data:`accelkit.utilities.file_modules.REGISTERED` are empty.
    After: ``sys.path``, ``FILE_MODULES``, ``REGISTERED`` and ``sys.modules`` are as they were found: the modules
    imported from ``project`` (or from a folder put on ``sys.path`` within) are forgotten, whatever their names, and
    the same-named modules set aside are put back."""
    from accelkit.cli.class_paths import FILE_MODULES
    from accelkit.utilities.file_modules import REGISTERED

    def ours(name: str) -> bool:
        return name.split(".")[0] in names

    project = project.resolve()
    names = module_names(project) | set(also)
    path, file_modules, registered = list(sys.path), dict(FILE_MODULES), dict(REGISTERED)
    set_aside = {name: sys.modules.pop(name) for name in [name for name in sys.modules if ours(name)]}
    known = dict(sys.modules)
    FILE_MODULES.clear()
    REGISTERED.clear()
    importlib.invalidate_caches()  # files written since the folder was last read
    try:
        yield
    finally:
        names |= module_names(project)  # files the test wrote within
        # ("" is the current folder, the project's while a command ran here)
        added = [Path(entry).resolve() for entry in sys.path if entry and entry not in path]
        forgotten = [name for name, module in sys.modules.items() if known.get(name) is not module
                     and (ours(name) or _lies_under(module, [project, *added]))]
        for name in forgotten:
            del sys.modules[name]
        forget_class_parsers(set(forgotten))
        sys.modules.update(set_aside)
        sys.path[:] = path
        FILE_MODULES.clear()
        FILE_MODULES.update(file_modules)
        REGISTERED.clear()
        REGISTERED.update(registered)


def forget_class_parsers(modules: set[str]) -> None:
    """Drop jsonargparse's cached parsers of classes defined in ``modules``: its cache (keyed by the class) would keep
    a forgotten project's classes alive, and a class kept alive stays among its base class's ``__subclasses__()``,
    where a later test's short class name (``StepLR``) would find two classes. (A private table of jsonargparse,
    read here only, in the tests; without it nothing is done.)"""
    from jsonargparse import _typehints

    cache = getattr(_typehints, "_cached_class_parsers", None)
    if isinstance(cache, dict):
        for key in [key for key in cache if getattr(key[0], "__module__", None) in modules]:
            del cache[key]


@contextmanager
def environment_as_found() -> Iterator[None]:
    """Within, anything goes; after, ``os.environ`` is as it was found. A run sets variables for the processes it
    would start (``seed_everything`` sets ``ACCELKIT_SEED``, and a CLI seeds even when it does not run), which
    would otherwise reach every later test of the same process, and make those depend on what ran before them."""
    own = "PYTEST_CURRENT_TEST"  # pytest's, changed by pytest between a fixture's set-up and its teardown
    before = {name: value for name, value in os.environ.items() if name != own}
    try:
        yield
    finally:
        for name in os.environ.keys() - before.keys() - {own}:
            del os.environ[name]
        for name, value in before.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


def run_here(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *argv: str,
             script: str | None = None, forget: tuple[str, ...] = ()) -> Done:
    """Run ``accelkit *argv`` (or, with ``script``, ``python <script> *argv``) in this process from ``project``,
    with ``project`` first on ``sys.path`` as for a program started there, within :func:`project_imports`: the
    project's modules (and those named in ``forget``: modules of files outside ``project`` the command imports,
    ``examples/digits.py:Net``) are imported afresh, and forgotten afterwards; and :func:`environment_as_found`."""
    capsys.readouterr()
    code = 0
    with project_imports(project, forget), environment_as_found(), monkeypatch.context() as patch:
        patch.chdir(project)
        patch.syspath_prepend(str(project))
        for name in [name for name in os.environ if name.startswith("ACCELKIT_")] + ["PYTHONPATH", "PL_GLOBAL_SEED"]:
            patch.delenv(name, raising=False)  # as the tests' child processes are started
        try:
            if script is None:
                from accelkit.cli.main import main

                code = main(list(argv))
            else:
                patch.setattr(sys, "argv", [script, *argv])
                runpy.run_path(str(project / script), run_name="__main__")
        except SystemExit as exc:  # a program's exit (``--print_config``, a parse error), as the interpreter ends it
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return Done(code, out, err)
