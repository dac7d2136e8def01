"""The suite on a machine without the optional distributions, as the GPU kit sets one up (no XLA or MLflow plugin,
no torch_xla, mlflow or optuna, a partial sphinx): the tests that need them skip, naming what is missing, instead
of erroring at collection or failing. ``helpers.without_optional`` hides them from a pytest run here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HELPER = ROOT / "tests" / "helpers" / "without_optional.py"


@pytest.mark.slow  # a pytest run in a fresh interpreter
def test_tests_of_absent_distributions_skip_naming_what_is_missing():
    tests = ["tests/test_docs.py::test_every_public_name_has_a_docstring",
             "plugins/xla_spawn/tests/test_legacy_names.py", "plugins/xla_bf16/tests", "plugins/mlflow/tests",
             "plugins/wandb/tests",
             "tests/test_conformance.py::test_on_cpu[optuna_pruning]",
             # after test_docs looked for sphinx.pycode, in the same process: a fit importing scipy (through
             # scikit-learn), which imports sphinx.ext when it finds sphinx imported (see import_or_skip)
             "tests/test_cli.py::test_fit_trains_the_example_and_reports_held_out_accuracy"]
    done = subprocess.run([sys.executable, str(HELPER), "-q", "-rs", "-p", "no:cacheprovider", *tests], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    # the names documented by a '#:' comment (hookspec...): skipped there, checked here; the plugins' names and tests
    for reason in ("sphinx.pycode, which reads the '#:' comments, cannot be imported",
                   "accelkit_xla_spawn is not installed", "the accelkit-xla-spawn plugin is not installed",
                   "No module named 'mlflow'", "No module named 'wandb'",
                   "optuna_pruning needs optuna, optuna_integration (not installed)"):
        assert reason in done.stdout, done.stdout[-4000:]
