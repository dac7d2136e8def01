"""The built-in callbacks (ModelCheckpoint, EarlyStopping, LearningRateMonitor) driven by the real Trainer on one
CPU process: files on disk, best-k bookkeeping, stopping epochs, logged learning rates, state in checkpoints."""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason  # noqa: E402
from accelkit.callbacks.lr_monitor import LearningRateMonitor  # noqa: E402
from accelkit.callbacks.model_checkpoint import ModelCheckpoint  # noqa: E402
from accelkit.loggers import CSVLogger  # noqa: E402
from helpers.fixtures import lightning_records  # noqa: E402
from helpers.guards import child_env  # noqa: E402
from helpers.models import RegressionModule, quiet_trainer, regression_data  # noqa: E402


class Scripted(accelkit.Module):
    """A linear regression whose logged ``val_loss`` (and ``score`` at training epoch end) follow a script,
    one value per epoch, so which epochs are best is known in advance. 4 training batches per epoch."""

    def __init__(self, val_losses: list[float] | None = None, scores: list[float] | None = None,
                 lr: float = 0.05) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.val_losses, self.scores, self.lr = val_losses, scores, lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def on_train_epoch_end(self) -> None:
        if self.scores is not None:
            self.log("score", float(self.scores[self.current_epoch]))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.val_losses is not None:
            self.log("val_loss", float(self.val_losses[self.current_epoch]))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(32), batch_size=8)

    def val_dataloader(self) -> DataLoader | None:
        return DataLoader(regression_data(8, seed=1), batch_size=8) if self.val_losses is not None else None

    def test_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(8, seed=2), batch_size=8)


def make_trainer(root: Path, **kwargs: Any) -> accelkit.Trainer:
    options = dict(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=root)
    options.update(kwargs)
    return accelkit.Trainer(**options)


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def load(path: str | Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


# ---------------------------------------------------------------------------------------------- ModelCheckpoint
def test_public_names():
    import accelkit.callbacks as callbacks

    assert callbacks.ModelCheckpoint is ModelCheckpoint
    assert callbacks.EarlyStopping is EarlyStopping
    assert callbacks.LearningRateMonitor is LearningRateMonitor


def test_top_k_by_monitored_metric(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_loss", save_top_k=2, save_last=True,
                                 filename="{epoch}-{val_loss:.2f}")
    trainer = make_trainer(tmp_path, max_epochs=5, callbacks=[checkpoint])
    trainer.fit(Scripted(val_losses=[0.5, 0.4, 0.6, 0.3, 0.45]))
    folder = tmp_path / "ckpt"
    # epoch 0 (0.5) was in the top 2 until epoch 3 pushed it out: its file is gone
    assert names(folder) == ["epoch=1-val_loss=0.40.ckpt", "epoch=3-val_loss=0.30.ckpt", "last.ckpt"]
    best, second = str(folder / "epoch=3-val_loss=0.30.ckpt"), str(folder / "epoch=1-val_loss=0.40.ckpt")
    assert checkpoint.best_model_path == best
    assert isinstance(checkpoint.best_model_score, torch.Tensor)
    assert checkpoint.best_model_score.item() == pytest.approx(0.3)
    assert {k: round(v.item(), 4) for k, v in checkpoint.best_k_models.items()} == {best: 0.3, second: 0.4}
    assert checkpoint.kth_best_model_path == second
    assert checkpoint.last_model_path == str(folder / "last.ckpt")
    last = load(folder / "last.ckpt")
    assert last["epoch"] == 4 and last["global_step"] == 20
    assert load(best)["global_step"] == 16
    state = last["callbacks"][checkpoint.state_key]
    assert state["best_model_path"] == best and state["last_model_path"] == str(folder / "last.ckpt")
    assert trainer.checkpoint_callback is checkpoint



class DoubleLoss(Scripted):
    """``Scripted`` whose ``val_loss`` is a float64 tensor, as a module computing its loss in double precision logs
    it (Novartis/AEGIS's transformer returns ``output.double()``)."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.tensor(self.val_losses[self.current_epoch], dtype=torch.float64))


def test_a_double_precision_monitored_metric_keeps_its_precision(tmp_path):
    """As Lightning: ``EarlyStopping.best_score`` and ``ModelCheckpoint.best_model_score`` of a float64 metric are
    the float64 value itself (accelkit rounded them to float32: 0.1 became 0.10000000149011612)."""
    early = EarlyStopping(monitor="val_loss", patience=5)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_loss")
    make_trainer(tmp_path, max_epochs=2, callbacks=[early, checkpoint]).fit(DoubleLoss(val_losses=[0.1, 0.2]))
    for score in (early.best_score, checkpoint.best_model_score):
        assert score is not None and score.dtype == torch.float64 and score.item() == 0.1, score

def test_mode_max_and_save_all(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", mode="max", save_top_k=-1)
    make_trainer(tmp_path / "root", max_epochs=3, callbacks=[checkpoint]).fit(Scripted(val_losses=[0.5, 0.7, 0.6]))
    assert names(tmp_path) == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"]
    assert checkpoint.best_model_path == str(tmp_path / "epoch=1-step=8.ckpt")
    assert len(checkpoint.best_k_models) == 3


def test_save_top_k_zero_keeps_only_last(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=0, save_last=True)
    make_trainer(tmp_path / "root", max_epochs=2, callbacks=[checkpoint]).fit(Scripted(val_losses=[0.5, 0.4]))
    assert names(tmp_path) == ["last.ckpt"]
    assert checkpoint.best_model_path == "" and checkpoint.best_k_models == {}


def test_without_monitor_keeps_the_latest(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path)
    make_trainer(tmp_path / "root", max_epochs=3, callbacks=[checkpoint]).fit(Scripted())
    assert names(tmp_path) == ["epoch=2-step=12.ckpt"]
    assert checkpoint.best_model_path == str(tmp_path / "epoch=2-step=12.ckpt")


def test_default_folder_follows_logger_or_root(tmp_path):
    with_logger = ModelCheckpoint()
    trainer = make_trainer(tmp_path / "a", max_epochs=1, logger=True, callbacks=[with_logger])
    trainer.fit(Scripted())
    assert Path(with_logger.dirpath) == Path(trainer.log_dir) / "checkpoints"
    assert names(Path(with_logger.dirpath)) == ["epoch=0-step=4.ckpt"]
    without = ModelCheckpoint()
    make_trainer(tmp_path / "b", max_epochs=1, callbacks=[without]).fit(Scripted())
    assert Path(without.dirpath) == tmp_path / "b" / "checkpoints"
    assert names(tmp_path / "b" / "checkpoints") == ["epoch=0-step=4.ckpt"]


def test_every_n_train_steps(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}")
    make_trainer(tmp_path / "root", max_epochs=2, callbacks=[checkpoint]).fit(Scripted())
    assert names(tmp_path) == ["step=3.ckpt", "step=6.ckpt"]


def test_every_n_epochs(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", every_n_epochs=2, save_top_k=-1,
                                 filename="{epoch}")
    make_trainer(tmp_path / "root", max_epochs=4, callbacks=[checkpoint]).fit(
        Scripted(val_losses=[0.5, 0.4, 0.3, 0.2]))
    assert names(tmp_path) == ["epoch=1.ckpt", "epoch=3.ckpt"]


def test_train_time_interval_and_weights_only(tmp_path):
    # an interval shorter than any step: a checkpoint after every step, none at the epoch ends
    checkpoint = ModelCheckpoint(dirpath=tmp_path, train_time_interval=timedelta(microseconds=1), save_top_k=-1,
                                 filename="{step}", save_weights_only=True)
    make_trainer(tmp_path / "root", max_epochs=1, callbacks=[checkpoint]).fit(Scripted())
    assert names(tmp_path) == ["step=1.ckpt", "step=2.ckpt", "step=3.ckpt", "step=4.ckpt"]
    saved = load(tmp_path / "step=4.ckpt")
    assert "state_dict" in saved and "optimizer_states" not in saved and saved["global_step"] == 4


def test_version_counter_on_name_clash(tmp_path):
    (tmp_path / "epoch=0-step=4.ckpt").write_bytes(b"an older run's file")
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)
    with pytest.warns(UserWarning, match="not empty"):
        make_trainer(tmp_path / "root", max_epochs=1, callbacks=[checkpoint]).fit(Scripted())
    assert names(tmp_path) == ["epoch=0-step=4-v1.ckpt", "epoch=0-step=4.ckpt"]
    assert (tmp_path / "epoch=0-step=4.ckpt").read_bytes() == b"an older run's file"


def test_last_reuses_the_top_k_file_just_written(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_last=True)
    make_trainer(tmp_path / "root", max_epochs=2, callbacks=[checkpoint]).fit(Scripted(val_losses=[0.5, 0.6]))
    # epoch 1 is not the best: last.ckpt holds epoch 1's state, the best file epoch 0's
    assert load(tmp_path / "last.ckpt")["global_step"] == 8
    assert load(checkpoint.best_model_path)["global_step"] == 4
    linked = ModelCheckpoint(dirpath=tmp_path / "linked", monitor="val_loss", save_last=True)
    make_trainer(tmp_path / "root2", max_epochs=2, callbacks=[linked]).fit(Scripted(val_losses=[0.5, 0.4]))
    assert os.path.samefile(tmp_path / "linked" / "last.ckpt", linked.best_model_path)
    assert load(tmp_path / "linked" / "last.ckpt")["global_step"] == 8


def test_missing_monitor_is_a_clear_error(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_acc")
    trainer = make_trainer(tmp_path / "root", max_epochs=2, callbacks=[checkpoint])
    with pytest.raises(accelkit.ConfigurationError, match=r"val_acc.*val_loss"):
        trainer.fit(Scripted(val_losses=[0.5, 0.4]))


def test_nothing_saved_in_sanity_check_or_fast_dev_run(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "a", monitor="val_loss", save_top_k=-1)
    make_trainer(tmp_path / "root", max_epochs=1, num_sanity_val_steps=1, callbacks=[checkpoint]).fit(
        Scripted(val_losses=[0.5]))
    assert names(tmp_path / "a") == ["epoch=0-step=4.ckpt"]
    fast = ModelCheckpoint(dirpath=tmp_path / "b", save_last=True)
    make_trainer(tmp_path / "root2", fast_dev_run=True, callbacks=[fast]).fit(Scripted(val_losses=[0.5]))
    assert not (tmp_path / "b").exists()


def test_bad_arguments_are_all_reported():
    with pytest.raises(accelkit.ConfigurationError) as info:
        ModelCheckpoint(mode="best", save_top_k=-2, every_n_epochs=2, every_n_train_steps=3)
    assert len(info.value.problems) == 3
    with pytest.raises(accelkit.ConfigurationError, match="monitor=None"):
        ModelCheckpoint(save_top_k=3)


def test_state_survives_resume_and_best_is_loadable(tmp_path):
    scores = [0.5, 0.3, 0.6, 0.2]
    first = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_loss", save_top_k=2, save_last=True)
    make_trainer(tmp_path, max_epochs=2, callbacks=[first]).fit(Scripted(val_losses=scores))
    resumed = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_loss", save_top_k=2, save_last=True)
    trainer = make_trainer(tmp_path, max_epochs=4, callbacks=[resumed])
    model = Scripted(val_losses=scores)
    with pytest.warns(UserWarning, match="exists and is not empty"):  # as Lightning warns
        trainer.fit(model, ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert trainer.current_epoch == 4
    # the best two over both runs: epoch 3 (0.2) and epoch 1 (0.3, from the first run)
    assert sorted(Path(p).name for p in resumed.best_k_models) == ["epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt"]
    assert resumed.best_model_path == str(tmp_path / "ckpt" / "epoch=3-step=16.ckpt")
    assert names(tmp_path / "ckpt") == ["epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt", "last.ckpt"]
    # ckpt_path="best": the test runs on the weights of the best file, not the final ones
    best_weights = load(resumed.best_model_path)["state_dict"]
    with torch.no_grad():
        model.layer.weight.add_(1.0)
    trainer.test(model, ckpt_path="best")
    for key, value in best_weights.items():
        torch.testing.assert_close(model.state_dict()[key], value)


def test_the_state_keeps_a_relative_folder_as_lightning_does_and_resumes_after_the_run_moved(tmp_path, monkeypatch):
    """Lightning's state (``dirpath``, ``best_model_path``, ``best_k_models``...) names the default folder as the
    relative ``default_root_dir`` or logger ``save_dir`` gave it (accelkit stored absolute paths, so a run folder
    moved or resumed from another working directory lost its top-k with a warning); a changed folder gets Lightning's
    warning."""
    first = tmp_path / "first"
    first.mkdir()
    monkeypatch.chdir(first)
    scores = [0.5, 0.3, 0.6, 0.2]

    def checkpoint(**kwargs: Any) -> ModelCheckpoint:
        return ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True, **kwargs)

    callback = checkpoint()
    make_trainer("./runs", max_epochs=2, callbacks=[callback]).fit(Scripted(val_losses=scores))
    state = next(value for key, value in load("runs/checkpoints/last.ckpt")["callbacks"].items()
                 if key.startswith("ModelCheckpoint"))
    assert (state["dirpath"], state["best_model_path"], state["last_model_path"], state["kth_best_model_path"]) == (
        "runs/checkpoints", "runs/checkpoints/epoch=1-step=8.ckpt", "runs/checkpoints/last.ckpt",
        "runs/checkpoints/epoch=0-step=4.ckpt")
    assert sorted(state["best_k_models"]) == ["runs/checkpoints/epoch=0-step=4.ckpt",
                                              "runs/checkpoints/epoch=1-step=8.ckpt"]
    logged = checkpoint()
    make_trainer("./runs", max_epochs=1, callbacks=[logged],
                 logger=CSVLogger("./logs")).fit(Scripted(val_losses=scores))
    assert logged.best_model_path == "./logs/lightning_logs/version_0/checkpoints/epoch=0-step=4.ckpt"

    moved = tmp_path / "moved"
    first.rename(moved)
    monkeypatch.chdir(moved)
    resumed = checkpoint()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer("./runs", max_epochs=4, callbacks=[resumed]).fit(Scripted(val_losses=scores),
                                                                      ckpt_path="runs/checkpoints/last.ckpt")
    assert not [w for w in caught if "dirpath has changed" in str(w.message)]
    assert not _outside_warnings(caught)  # the relative paths of a moved run resolve inside its folder
    # the top two over both runs: epoch 3 (0.2) and epoch 1 (0.3, from before the move)
    assert sorted(resumed.best_k_models) == ["runs/checkpoints/epoch=1-step=8.ckpt",
                                             "runs/checkpoints/epoch=3-step=16.ckpt"]
    assert names(moved / "runs" / "checkpoints") == ["epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt", "last.ckpt"]

    elsewhere = checkpoint(dirpath="elsewhere")
    with pytest.warns(UserWarning, match=r"The dirpath has changed from 'runs/checkpoints' to '.*elsewhere', "
                                         r"therefore `best_model_score`, `kth_best_model_path`, `kth_value`, "
                                         r"`last_model_path` and `best_k_models` won't be reloaded. Only "
                                         r"`best_model_path` will be reloaded."):
        make_trainer("./runs", max_epochs=5, callbacks=[elsewhere]).fit(Scripted(val_losses=[*scores, 0.9]),
                                                                        ckpt_path="runs/checkpoints/last.ckpt")


# ---------------------------------------------------------------------------------------------- monitors_metrics
class EpochEndProbe(accelkit.Callback):
    """Records, at each ``on_train_epoch_end``, whether the Module's ``on_train_epoch_end`` had logged yet."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.seen.append("module_epoch_end" in trainer.callback_metrics)


class MonitoringProbe(EpochEndProbe):
    monitors_metrics = True  # a third party's callback saying it monitors metrics, as ModelCheckpoint does


class LogsAtEpochEnd(RegressionModule):
    def on_train_epoch_end(self) -> None:
        self.log("module_epoch_end", 1.0)


def test_a_callback_that_monitors_metrics_runs_after_the_modules_epoch_end(tmp_path):
    plain, monitoring = EpochEndProbe(), MonitoringProbe()
    quiet_trainer(tmp_path, max_epochs=1, callbacks=[monitoring, plain]).fit(LogsAtEpochEnd())
    assert (plain.seen, monitoring.seen) == ([False], [True])


def test_checkpointing_and_early_stopping_monitor_metrics():
    from accelkit.callbacks.base import monitors_metrics

    assert ModelCheckpoint.monitors_metrics and EarlyStopping.monitors_metrics
    assert not accelkit.Callback.monitors_metrics and not LearningRateMonitor.monitors_metrics
    assert monitors_metrics(EarlyStopping(monitor="val_loss")) and not monitors_metrics(EpochEndProbe())


# ---------------------------------------------------------------------------------------------- EarlyStopping
def test_early_stopping_after_patience(tmp_path):
    stopper = EarlyStopping(monitor="val_loss", patience=2)
    trainer = make_trainer(tmp_path, max_epochs=10, callbacks=[stopper])
    trainer.fit(Scripted(val_losses=[0.5, 0.4, 0.45, 0.41, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1]))
    assert stopper.stopped_epoch == 3 and trainer.current_epoch == 4
    assert stopper.wait_count == 2 and stopper.best_score.item() == pytest.approx(0.4)
    assert stopper.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert "did not improve in the last 2 records" in stopper.stopping_reason_message
    assert trainer.early_stopping_callback is stopper


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_early_stopping_state_resumes_across_lightnings_and_accelkits_checkpoints(tmp_path):
    """Lightning 2.6.6 saves ``stopping_reason`` as its ``EarlyStoppingReason`` number; accelkit saved its name, so
    accelkit's resume from a Lightning checkpoint with EarlyStopping state failed (``KeyError: 3``) and Lightning's
    from accelkit's state (``ValueError: 'PATIENCE_EXHAUSTED' is not a valid EarlyStoppingReason``). Now accelkit
    saves the number: both fit alike, and each Trainer resumes from the other's checkpoint (epoch 1, before the stop,
    and epoch 3, where patience ran out) as from its own, the callback's state at the resumed run's start and end
    (reason, message, counters, best score, ``trainer.early_stopping_callback``) and the epochs it runs the same
    (``helpers.early_stopping_resume``; Lightning reads accelkit's callback states within its own checkpoint)."""
    from helpers.early_stopping_resume import SCENARIOS, record

    ours = {"save": record("accelkit", str(tmp_path / "save_accelkit"), "save")}
    theirs = lightning_records(tmp_path, "early_stopping_resume")
    for scenario in SCENARIOS:
        if scenario != "save":
            ours[scenario] = record("accelkit", str(tmp_path / f"accelkit_{scenario}"), scenario)
    assert ours == theirs
    assert ours["resume_3_from_lightning"] == ours["resume_3_from_accelkit"]
    assert ours["resume_3_from_accelkit"]["start"][1:3] == ["PATIENCE_EXHAUSTED", 3]


def test_early_stopping_reads_the_reason_by_number_or_by_its_older_name():
    """A checkpoint of an earlier accelkit named the reason; those still load. A reason that is neither is refused
    naming it and the reasons there are."""
    stopper = EarlyStopping(monitor="val_loss")
    saved = stopper.state_dict()
    assert saved["stopping_reason"] == 0
    stopper.load_state_dict({**saved, "stopping_reason": "STOPPING_THRESHOLD"})
    assert stopper.stopping_reason is EarlyStoppingReason.STOPPING_THRESHOLD
    stopper.load_state_dict({**saved, "stopping_reason": 4})
    assert stopper.stopping_reason is EarlyStoppingReason.NON_FINITE_METRIC
    with pytest.raises(ValueError, match=r"stopping_reason=7 is not a stopping reason; expected one of 0 "
                                         r"\(NOT_STOPPED\), 1 \(STOPPING_THRESHOLD\)"):
        stopper.load_state_dict({**saved, "stopping_reason": 7})


def test_early_stopping_min_delta_and_thresholds(tmp_path):
    delta = EarlyStopping(monitor="val_loss", mode="max", min_delta=0.1, patience=1)
    quiet = dict(max_epochs=5, enable_checkpointing=False)
    make_trainer(tmp_path, callbacks=[delta], **quiet).fit(Scripted(val_losses=[0.5, 0.55, 0.9, 0.9, 0.9]))
    assert delta.stopped_epoch == 1  # +0.05 is within min_delta: no improvement
    threshold = EarlyStopping(monitor="val_loss", stopping_threshold=0.1)
    trainer = make_trainer(tmp_path, callbacks=[threshold], **quiet)
    trainer.fit(Scripted(val_losses=[0.5, 0.05, 0.01, 0.01, 0.01]))
    assert trainer.current_epoch == 2 and threshold.stopping_reason is EarlyStoppingReason.STOPPING_THRESHOLD
    diverged = EarlyStopping(monitor="val_loss", divergence_threshold=1.0)
    make_trainer(tmp_path, callbacks=[diverged], **quiet).fit(Scripted(val_losses=[0.5, 2.0, 0.1, 0.1, 0.1]))
    assert diverged.stopped_epoch == 1 and diverged.stopping_reason is EarlyStoppingReason.DIVERGENCE_THRESHOLD
    finite = EarlyStopping(monitor="val_loss")
    make_trainer(tmp_path, callbacks=[finite], **quiet).fit(
        Scripted(val_losses=[0.5, float("nan"), 0.1, 0.1, 0.1]))
    assert finite.stopped_epoch == 1 and finite.stopping_reason is EarlyStoppingReason.NON_FINITE_METRIC


def test_early_stopping_without_validation_checks_at_epoch_end(tmp_path):
    stopper = EarlyStopping(monitor="score", mode="max", patience=1)
    trainer = make_trainer(tmp_path, max_epochs=6, callbacks=[stopper])
    try:
        trainer.fit(Scripted(scores=[1.0, 2.0, 1.5, 3.0, 3.0, 3.0]))
    except RuntimeError as exc:  # Lightning: module hook, then epoch-end metrics published, then monitoring cbs
        pytest.fail("Trainer: what the Module logs in on_train_epoch_end must be in trainer.callback_metrics "
                    f"before EarlyStopping/ModelCheckpoint.on_train_epoch_end run; got: {exc}")
    assert stopper.stopped_epoch == 2 and trainer.current_epoch == 3


def test_early_stopping_missing_metric(tmp_path):
    strict = EarlyStopping(monitor="val_acc")
    with pytest.raises(RuntimeError, match=r"val_acc.*val_loss"):
        make_trainer(tmp_path, max_epochs=2, enable_checkpointing=False, callbacks=[strict]).fit(
            Scripted(val_losses=[0.5, 0.4]))
    lenient = EarlyStopping(monitor="val_acc", strict=False)
    trainer = make_trainer(tmp_path, max_epochs=2, enable_checkpointing=False, callbacks=[lenient])
    trainer.fit(Scripted(val_losses=[0.5, 0.4]))
    assert trainer.current_epoch == 2 and lenient.stopping_reason is EarlyStoppingReason.NOT_STOPPED


def test_early_stopping_state_round_trips_through_a_checkpoint(tmp_path):
    stopper = EarlyStopping(monitor="val_loss", patience=3)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    make_trainer(tmp_path, max_epochs=3, callbacks=[stopper, checkpoint]).fit(
        Scripted(val_losses=[0.5, 0.6, 0.7, 0.8, 0.9]))
    state = load(tmp_path / "ckpt" / "last.ckpt")["callbacks"][stopper.state_key]
    assert state["wait_count"] == 2 and state["best_score"].item() == pytest.approx(0.5)
    resumed = EarlyStopping(monitor="val_loss", patience=3)
    trainer = make_trainer(tmp_path, max_epochs=5, enable_checkpointing=False, callbacks=[resumed])
    trainer.fit(Scripted(val_losses=[0.5, 0.6, 0.7, 0.8, 0.9]), ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert resumed.stopped_epoch == 3 and trainer.current_epoch == 4  # the wait continued from 2


# ---------------------------------------------------------------------------------------------- LearningRateMonitor
class TwoGroups(Scripted):
    """SGD with two named parameter groups and a per-epoch StepLR named in its configuration."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD([{"params": [self.layer.weight], "name": "weight"},
                                     {"params": [self.layer.bias], "name": "bias", "lr": 0.2}],
                                    lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}


def logged(trainer: accelkit.Trainer, column: str) -> list[tuple[int, float]]:
    with open(Path(trainer.logger.log_dir) / "metrics.csv", newline="") as handle:
        return [(int(row["step"]), float(row[column])) for row in csv.DictReader(handle) if row.get(column)]


def test_lr_monitor_logs_each_epoch(tmp_path):
    monitor = LearningRateMonitor(logging_interval="epoch", log_momentum=True)
    trainer = make_trainer(tmp_path, max_epochs=3, logger=CSVLogger(tmp_path), callbacks=[monitor])
    trainer.fit(TwoGroups())
    assert logged(trainer, "lr-SGD/weight") == [(0, 0.1), (4, 0.05), (8, 0.025)]
    assert logged(trainer, "lr-SGD/bias") == [(0, 0.2), (4, 0.1), (8, 0.05)]
    assert [v for _, v in logged(trainer, "lr-SGD/weight-momentum")] == [0.9, 0.9, 0.9]
    assert monitor.lrs["lr-SGD/weight"] == [0.1, 0.05, 0.025]
    assert trainer.callback_metrics["lr-SGD/bias"].item() == pytest.approx(0.05)


def test_lr_monitor_logs_every_n_steps(tmp_path):
    monitor = LearningRateMonitor(logging_interval="step")
    trainer = make_trainer(tmp_path, max_epochs=2, logger=CSVLogger(tmp_path), log_every_n_steps=2,
                           callbacks=[monitor])
    trainer.fit(Scripted(lr=0.03))
    # before steps 2, 4, 6, 8 (global_step + 1 a multiple of 2), with the step count of the moment
    assert logged(trainer, "lr-SGD") == [(1, 0.03), (3, 0.03), (5, 0.03), (7, 0.03)]


def test_lr_monitor_needs_a_logger(tmp_path):
    with pytest.raises(accelkit.ConfigurationError, match="logger"):
        make_trainer(tmp_path, max_epochs=1, callbacks=[LearningRateMonitor()]).fit(Scripted())
    with pytest.raises(accelkit.ConfigurationError, match="logging_interval"):
        LearningRateMonitor(logging_interval="batch")


# ---------------------------------------------------------------------------------------------- device statistics
@pytest.fixture(scope="module")
def lightning_device_stats(tmp_path_factory) -> dict[str, dict[str, list[int]]]:
    """Where Lightning's ``DeviceStatsMonitor`` wrote in every scenario of ``helpers.device_stats_steps`` (one
    process: Lightning's Trainer imports torch_xla)."""
    pytest.importorskip("psutil", reason="the CPU's figures are read with psutil (Lightning's and accelkit's)")
    return lightning_records(tmp_path_factory.mktemp("lightning_device_stats"), "device_stats_steps")


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["every_2", "every_1", "accumulate_2", "val_mid_epoch_every_3",
                                      "stop_requested", "no_cpu_stats"])
def test_device_stats_monitor_writes_lightnings_columns_at_lightnings_steps(tmp_path, lightning_device_stats,
                                                                             scenario):
    """``DeviceStatsMonitor`` on the CPU under accelkit's Trainer and Lightning's, with a CSV logger: the same
    columns (``DeviceStatsMonitor.<hook>/<figure>``: the host's ``cpu_percent``, ``cpu_vm_percent`` and
    ``cpu_swap_percent`` at the start and end of training, validation, sanity-check and test batches) filled at
    the same rows' steps, with ``log_every_n_steps`` 1, 2 and 3, gradient accumulation, validation in the middle of
    an epoch, a stop requested (every batch after it logs), and ``cpu_stats=False`` (nothing on the CPU)."""
    from helpers.device_stats_steps import record

    ours = record("accelkit", str(tmp_path), scenario)
    assert ours == lightning_device_stats[scenario]
    if scenario == "every_2":
        assert "DeviceStatsMonitor.on_test_batch_end/cpu_percent" in ours  # the test batches too
        assert ours["DeviceStatsMonitor.on_train_batch_start/cpu_vm_percent"] == [1, 3, 5, 7, 9]


def test_device_stats_monitor_refuses_what_it_cannot_do(tmp_path, monkeypatch):
    from accelkit.callbacks import DeviceStatsMonitor

    with pytest.raises(TypeError, match=r"cpu_stats='yes'.*True, False or None"):
        DeviceStatsMonitor(cpu_stats="yes")
    with pytest.raises(accelkit.ConfigurationError, match="DeviceStatsMonitor writes to the Trainer's loggers"):
        make_trainer(tmp_path, max_epochs=1, logger=False, callbacks=[DeviceStatsMonitor()]).fit(Scripted())
    monkeypatch.setitem(sys.modules, "psutil", None)  # as if psutil were not installed: its import fails
    with pytest.raises(ModuleNotFoundError, match="psutil, not installed: pip install psutil, or pass cpu_stats"):
        make_trainer(tmp_path, max_epochs=1, logger=CSVLogger(tmp_path),
                     callbacks=[DeviceStatsMonitor()]).fit(Scripted())
    # without the host's figures, nothing is asked of psutil on the CPU: the fit runs and writes no figure
    trainer = make_trainer(tmp_path / "off", max_epochs=1, logger=CSVLogger(tmp_path / "off"),
                           callbacks=[DeviceStatsMonitor(cpu_stats=False)])
    trainer.fit(Scripted())
    with open(Path(trainer.logger.log_dir) / "metrics.csv", newline="") as handle:
        assert not [name for name in next(csv.reader(handle)) if name.startswith("DeviceStatsMonitor")]


# ---------------------------------------------------------------------------------------------- two processes
class RankScripted(Scripted):
    """Each rank logs its own ``val_loss`` (no ``sync_dist``): rank 0 keeps improving, rank 1 stops at epoch 1."""

    SCRIPTS = ([0.5, 0.4, 0.3, 0.2, 0.1, 0.05], [0.5, 0.6, 0.7, 0.8, 0.9, 1.0])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.SCRIPTS[self.global_rank][self.current_epoch])


def run_ddp_scenario(root: str) -> None:
    """Run in a process of its own by the test below (forked from the prewarmed interpreter, which ran nothing on a
    GPU: its ``ddp_fork`` workers are forks of it). The claim is the ranks' agreement and the callback states handed
    back to the caller, not the start method: ``ddp_fork`` pickles the run and hands the results back as
    ``ddp_spawn`` does, without two fresh interpreters importing torch (about 6 CPU-s)."""
    stopper = EarlyStopping(monitor="val_loss", patience=1)
    checkpoint = ModelCheckpoint(dirpath=Path(root) / "ckpt", monitor="val_loss", save_top_k=-1,
                                 filename="{epoch}-{val_loss:.2f}")
    trainer = make_trainer(Path(root), devices=2, strategy="ddp_fork", max_epochs=6,
                           callbacks=[stopper, checkpoint])
    trainer.fit(RankScripted(val_losses=[0.0] * 6))
    Path(root, "result.json").write_text(json.dumps({
        "current_epoch": trainer.current_epoch, "stopped_epoch": stopper.stopped_epoch,
        "best_model_path": checkpoint.best_model_path, "best_model_score": float(checkpoint.best_model_score)}))


@pytest.mark.slow
def test_ranks_agree_on_stopping_and_file_names(tmp_path, prewarmed):
    code = f"import test_callbacks_builtin as t; t.run_ddp_scenario({str(tmp_path)!r})"
    result = prewarmed.run(["-c", code], cwd=tmp_path, env=child_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # rank 1 stops improving at epoch 1 (patience 1): every rank stops there, none waits for the others
    outcome = json.loads((tmp_path / "result.json").read_text())
    assert outcome["current_epoch"] == 2
    # the workers' callback states come back to the caller's callbacks (as after Lightning's ddp_spawn/ddp_fork)
    assert outcome["stopped_epoch"] == 1
    assert outcome["best_model_path"] == str(tmp_path / "ckpt" / "epoch=1-val_loss=0.40.ckpt")
    assert outcome["best_model_score"] == pytest.approx(0.4)
    # file names come from global zero's metrics, even though rank 1 logged other values
    assert names(tmp_path / "ckpt") == ["epoch=0-val_loss=0.50.ckpt", "epoch=1-val_loss=0.40.ckpt"]
    state = load(tmp_path / "ckpt" / "epoch=1-val_loss=0.40.ckpt")["callbacks"]
    assert {round(v.item(), 4) for v in state[checkpoint_key()]["best_k_models"].values()} == {0.5, 0.4}


def checkpoint_key() -> str:
    return ModelCheckpoint(monitor="val_loss", save_top_k=-1).state_key


# ------------------------------------------------------------------ Lightning's callbacks accelkit does not have
def _lacking() -> list[str]:
    from helpers.migration_table import lightning_names

    return sorted(set(lightning_names()["sections"]["callbacks"]) - set(accelkit.callbacks.__all__))


@pytest.mark.parametrize("name", _lacking())
def test_a_lightning_callback_accelkit_lacks_is_refused_with_a_sentence_naming_it(name: str) -> None:
    """``from accelkit.callbacks import ModelPruning`` was Python's bare "cannot import name"; the sentence
    naming the callback and what to use instead survives the ``from`` import and the attribute read alike."""
    from accelkit.callbacks import NOT_PROVIDED

    assert name in NOT_PROVIDED, f"Lightning's callbacks.{name} is neither in accelkit nor in NOT_PROVIDED"
    expected = f"accelkit.callbacks has no {name} (Lightning's lightning.pytorch.callbacks.{name} "
    with pytest.raises(ImportError) as imported:
        exec(f"from accelkit.callbacks import {name}", {})
    assert str(imported.value).startswith(expected) and NOT_PROVIDED[name] in str(imported.value)
    with pytest.raises(ImportError) as read:
        getattr(accelkit.callbacks, name)
    assert str(read.value) == str(imported.value)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchCallback'"):
        accelkit.callbacks.NoSuchCallback  # noqa: B018 - an unknown name stays an AttributeError


def test_every_refused_callback_name_is_a_not_yet_row_of_the_migration_guide() -> None:
    from accelkit.callbacks import NOT_PROVIDED
    from helpers.migration_table import load_rows

    not_yet = {name for (section, name), row in load_rows().items()
               if section == "callbacks" and row.status == "not yet"}
    assert set(NOT_PROVIDED) == not_yet == set(_lacking())


# ---------------------------------------------------------------------------------------------- paths from outside
def _state(checkpoint: dict[str, Any], monitor: str | None) -> dict[str, Any]:
    return next(state for key, state in checkpoint["callbacks"].items()
                if key.startswith("ModelCheckpoint") and f"'monitor': {monitor!r}" in key)


def _outside_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "They are dropped: never read, never removed" in str(w.message)]


@pytest.mark.parametrize("logger", [False, True], ids=["logger=False", "default logger"])
def test_a_checkpoint_naming_paths_outside_the_run_removes_nothing_there(tmp_path, monkeypatch, logger):
    """Issue 36, case 2: a checkpoint (loading with weights_only=True) whose ModelCheckpoint states name
    ``checkpoints/../../victim_dir`` (best), a victim file (top-k, kth) and another (last), resumed with
    ``fit(ckpt_path=)``: the folder and the files one level above the run folder survive the resumed fit's top-k
    clean-up (they were removed, the fit exiting 0), each dropped path is named in a warning, and the resumed run
    keeps its own top-k."""
    run = tmp_path / "run"
    (tmp_path / "victim_dir").mkdir(parents=True)
    (tmp_path / "victim_dir" / "precious.txt").write_text("keep me")
    for name in ("victim.txt", "victim_last.txt"):
        (tmp_path / name).write_text("keep me")
    run.mkdir()
    monkeypatch.chdir(run)
    scores = [0.5, 0.4, 0.3]

    def callbacks() -> list[ModelCheckpoint]:
        return [ModelCheckpoint(), ModelCheckpoint(monitor="val_loss", save_top_k=1, save_last=True,
                                                   filename="best-{epoch}")]

    options = dict(logger=logger)
    first = callbacks()
    make_trainer(run, max_epochs=1, callbacks=first, **options).fit(Scripted(val_losses=scores))
    checkpoint = load(first[1].last_model_path)
    # the resumed run's folder, as an attacker predicts it (with a logger: the next version folder)
    folder = first[0].dirpath.replace("version_0", "version_1")
    relative = os.path.relpath(folder, run)  # "checkpoints", or "lightning_logs/version_1/checkpoints"
    up = "/".join([".."] * (relative.count("/") + 2))  # from the folder to one level above the run folder
    latest, ranked = _state(checkpoint, None), _state(checkpoint, "val_loss")
    latest.update(dirpath=folder, best_model_path=f"{relative}/{up}/victim_dir")
    ranked.update(dirpath=folder, best_model_path=f"{relative}/{up}/victim.txt", kth_value=torch.tensor(0.9),
                  best_k_models={f"{relative}/{up}/victim.txt": torch.tensor(0.9)},
                  kth_best_model_path=f"{relative}/{up}/victim.txt", best_model_score=torch.tensor(0.9),
                  last_model_path=f"{relative}/{up}/victim_last.txt")
    evil = tmp_path / "evil.ckpt"
    torch.save(checkpoint, evil)
    torch.load(evil, weights_only=True)  # the attack needs nothing unsafe

    resumed = callbacks()
    trainer = make_trainer(run, max_epochs=3, callbacks=resumed, **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Scripted(val_losses=scores), ckpt_path=evil)
    assert trainer.current_epoch == 3
    assert (tmp_path / "victim_dir" / "precious.txt").read_text() == "keep me"
    assert (tmp_path / "victim.txt").read_text() == "keep me"
    assert (tmp_path / "victim_last.txt").read_text() == "keep me"
    dropped = "\n".join(_outside_warnings(caught))
    for name in ("victim_dir", "victim.txt", "victim_last.txt"):
        assert f"{relative}/{up}/{name}'" in dropped
    # the resumed run's own bookkeeping goes on inside its folder
    assert resumed[0].dirpath == folder
    assert resumed[0].best_model_path == os.path.join(folder, "epoch=2-step=12.ckpt")
    assert list(resumed[1].best_k_models) == [os.path.join(folder, "best-epoch=2.ckpt")]
    # the first run's files that the dropped state named are no longer known, so they are kept; the resumed
    # run's own top-k replaced its epoch-1 files
    kept = ["best-epoch=0.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"] if not logger else []
    assert names(Path(folder)) == sorted(kept + ["best-epoch=2.ckpt", "epoch=2-step=12.ckpt",
                                                 "last-v1.ckpt" if not logger else "last.ckpt"])


def test_a_restored_path_to_no_checkpoint_or_through_a_link_outside_is_dropped(tmp_path):
    """A restored path naming the user's own folder or text file inside the checkpoint folder (no checkpoint), or a
    checkpoint through a link to another folder (outside, links followed), is dropped with a warning naming it and
    why: the folder was removed with ``shutil.rmtree``, the file and the other run's checkpoint too."""
    folder = tmp_path / "ckpt"
    other_run = tmp_path / "other_run"
    other_run.mkdir()
    torch.save({"state_dict": {}}, other_run / "other.ckpt")
    scores = [0.5, 0.4, 0.3]

    def callbacks() -> list[ModelCheckpoint]:
        return [ModelCheckpoint(dirpath=folder),
                ModelCheckpoint(dirpath=folder, monitor="val_loss", save_last=True, filename="best-{epoch}")]

    first = callbacks()
    make_trainer(tmp_path, max_epochs=1, callbacks=first).fit(Scripted(val_losses=scores))
    (folder / "notes").mkdir()
    (folder / "notes" / "idea.txt").write_text("keep me")
    (folder / "notes.txt").write_text("keep me")
    (folder / "elsewhere").symlink_to(other_run, target_is_directory=True)
    checkpoint = load(first[1].last_model_path)
    through_link = str(folder / "elsewhere" / "other.ckpt")
    _state(checkpoint, None).update(best_model_path=str(folder / "notes"))
    _state(checkpoint, "val_loss").update(best_k_models={through_link: torch.tensor(0.9)},
                                          kth_best_model_path=through_link, best_model_path=through_link,
                                          best_model_score=torch.tensor(0.9), kth_value=torch.tensor(0.9),
                                          last_model_path=str(folder / "notes.txt"))
    torch.save(checkpoint, tmp_path / "crafted.ckpt")

    resumed = callbacks()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer(tmp_path, max_epochs=3, callbacks=resumed).fit(Scripted(val_losses=scores),
                                                                    ckpt_path=tmp_path / "crafted.ckpt")
    assert (folder / "notes" / "idea.txt").read_text() == "keep me"
    assert (folder / "notes.txt").read_text() == "keep me"
    assert (other_run / "other.ckpt").is_file()
    dropped = "\n".join(_outside_warnings(caught))
    assert f"{str(folder / 'notes')!r} (it is a folder but not a sharded checkpoint" in dropped
    assert f"{str(folder / 'notes.txt')!r} (it is not a checkpoint file" in dropped
    assert f"{through_link!r} (outside the folder, .. and symbolic links followed)" in dropped
    assert list(resumed[1].best_k_models) == [str(folder / "best-epoch=2.ckpt")]


@pytest.mark.parametrize("filename", ["../../escaped-{step}", "/tmp/escaped-{step}", "sub/../../escaped-{step}",
                                      "{../../escaped}"])
def test_a_filename_template_leaving_dirpath_is_refused(filename):
    """Issue 36, case 8: ``filename="../../escaped-{step}"`` wrote outside ``dirpath`` without a word."""
    with pytest.raises(accelkit.ConfigurationError, match=re.escape(f"ModelCheckpoint(filename={filename!r}): the "
                                                                    "template leaves dirpath")):
        ModelCheckpoint(dirpath="ckpt", filename=filename)


def test_a_template_leaving_dirpath_after_construction_writes_and_removes_nothing_outside(tmp_path):
    """A template set after construction (``callback.filename = ...``, or a sub-folder that is a link to another
    folder) is refused when a name is made from it: nothing is written, nor removed, outside ``dirpath``; a
    sub-folder inside ``dirpath`` keeps its top-k there."""
    folder, outside = tmp_path / "run" / "ckpt", tmp_path / "outside"
    outside.mkdir()
    (outside / "escaped-step=4.ckpt").write_text("keep me")
    callback = ModelCheckpoint(dirpath=folder, monitor="val_loss")
    callback.filename = "../../outside/escaped-{step}"
    with pytest.raises(accelkit.ConfigurationError, match=r"filename='../../outside/escaped-\{step\}'\) gives the "
                                                          r"path .* which leaves dirpath"):
        make_trainer(tmp_path, max_epochs=2, callbacks=[callback]).fit(Scripted(val_losses=[0.5, 0.4]))
    assert names(outside) == ["escaped-step=4.ckpt"]

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "linked").symlink_to(outside, target_is_directory=True)
    linked = ModelCheckpoint(dirpath=folder, monitor="val_loss", filename="linked/escaped-{step}")
    with pytest.raises(accelkit.ConfigurationError, match="leaves dirpath"):
        make_trainer(tmp_path, max_epochs=2, callbacks=[linked]).fit(Scripted(val_losses=[0.5, 0.4]))
    assert names(outside) == ["escaped-step=4.ckpt"]

    inside = ModelCheckpoint(dirpath=folder, monitor="val_loss", filename="sub/{epoch}")
    make_trainer(tmp_path, max_epochs=3, callbacks=[inside]).fit(Scripted(val_losses=[0.5, 0.3, 0.4]))
    assert names(folder / "sub") == ["epoch=1.ckpt"]
    assert inside.best_model_path == str(folder / "sub" / "epoch=1.ckpt")


def test_the_ranking_goes_on_with_the_restored_paths_that_are_kept(tmp_path):
    """One of two top-k paths outside the folder: it is dropped, and the best and k-th paths fall back to the file
    that is kept (the ranking stays consistent: no KeyError on the next save)."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    kept, outside = str(folder / "epoch=0-step=4.ckpt"), f"{folder}/../epoch=1-step=8.ckpt"
    torch.save({"epoch": 0}, kept)
    torch.save({"epoch": 1}, tmp_path / "epoch=1-step=8.ckpt")
    callback = ModelCheckpoint(dirpath=folder, monitor="val_loss", save_top_k=2)
    state = {"monitor": "val_loss", "dirpath": callback.dirpath, "best_model_score": torch.tensor(0.1),
             "best_model_path": outside, "current_score": torch.tensor(0.1), "kth_best_model_path": kept,
             "kth_value": torch.tensor(0.3), "last_model_path": "",
             "best_k_models": {kept: torch.tensor(0.3), outside: torch.tensor(0.1)}}
    with pytest.warns(UserWarning, match=re.escape(f"names 1 path(s) this callback cannot have written in its folder "
                                                   f"{callback.dirpath!r}: {outside!r} (outside the folder")):
        callback.load_state_dict(state)
    assert callback.best_k_models == {kept: torch.tensor(0.3)}
    assert (callback.best_model_path, float(callback.best_model_score)) == (kept, pytest.approx(0.3))
    assert (callback.kth_best_model_path, float(callback.kth_value)) == (kept, pytest.approx(0.3))
