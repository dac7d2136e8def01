"""How the suite spreads over the machine's cores (pytest-xdist; ``-n auto`` in ``pyproject.toml``).

* A run of the whole suite or of a tier (``pytest``, ``pytest -m "not slow"``) starts one worker more than the
  machine's cores (:func:`suite_workers`: a quarter of the suite's time waits with the CPU idle); a run
  of named files or tests (``pytest tests/test_cli.py -x``) stays in one process, where ``-x``, ``--pdb`` and
  printed output behave as usual (``-n 0`` and ``-n 2`` still choose explicitly).
* The tests of a module that defines a module-, package- or session-scoped fixture run on one worker, one after
  another: they share what the fixture builds (a distribution, an install, a multi-process fit, an XLA
  scenario, the documentation), so it is built once. Every other test is scheduled on its own.
* Spread over workers, the slow tests start first and the quick ones fill the gaps at the end, so that no
  worker finishes a long test alone.
* Spread over workers, each worker (and every process it starts) gets its share of the cores as its intra-op
  threads (``OMP_NUM_THREADS`` = cores // workers, at least 1, unless set), the rule ``ddp_spawn`` applies to its own
  workers: threads beyond the cores only wait for each other.

Loaded as a pytest plugin by the root ``conftest.py``; the xdist hooks are optional, so the suite also runs
where pytest-xdist is missing and ``-n`` is not given.
"""

from __future__ import annotations

import ast
import os
from functools import cache
from pathlib import Path

import pytest

#: Fixture scopes whose value outlives one test.
SHARED_SCOPES = frozenset({"module", "package", "session"})


@cache
def shares_setup(path: Path) -> bool:
    """Whether the test module at ``path`` defines a fixture of a scope wider than one test."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and any(
                        keyword.arg == "scope" and isinstance(keyword.value, ast.Constant)
                        and keyword.value.value in SHARED_SCOPES for keyword in decorator.keywords):
                    return True
    return False


def work_unit(root: Path, nodeid: str) -> str:
    """The unit a worker receives whole: the test's module if it :func:`shares_setup`, else the test itself."""
    module = nodeid.split("::", 1)[0]
    return module if shares_setup(root / module) else nodeid


def suite_workers(cores: int) -> int:
    """Workers for a run of the whole suite or a tier on ``cores`` cores: one more than the cores. About a quarter
    of the suite's test time is spent waiting with the CPU idle (watchdogs, collective timeouts, rendezvous, stopped
    processes: 635 of 2499 test-seconds in the profile of 2026-12-07), and a worker beyond the cores runs other
    tests meanwhile (on 2 cores: 19 min 33 s with 3 workers, 19 min 41 s with 4, against 21-22 minutes with 2)."""
    return cores + 1


def machine_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: no worker (one process) for a run of named paths or node ids; ``PYTEST_XDIST_AUTO_NUM_WORKERS``
    where set (pytest-xdist reads it); otherwise :func:`suite_workers`."""
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return 0
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return suite_workers(machine_cores())


def pytest_configure(config: pytest.Config) -> None:
    """In the controller of a run spread over several workers, before they start: their share of the cores as
    ``OMP_NUM_THREADS`` (the workers and their subprocesses inherit it)."""
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 1 and not hasattr(config, "workerinput"):
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, machine_cores() // workers)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's default ``--dist load``, except that the tests of a module sharing set-up form one unit."""
    if config.getvalue("dist") != "load":
        return None  # the user chose another distribution mode
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class SharedSetupScheduling(LoadScopeScheduling):
        """Units as :func:`work_unit` cuts them, the largest first, handed to whichever worker runs low."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(root, nodeid)

    return SharedSetupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, slow tests first (every worker sorts alike, so their collections agree)."""
    if getattr(config, "workerinput", None) is not None:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
