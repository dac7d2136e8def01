"""Fixtures of the xla_spmd tests: run a scenario of ``spmd_scenarios.py`` in a fresh interpreter (torch_xla is
never imported in the pytest process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def xla_env(**extra: str) -> dict[str, str]:
    """XLA on the host CPU, plugins discovered as installed."""
    env = dict(os.environ)
    for key in ("XRT_TPU_CONFIG", "TPU_NUM_DEVICES", "TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID",
                "ACCELKIT_DISABLE_PLUGIN_AUTOLOAD"):
        env.pop(key, None)
    env.update({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def run_spmd_scenario() -> Callable[..., dict]:
    """``run_spmd_scenario(name, outdir, script=..., **env)``: run ``script name outdir`` and return result.json."""

    def run(name: str, out: Path, script: Path = HERE / "spmd_scenarios.py", timeout: float = 300,
            **env: str) -> dict:
        proc = subprocess.run([sys.executable, str(script), name, str(out)], env=xla_env(**env),
                              capture_output=True, text=True, timeout=timeout, check=False)
        assert proc.returncode == 0, f"scenario {name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        return json.loads((out / "result.json").read_text())

    return run
