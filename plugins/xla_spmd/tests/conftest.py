"""Fixtures of the xla_spmd tests: run a scenario of ``spmd_scenarios.py`` in a process of its own with XLA on
the host CPU, forked from the ``prewarmed`` interpreter (``helpers.xla``; torch_xla is never imported in the pytest
process)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.prewarmed import Prewarmed
from helpers.xla import run_scenario

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def run_spmd_scenario(prewarmed: Prewarmed) -> Callable[..., dict]:
    """``run_spmd_scenario(name, outdir, script=..., **env)``: run ``script name outdir`` on 4 XLA devices
    (``CPU_NUM_DEVICES`` in ``env`` sets another count) and return result.json."""

    def run(name: str, out: Path, script: Path = HERE / "spmd_scenarios.py", timeout: float = 300,
            **env: str) -> dict:
        return run_scenario(script, name, out, devices=4, timeout=timeout, prewarmed=prewarmed, **env)

    return run
