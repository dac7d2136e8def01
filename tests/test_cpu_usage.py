"""The suite's CPU recorder (``helpers.cpu_usage``): per test, the CPU seconds of the test's process, of the
children it reaped and of the programs it ran through the prewarmed interpreter, and what it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.6:\n    pass\n"

PROJECT = f'''
import subprocess, sys

import pytest

from helpers.prewarmed import Prewarmed

BURN = {BURN!r}


@pytest.fixture(scope="session")
def interpreter():
    prewarmed = Prewarmed()
    yield prewarmed
    prewarmed.close()  # after the last test: this process reaps the interpreter, and with it what it reaped


def test_nothing():
    pass


def test_in_a_child():
    subprocess.run([sys.executable, "-c", BURN], check=True)


def test_in_a_prewarmed_program(tmp_path, interpreter):
    script = tmp_path / "burn.py"
    script.write_text(BURN)
    assert interpreter.run([str(script)], cwd=tmp_path, env=dict(interpreter.env), timeout=120).returncode == 0


def test_last():
    pass
'''


def _pytest(folder: Path, *options: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "helpers.cpu_usage",
                           "--rootdir", str(folder), "-c", os.devnull, *options, str(folder / "test_burn.py")],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # runs pytest, which starts two interpreters
def test_each_test_records_its_own_children_and_prewarmed_programs(tmp_path: Path) -> None:
    (tmp_path / "test_burn.py").write_text(textwrap.dedent(PROJECT))
    out = tmp_path / "cpu.jsonl"
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    done = _pytest(tmp_path, f"--cpu-usage={out}", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["nodeid"].split("::")[-1] for r in records] == [
        "test_nothing", "test_in_a_child", "test_in_a_prewarmed_program", "test_last"]
    nothing, child, forked, last = records
    assert nothing["children"] == 0 and nothing["prewarmed"] == 0 and nothing["started"] == {}, nothing
    assert child["children"] >= 0.5 and child["prewarmed"] == 0 and child["started"] == {"python": 1}, child
    # the forked program is reaped by the forking interpreter: without its report it would be invisible here
    assert forked["prewarmed"] >= 0.5 and forked["started"] == {"python": 1}, forked
    # the interpreter, reaped at the session's end, brings its programs' CPU along: counted once, not twice
    assert last["prewarmed"] == -forked["prewarmed"] and last["children"] >= forked["prewarmed"], last

    summary = subprocess.run([sys.executable, str(TESTS / "helpers" / "cpu_usage.py"), str(out)],
                             capture_output=True, text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr
    assert summary.stdout.startswith("4 tests, ") and "test_burn.py" in summary.stdout, summary.stdout
    assert "interpreter starts" in summary.stdout and "processes started: python 2" in summary.stdout, summary.stdout
    compared = subprocess.run([sys.executable, str(TESTS / "helpers" / "cpu_usage.py"), str(out), str(out)],
                              capture_output=True, text=True, timeout=60)
    assert compared.returncode == 0, compared.stderr
    assert compared.stdout.startswith("1 files in both runs") and "total (100%)" in compared.stdout, compared.stdout


@pytest.mark.slow  # runs pytest
def test_the_environment_variable_asks_too_and_the_option_is_off_by_default(tmp_path: Path) -> None:
    (tmp_path / "test_burn.py").write_text("def test_nothing():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "ACCELKIT_TEST_CPU_USAGE"}
    env["PYTHONPATH"] = str(TESTS)
    done = _pytest(tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "cpu.jsonl").exists()
    done = _pytest(tmp_path, env={**env, "ACCELKIT_TEST_CPU_USAGE": str(tmp_path / "cpu.jsonl")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert [json.loads(line)["nodeid"] for line in (tmp_path / "cpu.jsonl").read_text().splitlines()] == [
        "test_burn.py::test_nothing"]
