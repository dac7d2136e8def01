"""No test leaves a module of its own behind for the tests after it: a pytest plugin (the root ``conftest.py`` loads
it) whose autouse fixture, when a test ends, finds the modules it imported from a temporary folder of the run (a
test project's ``models.py``, ``lib/nets.py``, a package written there) and the top-level modules imported from
``tests/helpers`` (a helper imported as ``models`` rather than ``helpers.models``), still in ``sys.modules``, and
the temporary folders still on ``sys.path``.

Those are forgotten (the next test of the worker starts as if they had never been imported: a test project's own
``models.py`` is found, not the one another test left), and the test that left them errors at its tear-down,
naming them: which tests share a worker, and in which order, depends on the number of workers and on the order of
the run, so a module left behind fails some other test only in some runs (``module 'models' has no attribute
'Net'``). A test that imports a project in its own process does so within ``helpers.cli_runs.project_imports``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

#: the shared helpers, imported as ``helpers.<module>`` only
HELPERS = Path(__file__).resolve().parent


def _locations(module: object) -> list[str]:
    """Where ``module`` was imported from: its file, or the folders of a (namespace) package. (Some modules answer
    any attribute, ``torch.classes`` among them: what is not a string, or not a list of them, is no location.)"""
    found = [getattr(module, "__file__", None)]
    folders = getattr(module, "__path__", None)
    if isinstance(folders, list) or type(folders).__name__ == "_NamespacePath":
        try:
            found.extend(folders)
        except KeyError:  # a namespace path recomputed after its parent package left sys.modules (triton._C)
            pass
    return [location for location in found if isinstance(location, str)]


def _under(location: str, folders: Iterable[Path]) -> bool:
    resolved = Path(location).resolve()
    return any(resolved.is_relative_to(folder) for folder in folders)


def stray_modules(before: set[str], temporary: Path) -> list[str]:
    """The names in ``sys.modules`` that are not in ``before`` and were imported from a folder under
    ``temporary``, or are top-level modules imported from ``tests/helpers`` (sorted)."""
    strays = []
    for name in set(sys.modules) - before:
        locations = _locations(sys.modules.get(name))
        if any(_under(location, [temporary]) for location in locations) or (
                "." not in name and name != HELPERS.name and any(_under(loc, [HELPERS]) for loc in locations)):
            strays.append(name)
    return sorted(strays)


def stray_path_entries(before: list[str], temporary: Path) -> list[str]:
    """The ``sys.path`` entries that were not in ``before`` and lie under ``temporary`` or are ``tests/helpers``."""
    return [entry for entry in sys.path if entry and entry not in before
            and (_under(entry, [temporary]) or Path(entry).resolve() == HELPERS)]


@pytest.fixture(autouse=True)
def no_stray_modules(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Around every test: what it imported from its temporary folders (or from ``tests/helpers`` as top-level
    modules) and left in ``sys.modules``, or left on ``sys.path``, is forgotten, and the test errors naming it."""
    temporary = tmp_path_factory.getbasetemp().resolve()
    modules, path = set(sys.modules), list(sys.path)
    yield
    strays, entries = stray_modules(modules, temporary), stray_path_entries(path, temporary)
    for name in strays:
        del sys.modules[name]
    sys.path[:] = [entry for entry in sys.path if entry not in entries]
    if strays or entries:
        pytest.fail(f"{request.node.nodeid} left {', '.join(strays) or 'no module'} in sys.modules and "
                    f"{', '.join(entries) or 'no folder'} on sys.path, which a later test of this worker would "
                    "import instead of its own (forgotten now): import a test project within "
                    "helpers.cli_runs.project_imports (CONTRIBUTING.md, 'Where tests live')", pytrace=False)
