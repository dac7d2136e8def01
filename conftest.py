"""Suite-wide set-up of the core's and the plugins' tests.

* ``tests/`` goes on ``sys.path``, so every test file (``tests/`` and ``plugins/*/tests/``) imports the shared
  helpers as ``helpers.<module>`` (``tests/helpers/``). Workers that multiprocessing spawns inherit the path;
  other subprocesses get it through ``helpers.guards.child_env()``.
* The fixtures of ``helpers.fixtures`` (``isolated``, ``cpu_plugin``, ``cpu_manager``, ``make_distribution``,
  ``run_python``) serve every test folder.
* ``-n auto`` (pyproject's ``addopts``, pytest-xdist): a run of the whole suite or of a tier (``pytest``,
  ``pytest -m "not slow"``) spreads its tests over the machine's cores, the slow ones first; a run of named files
  or tests (``pytest tests/test_cli.py -x``) stays in one process. Modules whose tests share an expensive
  module-scoped fixture carry ``pytest.mark.xdist_group(<name>)`` so that it is built once (``--dist loadgroup``).
* No test may start torch_xla inside the pytest process. Importing torch_xla picks a device and sets
  ``PJRT_DEVICE`` in the process, after which ``accelerator="auto"`` means XLA for every later test. XLA tests
  run their work in subprocesses (``helpers.xla``).
"""

import sys
from pathlib import Path

import pytest

TESTS = str(Path(__file__).resolve().parent / "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

pytest_plugins = ["helpers.fixtures"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """How many workers ``-n auto`` starts: none (one process) for a run of named paths or node ids; otherwise
    pytest-xdist's own count (the machine's cores, or ``PYTEST_XDIST_AUTO_NUM_WORKERS``)."""
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return 0
    return None


def pytest_collection_modifyitems(config, items):
    """Spread over several workers, the slow tests start first and the quick ones fill the gaps at the end (the
    longest-first rule keeps one worker from finishing a long test alone); one process keeps the files' order."""
    if getattr(config, "workerinput", None) is not None:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    already = "torch_xla" in sys.modules
    yield
    if not already and "torch_xla" in sys.modules:
        pytest.fail(f"{item.nodeid} imported torch_xla into the pytest process; run XLA work in a subprocess")


def pytest_collection_finish(session):
    if "torch_xla" in sys.modules:
        raise pytest.UsageError("collecting the tests imported torch_xla into the pytest process; "
                                "use importlib.util.find_spec to check that it is installed")
