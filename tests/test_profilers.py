"""The profilers record real work: SimpleProfiler counts and times actions, PyTorchProfiler records operators
inside the action ranges; resolve_profiler maps the Trainer argument."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accelkit.profilers import PassThroughProfiler, Profiler, PyTorchProfiler, SimpleProfiler, resolve_profiler


def busy(n: int = 20_000) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def test_simple_profiler_counts_and_times_actions(capsys):
    profiler = SimpleProfiler()
    profiler.setup("fit")
    for _ in range(3):
        with profiler.profile("[LightningModule]Net.training_step"):
            busy()
    profiler.start("[Callback]Printer.on_train_epoch_end")
    busy()
    profiler.stop("[Callback]Printer.on_train_epoch_end")
    durations = profiler.recorded_durations
    assert {name: len(d) for name, d in durations.items()} == {
        "[LightningModule]Net.training_step": 3, "[Callback]Printer.on_train_epoch_end": 1}
    assert all(t > 0 for d in durations.values() for t in d)
    summary = profiler.summary()
    assert "[LightningModule]Net.training_step" in summary and "[Callback]Printer.on_train_epoch_end" in summary
    step_line = next(line for line in summary.splitlines() if "training_step" in line)
    assert step_line.split()[1] == "3"  # the Calls column
    # rows are sorted by the recorded total time, largest first
    by_total = sorted(durations, key=lambda name: sum(durations[name]), reverse=True)
    assert summary.index(by_total[0]) < summary.index(by_total[1])
    profiler.describe()  # no filename: printed (this process is global rank zero)
    assert "training_step" in capsys.readouterr().out


def test_simple_profiler_short_table_and_new_run():
    profiler = SimpleProfiler(extended=False)
    profiler.setup("fit")
    with profiler.profile("a"):
        busy(100)
    header = profiler.summary().splitlines()[2]
    assert "Calls" not in header and "Total (s)" in header
    profiler.setup("test")  # a new run starts empty
    assert profiler.summary() == ""


def test_profile_stops_the_action_when_the_block_raises():
    profiler = SimpleProfiler()
    with pytest.raises(RuntimeError):
        with profiler.profile("fails"):
            raise RuntimeError("boom")
    assert len(profiler.recorded_durations["fails"]) == 1
    with profiler.profile("fails"):  # not left running
        pass


def test_unbalanced_start_and_stop_are_errors():
    profiler = SimpleProfiler()
    with pytest.raises(ValueError, match="'x' was stopped but never started"):
        profiler.stop("x")
    profiler.start("x")
    with pytest.raises(ValueError, match="'x' was started twice"):
        profiler.start("x")


def test_describe_writes_stage_file(tmp_path, capsys):
    profiler = SimpleProfiler(dirpath=tmp_path / "prof", filename="perf")
    profiler.setup("fit", local_rank=0)
    with profiler.profile("step"):
        busy(100)
    profiler.describe()
    text = (tmp_path / "prof" / "fit-perf-0.txt").read_text()
    assert "step" in text and capsys.readouterr().out == ""
    into_log_dir = SimpleProfiler(filename="perf")
    into_log_dir.setup("validate", log_dir=tmp_path / "logs")
    with into_log_dir.profile("val"):
        pass
    into_log_dir.describe()
    assert "val" in (tmp_path / "logs" / "validate-perf.txt").read_text()


def test_a_profiler_with_only_start_and_stop_runs_a_fit_quietly_as_in_lightning(tmp_path, capsys):
    """Lightning's base profiler summarises as "" (nothing written); a user's profiler implementing only start and
    stop ends a fit without error, its actions recorded, no summary file and nothing printed."""
    from torch.utils.data import DataLoader

    from helpers.models import RegressionModule, quiet_trainer, regression_data

    class Recording(Profiler):
        def __init__(self) -> None:
            super().__init__(dirpath=tmp_path / "prof", filename="perf")
            self.actions: list[str] = []

        def start(self, action_name: str) -> None:
            self.actions.append(action_name)

        def stop(self, action_name: str) -> None:
            pass

    profiler = Recording()
    trainer = quiet_trainer(tmp_path, max_steps=2, profiler=profiler, enable_model_summary=False)
    trainer.fit(RegressionModule(), DataLoader(regression_data(), batch_size=8))
    assert profiler.summary() == "" and any("training_step" in action for action in profiler.actions)
    assert not (tmp_path / "prof").exists() and capsys.readouterr().out == ""


def test_pass_through_profiler_records_nothing():
    profiler = PassThroughProfiler()
    with profiler.profile("anything"):
        busy(100)
    assert profiler.summary() == ""


def test_pytorch_profiler_records_operators_inside_actions(tmp_path):
    profiler = PyTorchProfiler(dirpath=tmp_path, filename="torch", export_to_chrome=True, row_limit=-1)
    profiler.setup("fit")
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    for _ in range(2):
        with profiler.profile("[LightningModule]Net.training_step"):
            torch.mm(a, b)
    summary = profiler.summary()
    assert "aten::mm" in summary and "[LightningModule]Net.training_step" in summary
    assert "cpu_time_total" in summary
    profiler.describe()
    assert "aten::mm" in (tmp_path / "fit-torch.txt").read_text()
    assert (tmp_path / "fit-torch.pt.trace.json").stat().st_size > 0


def test_pytorch_profiler_new_session_after_summary():
    profiler = PyTorchProfiler()
    with profiler.profile("first"):
        torch.ones(3).sum()
    assert "first" in profiler.summary()
    with profiler.profile("second"):
        torch.ones(3).sum()
    summary = profiler.summary()
    assert "second" in summary and "first" not in summary


def test_pytorch_profiler_rejects_unknown_arguments():
    with pytest.raises(TypeError, match="'emit_nvtx'"):
        PyTorchProfiler(emit_nvtx=True)


def test_resolve_profiler():
    assert resolve_profiler(None) is None
    assert type(resolve_profiler("simple")) is SimpleProfiler
    assert type(resolve_profiler("PyTorch")) is PyTorchProfiler
    mine = SimpleProfiler(extended=False)
    assert resolve_profiler(mine) is mine
    with pytest.raises(ValueError, match="'advanced'.*not available.*'simple'.*'pytorch'"):
        resolve_profiler("advanced")
    with pytest.raises(ValueError, match="profiler='fast'.*'simple', 'pytorch'"):
        resolve_profiler("fast")
    with pytest.raises(ValueError, match="profiler=True"):
        resolve_profiler(True)
    assert issubclass(PyTorchProfiler, Profiler)


def test_profilers_cross_processes_by_pickle():
    import pickle

    profiler = PyTorchProfiler()
    with profiler.profile("before"):
        torch.ones(2).sum()
    profiler.summary()
    copy = pickle.loads(pickle.dumps(profiler))  # a spawned worker gets a fresh profiler state
    with copy.profile("in_worker"):
        torch.ones(2).sum()
    assert "in_worker" in copy.summary()
    simple = pickle.loads(pickle.dumps(SimpleProfiler()))
    with simple.profile("x"):
        pass
    assert len(simple.recorded_durations["x"]) == 1
