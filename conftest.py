"""Suite-wide set-up of the core's and the plugins' tests.

* ``tests/`` goes on ``sys.path``, so every test file (``tests/`` and ``plugins/*/tests/``) imports the shared
  helpers as ``helpers.<module>`` (``tests/helpers/``). Workers that multiprocessing spawns inherit the path;
  other subprocesses get it through ``helpers.guards.child_env()``.
* The fixtures of ``helpers.fixtures`` (``isolated``, ``cpu_plugin``, ``cpu_manager``, ``make_distribution``,
  ``run_python``) serve every test folder.
* ``helpers.scheduling`` spreads a run of the suite over the machine's cores (pytest-xdist, ``-n auto``).
* ``helpers.cpu_usage`` records each test's CPU seconds and its children's when asked (``--cpu-usage=FILE``).
* ``helpers.stray_modules`` forgets what a test imported from its temporary folders and errors naming it, so that
  no later test of the same worker imports another test's ``models.py`` (the suite passes in any order).
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

pytest_plugins = ["helpers.fixtures", "helpers.scheduling", "helpers.cpu_usage", "helpers.stray_modules"]


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


# No wall-clock limit on a hypothesis example: its default deadline (200 ms an example) fails a correct test on a
# loaded machine (the suite runs beside other work, CI's 2 cores with two xdist workers).
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # pragma: no cover - hypothesis is in requirements-dev.txt
    pass
else:
    _hypothesis_settings.register_profile("accelkit", deadline=None)
    _hypothesis_settings.load_profile("accelkit")
