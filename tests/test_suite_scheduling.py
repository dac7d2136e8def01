"""How the suite is spread over workers (``helpers.scheduling``): the tests of a module that shares set-up stay
together on one worker, every other test is a unit of its own, and a run of named paths stays in one process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.scheduling import machine_cores, shares_setup, suite_workers, work_unit

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def test_a_module_with_a_fixture_wider_than_a_test_is_one_unit(tmp_path):
    write(tmp_path, "test_built.py", '''
        import pytest

        @pytest.fixture(scope="module")
        def built():
            return 1

        def test_a(built): ...
    ''')
    write(tmp_path, "test_session.py", '''
        import pytest

        @pytest.fixture(scope="session", autouse=True)
        async def shared(): ...
    ''')
    write(tmp_path, "test_plain.py", '''
        import pytest

        @pytest.fixture
        def each(): ...

        @pytest.fixture(scope="function")
        def also_each(): ...
    ''')
    assert shares_setup(tmp_path / "test_built.py") and shares_setup(tmp_path / "test_session.py")
    assert not shares_setup(tmp_path / "test_plain.py")
    assert work_unit(tmp_path, "test_built.py::test_a[1]") == "test_built.py"
    assert work_unit(tmp_path, "test_plain.py::test_b[x]") == "test_plain.py::test_b[x]"
    assert not shares_setup(tmp_path / "missing.py")


def test_the_suites_expensive_shared_runs_are_recognised():
    for module in ("tests/test_distributions.py", "tests/test_template.py", "tests/test_docs.py",
                   "plugins/fsdp/tests/test_fsdp.py", "plugins/xla_spmd/tests/test_xla_spmd.py"):
        assert shares_setup(REPO / module), module
    assert not shares_setup(REPO / "tests/test_sampler.py")


@pytest.mark.slow  # starts pytest, with two workers and with one more than the cores
def test_a_whole_run_uses_workers_a_run_of_named_files_one_process(tmp_path):
    write(tmp_path, "pytest.ini", "[pytest]\naddopts = -n auto -p no:cacheprovider\ntestpaths = .\n")
    write(tmp_path, "conftest.py", f'''
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        pytest_plugins = ["helpers.scheduling"]
    ''')
    write(tmp_path, "test_shared.py", '''
        import os
        import pytest

        @pytest.fixture(scope="module")
        def built():
            with open(os.environ["BUILDS"], "a") as log:
                log.write(os.environ.get("PYTEST_XDIST_WORKER", "one-process") + " "
                          + os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") + "\\n")

        @pytest.mark.parametrize("i", range(6))
        def test_reads(built, i):
            pass
    ''')
    write(tmp_path, "test_alone.py", "import pytest\n\n@pytest.mark.parametrize('i', range(6))\ndef test_x(i):\n"
                                     "    pass\n")
    builds = tmp_path / "builds.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(BUILDS=str(builds))

    def run(*args: str, workers: str | None = None) -> list[str]:
        builds.unlink(missing_ok=True)
        run_env = dict(env, **({"PYTEST_XDIST_AUTO_NUM_WORKERS": workers} if workers else {}))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", *args], cwd=tmp_path, env=run_env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return builds.read_text().split()

    whole = run(workers="2")  # as pytest-xdist reads it
    assert len(whole) == 2 and whole[0].startswith("gw") and whole[1] == "2"  # on a worker, built once for six tests
    assert run("test_shared.py", workers="2") == ["one-process", "0"]
    # unset: one worker more than the cores (a quarter of the suite's time waits with the CPU idle)
    assert run()[1] == str(machine_cores() + 1) == str(suite_workers(machine_cores()))
