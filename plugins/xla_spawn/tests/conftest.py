"""Fixtures of the xla_spawn tests: run a scenario file of this folder, or Python code, in a process of its own
with XLA on the host CPU, forked from the ``prewarmed`` interpreter (``helpers.xla``: torch imported, torch_xla
not)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.prewarmed import Prewarmed
from helpers.xla import run_program, xla_env
from helpers.xla import run_scenario as run_scenario_file

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def run_scenario(prewarmed: Prewarmed) -> Callable[..., dict]:
    """``run_scenario(name, outdir, script="xla_scenarios.py", **env)``: run ``script name outdir`` (a file of
    this folder) on one XLA device (``CPU_NUM_DEVICES`` in ``env`` sets more) and return its result.json."""

    def run(name: str, out: Path, timeout: float = 180, script: str = "xla_scenarios.py", **env: str) -> dict:
        return run_scenario_file(HERE / script, name, out, timeout=timeout, prewarmed=prewarmed, **env)

    return run


@pytest.fixture(scope="session")
def run_python(prewarmed: Prewarmed) -> Callable[..., subprocess.CompletedProcess]:
    """``run_python(code, **env)``: run Python code (``python -c``) with the XLA-on-CPU environment (in this folder
    it takes the place of the suite-wide ``run_python`` of ``helpers.fixtures``)."""

    def run(code: str, **env: str) -> subprocess.CompletedProcess:
        return run_program(["-c", code], xla_env(**env), 120, prewarmed)

    return run


@pytest.fixture(scope="session")
def single_run(tmp_path_factory: pytest.TempPathFactory, run_scenario: Callable[..., dict]) -> dict:
    """The result of ``xla_scenarios.py single``, run once for the tests of ``test_xla_single.py`` and
    ``test_xla_spawn.py`` that read it: single-core runs on a host of 2 XLA devices, then a spawn over both refused
    because those runs started the runtime in the (parent) process (its ``touched`` entry)."""
    return run_scenario("single", tmp_path_factory.mktemp("xla_single"), CPU_NUM_DEVICES="2")
