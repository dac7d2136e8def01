"""Tests of the bfloat16 precisions on real XLA (PJRT_DEVICE=CPU).

The fits run in processes of their own (tests/bf16_run.py): the legacy mode changes a process-wide variable, so it
gets a process of its own.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from helpers.xla import run_program, xla_env

if importlib.util.find_spec("accelkit_xla_bf16") is None:  # find_spec: importing the plugin is for the tests below
    pytest.skip("the accelkit-xla-bf16 plugin is not installed", allow_module_level=True)

HERE = Path(__file__).resolve().parent
BF16 = "torch.bfloat16"
F32 = "torch.float32"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, prewarmed):
    """{asked precision: result dict} and the stderr of each process (each forked from the ``prewarmed``
    interpreter, which never imports torch_xla: the program imports it after choosing its variables)."""
    if importlib.util.find_spec("torch_xla") is None:  # not importorskip: that would start torch_xla here
        pytest.skip("torch_xla is not installed")
    root = tmp_path_factory.mktemp("bf16")
    groups = [["32-true", "bf16-true", "bf16-mixed", "16"], ["bf16-legacy"]]
    results, errors = {}, {}
    for group in groups:
        proc = run_program([str(HERE / "bf16_run.py"), str(root), *group],
                           xla_env(devices=None, unset=("XLA_USE_BF16",)), 240, prewarmed)
        out, err = proc.stdout, proc.stderr
        assert proc.returncode == 0, f"fit with {group} failed:\n{err[-4000:]}"
        for line in out.splitlines():
            if line.startswith("{"):
                data = json.loads(line)
                results[data["asked"]] = data
                errors[data["asked"]] = err
    assert sorted(results) == sorted(p for g in groups for p in g)
    return results, errors


def _check_learns(result):
    assert result["losses_finite"]
    assert result["steps"] == 32
    assert result["last_loss"] < 0.5 * result["first_loss"], result


@pytest.mark.slow
@pytest.mark.xla
def test_bf16_true_puts_weights_inputs_and_activations_in_bfloat16(runs):
    result = runs[0]["bf16-true"]
    assert result["precision_class"] == "TruePrecision"
    assert result["seen"] == {"input": [BF16], "param": [BF16], "hidden": [BF16], "logits": [BF16], "loss": [BF16]}
    assert result["device_weight_type"] == "bf16"
    _check_learns(result)


@pytest.mark.slow
@pytest.mark.xla
def test_bf16_mixed_keeps_float32_weights_and_autocasts_matmuls(runs):
    result = runs[0]["bf16-mixed"]
    assert result["precision_class"] == "MixedPrecision"
    # weights and inputs stay float32; the Linear outputs are bfloat16 under autocast; the loss is float32
    assert result["seen"] == {"input": [F32], "param": [F32], "hidden": [BF16], "logits": [BF16], "loss": [F32]}
    assert result["device_weight_type"] == "f32"
    assert result["final_param_dtype"] == F32
    _check_learns(result)


@pytest.mark.slow
@pytest.mark.xla
def test_precision_16_runs_bf16_mixed_with_a_notice(runs):
    results, errors = runs
    result = results["16"]
    assert result["resolved"] == "16-mixed"
    assert result["seen"] == results["bf16-mixed"]["seen"]
    assert errors["16"].count("precision='16-mixed' on XLA runs as bfloat16 mixed precision") == 1
    _check_learns(result)


@pytest.mark.slow
@pytest.mark.xla
def test_32_true_stays_default_and_no_legacy_variable_without_asking(runs):
    results, errors = runs
    result = results["32-true"]
    assert all(v == [F32] for v in result["seen"].values()), result["seen"]
    for asked in ("32-true", "bf16-true", "bf16-mixed", "16"):
        assert results[asked]["XLA_USE_BF16"] is None
    assert "XLA_USE_BF16" not in errors["bf16-mixed"]


@pytest.mark.slow
@pytest.mark.xla
def test_bf16_legacy_sets_the_deprecated_variable_on_request(runs):
    results, errors = runs
    result = results["bf16-legacy"]
    assert result["XLA_USE_BF16"] == "1"
    # PyTorch still reports float32, but the device stores bfloat16: what the legacy variable does
    assert all(v == [F32] for v in result["seen"].values())
    assert result["device_weight_type"] == "bf16"
    assert "precision='bf16-legacy' sets the deprecated XLA_USE_BF16=1" in errors["bf16-legacy"]
    _check_learns(result)


@pytest.mark.slow  # starts a process
def test_records_are_xla_only_and_cheap_to_import(tmp_path, prewarmed):
    code = ("import sys, accelkit_xla_bf16.plugin as p; "
            "print([(r.name, r.aliases, r.accelerators, bool(r.notice)) for r in p.accelkit_register_precisions()],"
            " 'torch_xla' in sys.modules)")
    # forked from the prewarmed interpreter, which imported torch but never torch_xla
    done = prewarmed.run(["-c", code], cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout.strip()
    assert out == ("[('bf16-true', ('bf16_true',), ('xla',), False), ('bf16-mixed', ('bf16',), ('xla',), False), "
                   "('16-mixed', ('16',), ('xla',), True), ('bf16-legacy', (), ('xla',), True)] False")


def test_legacy_precision_rejects_a_conflicting_value(monkeypatch):
    from accelkit_xla_bf16 import XLALegacyBF16Precision

    monkeypatch.setenv("XLA_USE_BF16", "yes")
    with pytest.raises(ValueError, match="XLA_USE_BF16='yes'"):
        XLALegacyBF16Precision().connect(object())


def test_default_precision_on_xla_is_32_true_and_the_xla_bf16_names_are_not_offered_for_cpu(monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.delenv("CPU_NUM_DEVICES", raising=False)
    import accelkit

    assert accelkit.Trainer(accelerator="xla", devices=1, logger=False).precision.name == "32-true"
    with pytest.raises(accelkit.ConfigurationError, match="'bf16-legacy' does not run on accelerator 'cpu'"):
        accelkit.Trainer(accelerator="cpu", precision="bf16-legacy", logger=False)
    # bf16-true on the CPU is the cpu plugin's own (as Lightning's), not this plugin's XLA one
    import torch

    precision = accelkit.Trainer(accelerator="cpu", precision="bf16-true", logger=False).precision
    assert type(precision).__module__ == "accelkit.precision" and precision.dtype == torch.bfloat16
