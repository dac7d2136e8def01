"""The lines that end a fit from Python (:mod:`accelkit.trainer.summary`, the home the ``accelkit`` command
reuses): why it stopped, what it measured, where its checkpoints and logs are; quiet without a progress bar."""

from __future__ import annotations

import os

import pytest
from torch.utils.data import DataLoader

import accelkit
from accelkit.callbacks import EarlyStopping, Timer
from helpers.models import RegressionModule, regression_data


def summary_lines(out: str) -> list[str]:
    """The summary's lines: from "accelkit: fit stopped" on, those of accelkit."""
    lines = [line for line in out.splitlines() if line.startswith("accelkit: ")]
    first = next((i for i, line in enumerate(lines) if line.startswith("accelkit: fit stopped: ")), len(lines))
    return lines[first:]


def trainer(tmp_path, **kwargs) -> accelkit.Trainer:
    options = dict(accelerator="cpu", devices=1, default_root_dir=tmp_path, enable_model_summary=False)
    options.update(kwargs)
    return accelkit.Trainer(**options)


def test_a_fit_ends_with_why_it_stopped_and_where_its_files_are(tmp_path, capsys):
    run = trainer(tmp_path, max_epochs=2)
    run.fit(RegressionModule())
    lines = summary_lines(capsys.readouterr().out)
    assert lines[0].startswith("accelkit: fit stopped: max_epochs=2 reached; 2 epoch(s), 8 step(s) in "), lines
    assert "val_loss=" in lines[0] and "train_loss=" in lines[0]
    callback = run.checkpoint_callback
    # the default callback writes Lightning's one file (no last.ckpt): its latest, which is best_model_path
    assert lines[1] == f"accelkit: checkpoints in {callback.dirpath} (best {callback.best_model_path})", lines
    assert callback.last_model_path == "" and os.listdir(callback.dirpath) == ["epoch=1-step=8.ckpt"]
    assert os.path.isfile(callback.best_model_path)
    assert lines[2] == f"accelkit: logs in {run.log_dir}" and os.path.isdir(run.log_dir)
    assert len(lines) == 3


def test_a_second_run_in_the_same_folder_names_its_own_checkpoint(tmp_path, capsys):
    first = trainer(tmp_path, max_epochs=1)
    first.fit(RegressionModule())
    capsys.readouterr()
    second = trainer(tmp_path, max_epochs=1)
    second.fit(RegressionModule())
    lines = summary_lines(capsys.readouterr().out)
    latest = second.checkpoint_callback.best_model_path
    # each run writes into its own version folder: the summary names this run's file, not the first run's
    assert latest != first.checkpoint_callback.best_model_path and f"(best {latest})" in lines[1], lines


@pytest.mark.parametrize("options, reason", [
    (dict(max_epochs=50, max_steps=6), "max_steps=6 reached"),
    (dict(max_epochs=50, callbacks=[EarlyStopping("val_loss", patience=1, min_delta=100.0)]),
     "early stopping on val_loss (patience exhausted)"),
    (dict(max_epochs=50, callbacks=[Timer(duration=dict(seconds=0))]), "Timer(duration=0:00:00) reached"),
    (dict(max_epochs=100_000, max_time=dict(seconds=1)), "max_time=0:00:01 reached"),
    (dict(fast_dev_run=2), "fast_dev_run=2 done"),
])
def test_the_summary_says_which_rule_stopped_the_fit(tmp_path, capsys, options, reason):
    trainer(tmp_path, **options).fit(RegressionModule())
    lines = summary_lines(capsys.readouterr().out)
    assert lines and lines[0].startswith(f"accelkit: fit stopped: {reason};"), lines


class StopsItself(RegressionModule):
    def on_train_epoch_end(self) -> None:
        self.trainer.should_stop = True


def test_a_stop_the_module_asked_for_is_named(tmp_path, capsys):
    trainer(tmp_path, max_epochs=5).fit(StopsItself())
    assert summary_lines(capsys.readouterr().out)[0].startswith(
        "accelkit: fit stopped: trainer.should_stop was set; 1 epoch(s)")


@pytest.mark.parametrize("options", [dict(enable_progress_bar=False), dict(barebones=True)])
def test_the_summary_is_quiet_without_a_progress_bar(tmp_path, capsys, options):
    trainer(tmp_path, max_epochs=1, **options).fit(RegressionModule(), DataLoader(regression_data(8), batch_size=4))
    assert summary_lines(capsys.readouterr().out) == []


def test_without_logger_or_checkpoints_only_the_reason_is_printed(tmp_path, capsys):
    trainer(tmp_path, max_epochs=1, logger=False, enable_checkpointing=False).fit(RegressionModule())
    lines = summary_lines(capsys.readouterr().out)
    assert len(lines) == 1 and lines[0].startswith("accelkit: fit stopped: max_epochs=1 reached"), lines


@pytest.mark.slow
def test_a_fit_in_worker_processes_brings_its_reason_back_to_the_caller(tmp_path, capsys):
    # ddp_fork: the reason comes back with rank 0's result, handed back by the launcher ddp_spawn uses too (only the
    # start method differs; spawned workers would add two fresh interpreters importing torch)
    run = trainer(tmp_path, devices=2, strategy="ddp_fork", max_epochs=20,
                  callbacks=[EarlyStopping("val_loss", patience=1, min_delta=100.0)])
    run.fit(RegressionModule())
    lines = summary_lines(capsys.readouterr().out)
    assert lines[0].startswith("accelkit: fit stopped: early stopping on val_loss (patience exhausted);"), lines
    assert run.run_state.stop_reason == "early stopping on val_loss (patience exhausted)"
    assert sum(line.startswith("accelkit: fit stopped") for line in lines) == 1  # the caller prints, once
