"""``helpers.stray_modules``: a module a test imported from its temporary folder is not what a later test of the
same process imports, whatever the order of the run (each run here is a small pytest session of its own, in a
subprocess that imports neither torch nor accelkit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.guards import child_env

TESTS = Path(__file__).resolve().parent

#: two tests that each write and import their own ``models.py``: the first leaves its module and its folder behind
#: (as an in-process CLI run once did), the second needs its own ``Net``
LEAVES = textwrap.dedent('''
    import sys


    def test_leaves_its_models(tmp_path):
        (tmp_path / "models.py").write_text("class Other:\\n    pass\\n")
        sys.path.insert(0, str(tmp_path))
        import models

        assert models.Other
''')
NEEDS = textwrap.dedent('''
    import sys


    def test_needs_its_own_models(tmp_path, monkeypatch):
        (tmp_path / "models.py").write_text("class Net:\\n    pass\\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        try:
            import models

            assert models.Net
        finally:
            sys.modules.pop("models", None)  # forgotten by the test itself
''')
#: a test that imports a helper as a top-level module (``tests/helpers`` on ``sys.path``)
TOP_LEVEL_HELPER = textwrap.dedent(f'''
    import sys


    def test_imports_a_helper_as_top_level():
        sys.path.insert(0, {str(TESTS / "helpers")!r})
        import summary_lines  # helpers.summary_lines, under the wrong name

        assert summary_lines.__name__ == "summary_lines"
''')


def run_session(folder: Path, *options: str) -> subprocess.CompletedProcess:
    """``pytest`` on ``folder``'s test files, in order, in one process (no ini file of this repository applies)."""
    env = {**child_env(), "PYTHONPATH": str(TESTS)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
                           "--basetemp", str(folder / "temporary"), *options, "test_a.py", "test_b.py"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "test_a.py").write_text(LEAVES)
    (folder / "test_b.py").write_text(NEEDS)
    return folder


def test_without_the_guard_a_left_module_fails_a_later_test(suite: Path):
    # what a run in another order or with another number of workers met: the second test imports the first's module
    done = run_session(suite)
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert "module 'models' has no attribute 'Net'" in done.stdout, done.stdout


def test_the_guard_forgets_a_left_module_and_names_the_test_that_left_it(suite: Path):
    done = run_session(suite, "-p", "helpers.stray_modules")
    out = done.stdout
    assert "PASSED test_b.py::test_needs_its_own_models" in out, out + done.stderr
    assert "ERROR test_a.py::test_leaves_its_models" in out, out + done.stderr
    folder = suite / "temporary"
    assert "test_a.py::test_leaves_its_models left models in sys.modules and " in out, out
    assert f"{folder.resolve()}" in out and "on sys.path" in out, out
    assert "helpers.cli_runs.project_imports" in out, out


def test_the_guard_names_a_helper_imported_as_a_top_level_module(suite: Path):
    (suite / "test_a.py").write_text(TOP_LEVEL_HELPER)
    done = run_session(suite, "-p", "helpers.stray_modules")
    out = done.stdout
    assert "ERROR test_a.py::test_imports_a_helper_as_top_level" in out, out + done.stderr
    assert f"left summary_lines in sys.modules and {TESTS / 'helpers'} on sys.path" in out, out
    assert "PASSED test_b.py::test_needs_its_own_models" in out, out


def test_the_guard_lets_a_project_imported_within_project_imports_pass(suite: Path):
    (suite / "test_a.py").write_text(textwrap.dedent('''
        from helpers.cli_runs import project_imports


        def test_imports_its_project_within(tmp_path, monkeypatch):
            (tmp_path / "models.py").write_text("class Other:\\n    pass\\n")
            with project_imports(tmp_path):
                monkeypatch.syspath_prepend(str(tmp_path))
                import models

                assert models.Other
    '''))
    done = run_session(suite, "-p", "helpers.stray_modules")
    assert "2 passed" in done.stdout and "error" not in done.stdout.lower(), done.stdout + done.stderr
