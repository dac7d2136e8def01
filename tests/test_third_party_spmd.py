"""A third party writes a one-process-many-devices strategy with public names only (tests/third_party_spmd/)."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

from helpers.prewarmed import Prewarmed
from helpers.xla import run_program, xla_env

PLUGIN_DIR = Path(__file__).resolve().parent / "third_party_spmd"


def test_the_plugin_uses_no_private_name() -> None:
    tree = ast.parse((PLUGIN_DIR / "spmd_plugin.py").read_text())
    private = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            private += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            if node.module != "__future__" and any(p.startswith("_") for p in (node.module or "").split(".")):
                private.append(node.module)
        elif isinstance(node, ast.Import):
            private += [a.name for a in node.names if any(p.startswith("_") for p in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            private.append(node.attr)
    assert private == []


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")
def test_third_party_spmd_strategy_trains_on_four_devices(tmp_path: Path, prewarmed: Prewarmed) -> None:
    proc = run_program([str(PLUGIN_DIR / "scenario.py"), str(tmp_path)], xla_env(devices=4), 240, prewarmed)
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["devices"] == 4
    assert (result["world_size"], result["devices_per_process"]) == (1, 4)
    assert result["sharding"] == "{devices=[4,1]0,1,2,3}"
    assert result["global_step"] == 8
    assert result["diff"] <= 1e-5
