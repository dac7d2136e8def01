"""Fixtures of the xla_spawn tests: run a scenario of ``xla_scenarios.py`` in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

HERE = Path(__file__).resolve().parent

#: marks for tests that run real XLA

def xla_env(**extra: str) -> dict[str, str]:
    """The environment of a scenario subprocess: XLA on the host CPU, plugins discovered as installed."""
    env = dict(os.environ)
    for key in ("XRT_TPU_CONFIG", "TPU_NUM_DEVICES", "ACCELKIT_DISABLE_PLUGIN_AUTOLOAD"):
        env.pop(key, None)
    env.update({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def _run_scenario(name: str, out: Path, timeout: float = 180, script: str = "xla_scenarios.py", **env: str) -> dict:
    proc = subprocess.run([sys.executable, str(HERE / script), name, str(out)], env=xla_env(**env),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"scenario {name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads((out / "result.json").read_text())


@pytest.fixture(scope="session")
def run_scenario() -> Callable[..., dict]:
    """``run_scenario(name, outdir, script="xla_scenarios.py", **env)``: run ``script name outdir`` (a file of
    this folder) and return its result.json."""
    return _run_scenario


@pytest.fixture(scope="session")
def run_python() -> Callable[..., subprocess.CompletedProcess]:
    """``run_python(code, **env)``: run Python code in a fresh interpreter with the XLA-on-CPU environment."""

    def run(code: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], env=xla_env(**env), capture_output=True, text=True,
                              timeout=120)

    return run
