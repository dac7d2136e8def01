"""Fixtures of the xla_spawn tests: run a scenario file of this folder, or Python code, in a fresh interpreter
with XLA on the host CPU (``helpers.xla``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.xla import run_scenario as run_scenario_file
from helpers.xla import xla_env

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def run_scenario() -> Callable[..., dict]:
    """``run_scenario(name, outdir, script="xla_scenarios.py", **env)``: run ``script name outdir`` (a file of
    this folder) on one XLA device (``CPU_NUM_DEVICES`` in ``env`` sets more) and return its result.json."""

    def run(name: str, out: Path, timeout: float = 180, script: str = "xla_scenarios.py", **env: str) -> dict:
        return run_scenario_file(HERE / script, name, out, timeout=timeout, **env)

    return run


@pytest.fixture(scope="session")
def run_python() -> Callable[..., subprocess.CompletedProcess]:
    """``run_python(code, **env)``: run Python code in a fresh interpreter with the XLA-on-CPU environment (in
    this folder it takes the place of the suite-wide ``run_python`` of ``helpers.fixtures``)."""

    def run(code: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], env=xla_env(**env), capture_output=True, text=True,
                              timeout=120)

    return run
