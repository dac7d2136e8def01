"""Tests of the xla_spawn_debug pieces that need no XLA runtime: records, options, the diagnosis rules."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("accelkit_xla_spawn_debug", reason="the accelkit-xla-spawn-debug plugin is not installed")

from accelkit_xla_spawn_debug.monitor import Window, diagnose, render_report, summary  # noqa: E402


def _steps(n, **per_step):
    return [Window("train", i, "fit", shapes=["f32[16,8]"], **per_step) for i in range(1, n + 1)]


@pytest.mark.slow  # starts a process
def test_plugin_registers_names_without_importing_torch_xla(tmp_path, prewarmed):
    code = ("import sys, accelkit_xla_spawn_debug.plugin as p; r = p.accelkit_register_strategies()[0]; "
            "print(r.name, r.aliases, r.accelerators, 'torch_xla' in sys.modules)")
    # forked from the prewarmed interpreter, which imported torch but never torch_xla
    done = prewarmed.run(["-c", code], cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.split() == ["xla_spawn_debug", "('tpu_spawn_debug',)", "('xla',)", "False"]


def test_resolution_picks_single_core_class_for_one_device(monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.delenv("CPU_NUM_DEVICES", raising=False)
    import accelkit
    from accelkit_xla_spawn_debug.strategy import XLASingleDebugStrategy

    trainer = accelkit.Trainer(accelerator="tpu", devices=1, plugins=["tpu_spawn_debug"], logger=False)
    assert type(trainer.strategy) is XLASingleDebugStrategy
    assert trainer.strategy.name == "xla_spawn_debug"
    assert not trainer.strategy.launches_workers


def test_bad_options_name_the_value():
    from accelkit_xla_spawn_debug.strategy import XLASpawnDebugStrategy

    with pytest.raises(ValueError, match="warmup_steps=-1"):
        XLASpawnDebugStrategy(warmup_steps=-1)
    with pytest.raises(ValueError, match="debug_level=3"):
        XLASpawnDebugStrategy(debug_level=3)


def test_warmup_compilations_are_not_flagged():
    windows = _steps(6)
    windows[0].compiles = windows[1].compiles = 1
    assert diagnose(windows, warmup_steps=2) == []
    assert summary(windows, 2)["compilations_in_warmup"] == 2


def test_same_shape_recompilation_gets_control_flow_advice():
    windows = _steps(6)
    windows[4].compiles = 1
    (finding,) = diagnose(windows, warmup_steps=2)
    assert finding.code == "recompilation" and "steps 5" in finding.title
    assert "control flow" in finding.advice


def test_occasional_transfers_from_logging_are_not_flagged_but_frequent_ones_are():
    windows = _steps(52)
    windows[50].transfers_from_device = 1  # the core reads logged values every log_every_n_steps
    assert diagnose(windows, warmup_steps=2) == []
    for w in windows:
        w.transfers_from_device = 1
    assert [f.code for f in diagnose(windows, warmup_steps=2)] == ["host_transfers"]


def test_second_evaluation_pass_compiling_is_flagged():
    windows = _steps(3) + [Window("eval", 1, "validate", compiles=2), Window("eval", 2, "validate", compiles=1)]
    (finding,) = diagnose(windows, warmup_steps=2)
    assert finding.code == "eval_recompilation" and "passes 2" in finding.title


def test_report_text_lists_windows_and_metrics():
    windows = _steps(3)
    text = render_report(0, 1, windows, [], 2, "Metric: CompileTime\n", {"PT_XLA_DEBUG_LEVEL": "2"})
    assert "step 3" in text and "Metric: CompileTime" in text and "PT_XLA_DEBUG_LEVEL=2" in text
