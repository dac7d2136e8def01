"""Run state and logging (issue 8, item 7) as Lightning documents them, on real CPU fits: ``self.logger`` /
``self.loggers``, CSV and TensorBoard loggers together, ``self.log(rank_zero_only=, sync_dist=)``, metric objects
(``update``/``compute``/``reset``), ``callback_metrics`` tensors, ``estimated_stepping_batches``,
``num_training_batches``, ``is_last_batch``, ``log_dir``, ``checkpoint_callback(s)``, ``optimizers``,
``self.all_gather``, ``seed_everything(workers=True)``, ``rank_zero_only``, ``test(verbose=)``,
``predict(return_predictions=)``, several validation loaders and the evaluation entry points after ``fit``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.loggers import CSVLogger  # noqa: E402
from helpers.fixtures import lightning_records_of  # noqa: E402
from helpers.guards import child_env  # noqa: E402
from helpers.models import PredictsInputs, RegressionModule, quiet_trainer, regression_data  # noqa: E402

QUIET = dict(enable_model_summary=False, num_sanity_val_steps=0)


def loader(n: int = 16, batch_size: int = 4, seed: int = 0) -> DataLoader:
    return DataLoader(regression_data(n, seed=seed), batch_size=batch_size)


class Net(PredictsInputs, accelkit.Module):
    """A linear regression that logs its losses and records what it sees of the run state."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.seen: dict[str, list[Any]] = {}

    def note(self, name: str, value: Any) -> None:
        self.seen.setdefault(name, []).append(value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


# ---------------------------------------------------------------------------------------------- loggers
def test_self_logger_and_loggers(tmp_path):
    class Looks(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.note("logger", self.logger)
            self.note("loggers", list(self.loggers))
            return super().training_step(batch, batch_idx)

    first, second = CSVLogger(tmp_path, name="a"), CSVLogger(tmp_path, name="b")
    model = Looks()
    trainer = quiet_trainer(tmp_path, max_epochs=1, logger=[first, second], **QUIET)
    trainer.fit(model, loader())
    assert all(lg is first for lg in model.seen["logger"])
    assert all(lgs == [first, second] for lgs in model.seen["loggers"])
    assert trainer.logger is first and trainer.loggers == [first, second]
    model = Looks()
    quiet_trainer(tmp_path, max_epochs=1, logger=False, **QUIET).fit(model, loader())
    assert model.seen["logger"][0] is None and model.seen["loggers"][0] == []


def test_the_default_logger_records_the_logged_values(tmp_path):
    """Lightning's default logger: TensorBoard where it is installed (else CSV, see test_run_folder.py)."""
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, enable_progress_bar=False,
                               enable_checkpointing=False, default_root_dir=tmp_path, **QUIET)
    trainer.fit(Net(), loader())
    if isinstance(trainer.logger, CSVLogger):
        assert any(row.get("train_loss_epoch") is not None for row in trainer.logger.rows)
    else:
        assert type(trainer.logger).__name__ == "TensorBoardLogger"
        assert read_tensorboard(trainer.logger.log_dir)["train_loss_epoch"]


def read_tensorboard(directory: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(directory)
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_csv_and_tensorboard_loggers_both_receive_metrics(tmp_path):
    from accelkit.loggers import TensorBoardLogger

    csv_logger, tb_logger = CSVLogger(tmp_path / "csv"), TensorBoardLogger(tmp_path / "tb")
    trainer = quiet_trainer(tmp_path, max_epochs=2, logger=[csv_logger, tb_logger], log_every_n_steps=1, **QUIET)
    trainer.fit(Net(), loader(), loader(8, seed=1))
    assert trainer.loggers == [csv_logger, tb_logger]
    rows = csv_logger.rows
    csv_steps = [row["train_loss_step"] for row in rows if "train_loss_step" in row]
    csv_val = [row["val_loss"] for row in rows if "val_loss" in row]
    assert len(csv_steps) == 8 and len(csv_val) == 2
    scalars = read_tensorboard(tb_logger.log_dir)
    assert {"train_loss_step", "train_loss_epoch", "val_loss"} <= set(scalars), sorted(scalars)
    assert len(scalars["train_loss_step"]) == 8 and len(scalars["val_loss"]) == 2
    # the same values went to both loggers
    assert [v for _, v in scalars["train_loss_step"]] == pytest.approx(csv_steps, rel=1e-6)
    assert [v for _, v in scalars["val_loss"]] == pytest.approx(csv_val, rel=1e-6)
    assert Path(tb_logger.log_dir).is_relative_to(tmp_path / "tb")
    assert str(trainer.log_dir) == csv_logger.log_dir


# ---------------------------------------------------------------------------------------------- metric objects
class CountingMetric:
    """A metric object with the torchmetrics protocol: sums what ``update`` got since the last ``reset``."""

    def __init__(self) -> None:
        self.total = torch.tensor(0.0)
        self.updates = 0
        self.resets = 0

    def update(self, value: torch.Tensor) -> None:
        self.total = self.total + value.detach().float().sum()
        self.updates += 1

    def compute(self) -> torch.Tensor:
        return self.total.clone()

    def reset(self) -> None:
        self.total = torch.tensor(0.0)
        self.updates = 0
        self.resets += 1


class EpochValues(accelkit.Callback):
    """Records callback_metrics at the end of each training epoch (after validation)."""

    def __init__(self) -> None:
        self.values: list[dict[str, Any]] = []

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.values.append(dict(trainer.callback_metrics))


class WithMetrics(Net):
    """Logs a training and a validation metric object; each update adds the batch index + 1."""

    def __init__(self) -> None:
        super().__init__()
        self.train_metric = CountingMetric()
        self.val_metric = CountingMetric()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.train_metric.update(torch.tensor(batch_idx + 1.0))
        self.log("train_count", self.train_metric, on_step=False, on_epoch=True)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_metric.update(torch.tensor(batch_idx + 1.0))
        self.log("val_count", self.val_metric)


def test_metric_object_epoch_value_and_reset_each_epoch(tmp_path):
    model, spy = WithMetrics(), EpochValues()
    trainer = quiet_trainer(tmp_path, max_epochs=3, callbacks=[spy], **QUIET)
    trainer.fit(model, loader(16), loader(12, seed=1))  # 4 training batches, 3 validation batches
    # each epoch's value is compute() over that epoch only: 1+2+3+4 and 1+2+3, not a running total
    assert [float(v["train_count"]) for v in spy.values] == [10.0, 10.0, 10.0]
    assert [float(v["val_count"]) for v in spy.values] == [6.0, 6.0, 6.0]


def test_metric_object_not_polluted_by_the_sanity_check(tmp_path):
    """Lightning resets logged metrics after the sanity check: the first epoch's value counts its own batches."""
    model, spy = WithMetrics(), EpochValues()
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[spy], enable_model_summary=False,
                            num_sanity_val_steps=2)
    trainer.fit(model, loader(16), loader(12, seed=1))
    assert [float(v["val_count"]) for v in spy.values] == [6.0, 6.0]


def test_metric_object_in_validate_is_reset_between_calls(tmp_path):
    model = WithMetrics()
    trainer = quiet_trainer(tmp_path, **QUIET)
    first = trainer.validate(model, loader(12, seed=1), verbose=False)
    second = trainer.validate(model, loader(12, seed=1), verbose=False)
    assert first[0]["val_count"] == pytest.approx(6.0)
    assert second[0]["val_count"] == pytest.approx(6.0)


@pytest.mark.skipif(importlib.util.find_spec("torchmetrics") is None, reason="torchmetrics is not installed")
def test_torchmetrics_metric_works_unchanged(tmp_path):
    import torchmetrics

    class TM(Net):
        def __init__(self) -> None:
            super().__init__()
            self.val_mae = torchmetrics.MeanAbsoluteError()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.val_mae(self(x), y)
            self.log("val_mae", self.val_mae)

    model = TM()
    trainer = quiet_trainer(tmp_path, max_epochs=2, **QUIET)
    trainer.fit(model, loader(), loader(8, seed=1))
    x, y = regression_data(8, seed=1).tensors
    with torch.no_grad():
        expected = (model(x) - y).abs().mean()
    assert float(trainer.callback_metrics["val_mae"]) == pytest.approx(float(expected), rel=1e-5)


# ---------------------------------------------------------------------------------------------- run state
def test_callback_metrics_are_tensors(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(Net(), loader(), loader(8, seed=1))
    assert {"train_loss", "train_loss_epoch", "val_loss"} <= set(trainer.callback_metrics)
    for name, value in trainer.callback_metrics.items():
        assert isinstance(value, torch.Tensor), name
        assert value.ndim == 0 and value.device.type == "cpu", name
    for name, value in trainer.logged_metrics.items():
        assert isinstance(value, torch.Tensor), name
    # what an EarlyStopping-like callback does with them
    assert trainer.callback_metrics["val_loss"] < torch.tensor(1e9)


class OneCycle(Net):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05)
        self.estimated = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=self.estimated)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


@pytest.mark.parametrize("options, steps", [
    (dict(max_epochs=3), 12),
    (dict(max_epochs=3, accumulate_grad_batches=3), 6),  # ceil(4 / 3) = 2 steps per epoch
    (dict(max_epochs=2, limit_train_batches=3), 6),
    (dict(max_steps=5), 5),
    (dict(max_epochs=2, max_steps=100), 8),  # Lightning: min(epochs x batches, max_steps)
])
def test_estimated_stepping_batches_in_configure_optimizers(tmp_path, options, steps):
    model = OneCycle()
    trainer = quiet_trainer(tmp_path, **options, **QUIET)
    trainer.fit(model, loader())
    assert trainer.global_step == steps
    assert model.estimated == steps
    assert trainer.estimated_stepping_batches == steps


def test_estimated_stepping_batches_unbounded_is_inf(tmp_path):
    seen: list[Any] = []

    class Probe(Net):
        def configure_optimizers(self) -> Any:
            seen.append(self.trainer.estimated_stepping_batches)
            return super().configure_optimizers()

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.trainer.should_stop = True

    quiet_trainer(tmp_path, max_epochs=-1, **QUIET).fit(Probe(), loader())
    assert seen == [float("inf")]


def test_num_training_batches_and_is_last_batch(tmp_path):
    class State(Net):
        def on_train_start(self) -> None:
            self.note("num_training_batches", self.trainer.num_training_batches)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.note("last", (self.current_epoch, batch_idx, self.trainer.is_last_batch))
            return super().training_step(batch, batch_idx)

    model = State()
    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=3, **QUIET)
    trainer.fit(model, loader(32))  # 8 batches, limited to 3
    assert model.seen["num_training_batches"] == [3]
    assert trainer.num_training_batches == 3
    assert model.seen["last"] == [(e, b, b == 2) for e in range(2) for b in range(3)]


def test_is_last_batch_without_a_length(tmp_path):
    """An iterable without ``len``: the last batch is still known (Lightning fetches one batch ahead)."""

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            data = regression_data(12)
            return iter([data[i] for i in range(len(data))])

    class State(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.note("last", self.trainer.is_last_batch)
            return super().training_step(batch, batch_idx)

    model = State()
    quiet_trainer(tmp_path, max_epochs=1, **QUIET).fit(model, DataLoader(Stream(), batch_size=4))
    assert model.seen["last"] == [False, False, True]


def test_log_dir(tmp_path):
    logger = CSVLogger(tmp_path / "logs_root")
    trainer = quiet_trainer(tmp_path, max_epochs=1, logger=logger, **QUIET)
    trainer.fit(Net(), loader())
    assert os.fspath(trainer.log_dir) == logger.log_dir
    trainer = quiet_trainer(tmp_path / "root", max_epochs=1, logger=False, **QUIET)
    assert os.fspath(trainer.log_dir) == os.fspath(tmp_path / "root")


def test_log_dir_is_a_string_as_in_lightning(tmp_path):
    """Lightning's ``trainer.log_dir`` is a ``str``: scripts write ``trainer.log_dir + "/samples"``."""
    trainer = quiet_trainer(tmp_path, max_epochs=1, logger=CSVLogger(tmp_path), **QUIET)
    assert isinstance(trainer.log_dir, str)
    assert isinstance(trainer.log_dir + "/samples", str)


def test_checkpoint_callback_and_callbacks(tmp_path):
    from accelkit.callbacks import ModelCheckpoint

    trainer = quiet_trainer(tmp_path, max_epochs=1, enable_checkpointing=True, **QUIET)
    assert isinstance(trainer.checkpoint_callback, ModelCheckpoint)
    assert trainer.checkpoint_callbacks == [trainer.checkpoint_callback]
    trainer.fit(Net(), loader())
    assert Path(trainer.checkpoint_callback.best_model_path).is_file()  # the default keeps one file, no last.ckpt

    first = ModelCheckpoint(dirpath=tmp_path / "one", save_last=True)
    second = ModelCheckpoint(dirpath=tmp_path / "two", monitor="train_loss_epoch", save_top_k=1)
    trainer = quiet_trainer(tmp_path, max_epochs=1, enable_checkpointing=True, callbacks=[first, second], **QUIET)
    assert trainer.checkpoint_callback is first and trainer.checkpoint_callbacks == [first, second]
    trainer.fit(Net(), loader())
    assert Path(first.last_model_path).is_file() and Path(second.best_model_path).is_file()

    trainer = quiet_trainer(tmp_path, max_epochs=1, enable_checkpointing=False, **QUIET)
    assert trainer.checkpoint_callback is None and trainer.checkpoint_callbacks == []


def test_trainer_optimizers(tmp_path):
    model = Net()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader())
    assert len(trainer.optimizers) == 1
    opt = trainer.optimizers[0]
    assert isinstance(opt, torch.optim.SGD)
    assert {id(p) for p in opt.param_groups[0]["params"]} == {id(p) for p in model.parameters()}


# ---------------------------------------------------------------------------------------------- seeding
class NoisyData(Dataset):
    """Random augmentation from the three generators a user may use, plus the worker that produced it."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        info = torch.utils.data.get_worker_info()
        worker = -1 if info is None else info.id
        return torch.tensor([float(index), float(worker), float(np.random.rand()), random.random(),
                             float(torch.rand(()))], dtype=torch.float64)


class Collect(accelkit.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(1, 1)
        self.samples: list[torch.Tensor] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.samples.append(batch.clone())
        return self.layer(batch[:, :1].float()).sum() * 0.0

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(NoisyData(), batch_size=2, num_workers=2)


def test_seed_everything_workers_makes_worker_augmentation_reproducible(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELKIT_SEED", "0")  # restored after the test: seed_everything sets both
    monkeypatch.setenv("ACCELKIT_SEED_WORKERS", "0")
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")  # and Lightning's names for them
    monkeypatch.setenv("PL_SEED_WORKERS", "0")
    runs = []
    for _ in range(2):
        assert accelkit.seed_everything(1234, workers=True) == 1234
        model = Collect()
        quiet_trainer(tmp_path, max_epochs=2, **QUIET).fit(model)
        runs.append(torch.cat(model.samples))
    assert runs[0].shape == (32, 5)
    assert torch.equal(runs[0], runs[1])  # the same augmentation in both runs
    first_epoch = runs[0][:16]
    by_worker = {w: first_epoch[first_epoch[:, 1] == w] for w in (0, 1)}
    assert set(first_epoch[:, 1].tolist()) == {0.0, 1.0}
    # each worker draws its own NumPy/Python stream (not copies of the parent's state): Lightning's reason for
    # workers=True
    for column in (2, 3):
        assert not torch.equal(by_worker[0][:, column], by_worker[1][:, column]), column
    # and the second epoch does not repeat the first
    assert not torch.equal(runs[0][:16, 2:], runs[0][16:, 2:])
    # a different seed gives different augmentation
    accelkit.seed_everything(4321, workers=True)
    model = Collect()
    quiet_trainer(tmp_path, max_epochs=2, **QUIET).fit(model)
    assert not torch.equal(torch.cat(model.samples)[:, 2:], runs[0][:, 2:])


def test_rank_zero_only_decorator(monkeypatch):
    calls: list[int] = []

    @accelkit.rank_zero_only
    def record(value: int) -> int:
        calls.append(value)
        return value

    monkeypatch.setattr(accelkit.rank_zero_only, "rank", 0)
    assert record(1) == 1
    monkeypatch.setattr(accelkit.rank_zero_only, "rank", 1)
    assert record(2) is None
    assert calls == [1]
    assert record.__name__ == "record"


# ---------------------------------------------------------------------------------------------- evaluation
def test_test_verbose_prints_a_metrics_table(tmp_path, capsys):
    trainer = quiet_trainer(tmp_path, **QUIET)
    results = trainer.test(Net(), loader(8, seed=2), verbose=True)
    out = capsys.readouterr().out
    assert "test_loss" in out and f"{results[0]['test_loss']:.4f}"[:5] in out
    trainer.test(Net(), loader(8, seed=2), verbose=False)
    out = capsys.readouterr().out
    assert "test_loss" not in out, out


def test_validate_verbose_false_prints_nothing(tmp_path, capsys):
    trainer = quiet_trainer(tmp_path, **QUIET)
    trainer.validate(Net(), loader(8, seed=2), verbose=False)
    assert "val_loss" not in capsys.readouterr().out
    trainer.validate(Net(), loader(8, seed=2))
    assert "val_loss" in capsys.readouterr().out


def test_predict_return_predictions(tmp_path):
    class Predicting(Net):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
            self.calls += 1
            return self(batch[0])

    model = Predicting()
    trainer = quiet_trainer(tmp_path, **QUIET)
    predictions = trainer.predict(model, loader(8))
    assert len(predictions) == 2 and predictions[0].shape == (4, 1)
    assert trainer.predict(model, loader(8), return_predictions=False) is None
    assert model.calls == 4  # the steps ran both times


class TwoLoaders(Net):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.note("val", (dataloader_idx, batch_idx))
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.note("test", (dataloader_idx, batch_idx))
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y) + dataloader_idx * 100.0)


def test_two_validation_loaders_with_dataloader_idx(tmp_path):
    model = TwoLoaders()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader(), [loader(8, seed=1), loader(4, seed=2)])
    assert model.seen["val"] == [(0, 0), (0, 1), (1, 0)]
    assert {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"} <= set(trainer.callback_metrics)
    assert "val_loss" not in trainer.callback_metrics
    assert trainer.num_val_batches == [2, 1]


def test_two_test_loaders_results_per_loader(tmp_path):
    model = TwoLoaders()
    trainer = quiet_trainer(tmp_path, **QUIET)
    results = trainer.test(model, [loader(8, seed=1), loader(4, seed=2)], verbose=False)
    assert model.seen["test"] == [(0, 0), (0, 1), (1, 0)]
    assert len(results) == 2
    assert set(results[0]) == {"test_loss/dataloader_idx_0"}
    assert set(results[1]) == {"test_loss/dataloader_idx_1"}
    assert results[1]["test_loss/dataloader_idx_1"] > 100.0 > results[0]["test_loss/dataloader_idx_0"]


def test_validate_test_predict_without_model_after_fit_use_the_fitted_module(tmp_path):
    class Fitted(TwoLoaders):
        def val_dataloader(self) -> DataLoader:
            return loader(8, seed=1)

        def test_dataloader(self) -> DataLoader:
            return loader(8, seed=2)

        def predict_dataloader(self) -> DataLoader:
            return loader(8, seed=3)

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.note("val_weights", self.layer.weight.detach().clone())
            super().validation_step(batch, batch_idx, dataloader_idx)

    model = Fitted()
    initial = model.layer.weight.detach().clone()
    trainer = quiet_trainer(tmp_path, max_epochs=2, enable_checkpointing=True, **QUIET)
    trainer.fit(model, loader())  # the best checkpoint (the latest, without a monitor) holds the fitted weights
    trained = model.layer.weight.detach().clone()
    assert not torch.equal(trained, initial)
    model.seen.clear()
    validated = trainer.validate()
    tested = trainer.test(verbose=False)
    predicted = trainer.predict()
    assert len(model.seen["val_weights"]) == 2 and all(torch.equal(w, trained) for w in model.seen["val_weights"])
    assert len(model.seen["test"]) == 2
    assert "val_loss" in validated[0] and "test_loss" in tested[0]
    x = torch.cat([b[0] for b in loader(8, seed=3)])
    with torch.no_grad():
        torch.testing.assert_close(torch.cat(predicted), model(x))
    # the same numbers as passing the model explicitly
    assert trainer.validate(model, verbose=False)[0]["val_loss"] == pytest.approx(validated[0]["val_loss"])


@pytest.mark.parametrize("setting", ["no_checkpointing", "fast_dev_run", "nothing_saved"])
def test_evaluation_without_model_after_a_run_without_a_best_checkpoint_is_refused_as_in_lightning(tmp_path,
                                                                                                  setting):
    """Lightning refuses validate()/test() without a model when the last run left no best checkpoint (a
    ValueError); accelkit used the module's current weights silently, which are not the best ones a user who
    monitored a metric expects."""
    from accelkit.callbacks import ModelCheckpoint

    options: dict[str, Any] = {
        "no_checkpointing": {},
        "fast_dev_run": {"fast_dev_run": True},
        "nothing_saved": {"enable_checkpointing": True,
                          "callbacks": [ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=0, save_last=False)]},
    }[setting]
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET, **options)
    trainer.fit(Net(), loader())
    why = {"no_checkpointing": "the Trainer has no ModelCheckpoint", "fast_dev_run": "fast_dev_run saves no",
           "nothing_saved": "its ModelCheckpoint has saved no best checkpoint"}[setting]
    for stage in (trainer.validate, trainer.test):
        with pytest.raises(ValueError, match=rf"^{stage.__name__}\(\) was given no model, so it would load the best "
                                             rf"checkpoint of the last run \(as in Lightning\), but {why}"):
            stage(dataloaders=loader())


def test_evaluation_without_model_before_any_fit_is_an_error(tmp_path):
    trainer = quiet_trainer(tmp_path, **QUIET)
    with pytest.raises(Exception, match="model"):
        trainer.validate()


# ------------------------------------------------------------------------------------------- two ranks
class Distributed(Net):
    """On 2 ranks: a rank-0-only metric, a synced and an unsynced rank-dependent metric, all_gather, and the
    rank_zero_only decorator. Each rank writes what it saw to ``root``."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = root

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        rank = float(self.global_rank)
        if self.trainer.is_global_zero:
            self.log("only_rank0", 7.0, on_step=False, on_epoch=True, rank_zero_only=True)
        self.log("rank_synced", rank, on_step=False, on_epoch=True, sync_dist=True)
        self.log("rank_summed", rank + 1.0, on_step=False, on_epoch=True, sync_dist=True, reduce_fx="sum")
        self.log("rank_local", rank, on_step=False, on_epoch=True)
        return super().training_step(batch, batch_idx)

    def on_train_epoch_end(self) -> None:
        rank = self.global_rank
        gathered = self.all_gather(torch.tensor([rank, 10.0 * rank]))
        nested = self.all_gather({"a": torch.tensor(float(rank)), "b": [torch.ones(3) * rank]})
        write_on_rank_zero(self.root, rank)
        Path(self.root, f"seen{rank}.json").write_text(json.dumps({
            "gathered": gathered.tolist(), "shape": list(gathered.shape),
            "nested_a": nested["a"].tolist(), "nested_b_shape": list(nested["b"][0].shape),
            "logger_is_none": self.logger is None,
        }))


@accelkit.rank_zero_only
def write_on_rank_zero(root: str, rank: int) -> None:
    Path(root, f"rank_zero_only_ran_on_{rank}").write_text("x")


def run_distributed_scenario(root: str) -> None:
    """Run in a process of its own by the test below (forked from the prewarmed interpreter, which ran nothing on a
    GPU: its ``ddp_fork`` workers are forks of it). The claim is the logging and the collectives on two ranks, not the
    start method: ``ddp_fork`` pickles the run and hands the results back as ``ddp_spawn`` does, without two fresh
    interpreters importing torch (about 6 CPU-s)."""
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_fork", max_epochs=1, logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                               default_root_dir=root)
    trainer.fit(Distributed(root), loader(32))
    Path(root, "metrics.json").write_text(json.dumps({k: float(v) for k, v in trainer.callback_metrics.items()}))


@pytest.mark.slow
def test_logging_and_collectives_on_two_ranks(tmp_path, prewarmed):
    code = f"import test_logging_api as t; t.run_distributed_scenario({str(tmp_path)!r})"
    # the scenario's caller forked from the prewarmed interpreter; its two workers forked from the caller
    proc = prewarmed.run(["-c", code], cwd=tmp_path, env=child_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["only_rank0"] == 7.0  # logged on rank 0 only, not reduced (no collective to hang)
    assert metrics["rank_synced"] == pytest.approx(0.5)  # mean over ranks 0 and 1
    # summed over each rank's 4 batches, then over the ranks: 4 x (0 + 1) + 4 x (1 + 1)
    assert metrics["rank_summed"] == pytest.approx(12.0)
    assert metrics["rank_local"] == 0.0  # rank 0's own value
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen{rank}.json").read_text())
        assert seen["shape"] == [2, 2]
        assert seen["gathered"] == [[0.0, 0.0], [1.0, 10.0]]
        assert seen["nested_a"] == [0.0, 1.0] and seen["nested_b_shape"] == [2, 3]
        assert seen["logger_is_none"]
    assert (tmp_path / "rank_zero_only_ran_on_0").exists()
    assert not (tmp_path / "rank_zero_only_ran_on_1").exists()


# ------------------------------------------------------------------- logging from epoch-end hooks
class EpochEndLogging(RegressionModule):
    def on_train_epoch_end(self) -> None:
        # the epoch aggregate of the training steps is visible here, and logs made here count
        self.log("seen_train_loss", self.trainer.callback_metrics["train_loss_epoch"])

    def on_validation_epoch_end(self) -> None:
        self.log("val_summary", 2.0)


def test_logs_in_epoch_end_hooks_are_epoch_metrics(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    model = EpochEndLogging()
    trainer.fit(model, val_dataloaders=DataLoader(regression_data(8, seed=1), batch_size=4))
    metrics = trainer.callback_metrics
    assert metrics["seen_train_loss"] == metrics["train_loss_epoch"]
    assert metrics["val_summary"] == 2.0
    assert trainer.validate(model, DataLoader(regression_data(8, seed=1), batch_size=4))[0]["val_summary"] == 2.0


# ------------------------------------------------------------------- the progress bar's metrics
def test_progress_bar_metrics_do_not_depend_on_showing_the_bar(tmp_path, capsys):
    shown = []
    for bar in (False, True):
        trainer = quiet_trainer(tmp_path, max_epochs=1, enable_progress_bar=bar)
        trainer.fit(RegressionModule())
        shown.append(dict(trainer.progress_bar_metrics))
    assert shown[0] == shown[1]


def test_callback_metrics_start_empty_for_each_run(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    model = RegressionModule()
    trainer.fit(model)
    assert "train_loss_epoch" in trainer.callback_metrics
    trainer.test(model, verbose=False)
    assert set(trainer.callback_metrics) == {"test_loss"}


class RankZeroMetric(RegressionModule):
    """Logs ``val_score`` (rank + 1) with ``rank_zero_only=True``: from every rank (OML's MetricValCallbackDDP,
    which reduced the value itself and monitors it for checkpointing), or from rank 0 only."""

    def __init__(self, root: str, every_rank: bool) -> None:
        super().__init__()
        self.root, self.every_rank = root, every_rank

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.every_rank or self.trainer.is_global_zero:
            self.log("val_score", float(self.global_rank) + 1.0, rank_zero_only=True)

    def on_fit_end(self) -> None:
        Path(self.root, f"score{self.global_rank}").write_text(str(float(self.trainer.callback_metrics["val_score"])))


@pytest.mark.slow
def test_a_rank_zero_only_metric_is_each_rank_s_own_and_may_be_monitored_where_logged(tmp_path):
    # as Lightning: not reduced, kept by each rank that logs it (it was dropped on rank 1, and a monitor on it refused)
    trainer = quiet_trainer(tmp_path, max_epochs=2, devices=2, strategy="ddp_fork", num_sanity_val_steps=0,
                            callbacks=[accelkit.callbacks.EarlyStopping(monitor="val_score", mode="max")])
    trainer.fit(RankZeroMetric(str(tmp_path), every_rank=True))
    assert [(tmp_path / f"score{rank}").read_text() for rank in (0, 1)] == ["1.0", "2.0"]
    # logged on rank 0 only: rank 1's monitor fails naming it (rather than every rank waiting)
    trainer = quiet_trainer(tmp_path, max_epochs=1, devices=2, strategy="ddp_fork", num_sanity_val_steps=0,
                            callbacks=[accelkit.callbacks.EarlyStopping(monitor="val_score")])
    with pytest.raises(accelkit.WorkerError, match=r"worker 1 failed(.|\n)*EarlyStopping\(monitor='val_score'\): "
                                                   r"the metric was not logged"):
        trainer.fit(RankZeroMetric(str(tmp_path), every_rank=False))


def test_without_a_logger_logged_values_stay_on_the_device_as_in_lightning(tmp_path):
    """Issue 24: without a logger nobody writes the per-step values out, so reading them to the host every
    ``log_every_n_steps`` (a GPU synchronization) buys nothing: as Lightning 2.6.6 (whose logger connector converts
    logged tensors to numbers only for its loggers and the progress bar), accelkit reads none during the steps;
    ``logged_metrics`` still holds the last value, as a CPU tensor after the fit. With a logger the values are read
    (the logger writes numbers): one read per logging step."""
    from helpers.host_reads import host_reads_during_steps

    reads, logged = host_reads_during_steps("accelkit", tmp_path)
    assert reads == 0
    assert set(logged) == {"watched"} and logged["watched"].device.type == "cpu" and logged["watched"].ndim == 0
    assert host_reads_during_steps("accelkit", tmp_path, logger=True)[0] == 4  # batches 0-3 were logging steps


@pytest.mark.slow
def test_lightning_reads_no_logged_value_without_a_logger_either(tmp_path, forked_python):
    """The same module and count on Lightning's Trainer (in its own process: Lightning's Trainer imports torch_xla)
    read nothing during the steps and end with the same ``logged_metrics``."""
    pytest.importorskip("lightning.pytorch", reason="compares with Lightning's Trainer")
    from helpers.host_reads import host_reads_during_steps

    found = forked_python(f"""
        import json
        from helpers.host_reads import host_reads_during_steps
        reads, logged = host_reads_during_steps("lightning", {str(tmp_path)!r})
        print(json.dumps({{"reads": reads, "logged": {{k: float(v) for k, v in logged.items()}}}}))
        """, path=[Path(__file__).resolve().parent])
    ours = host_reads_during_steps("accelkit", tmp_path)
    assert found["reads"] == ours[0] == 0
    assert found["logged"] == pytest.approx({k: float(v) for k, v in ours[1].items()})


# --------------------------------------- callback_metrics, logged_metrics, progress_bar_metrics: computed when read
class ReadsAtBatchEnd(accelkit.Callback):
    def __init__(self) -> None:
        self.seen: list[tuple[float, float, float]] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        shown = trainer.progress_bar_metrics["train_loss_step"]
        self.seen.append((float(trainer.callback_metrics["train_loss"]),
                          float(trainer.logged_metrics["train_loss_step"]), shown))


class ShownLoss(Net):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        self.note("loss", float(loss))
        return loss


def test_a_callback_reads_the_steps_own_value_at_its_end(tmp_path):
    """As Lightning computes the three dicts when read, a callback's ``on_train_batch_end`` sees the value the step
    just logged, whatever ``log_every_n_steps`` and with no logger (accelkit refreshed them every
    ``log_every_n_steps`` steps before)."""
    reader, model = ReadsAtBatchEnd(), ShownLoss()
    trainer = accelkit.Trainer(accelerator="cpu", max_epochs=1, log_every_n_steps=50, logger=False,
                               enable_progress_bar=False, enable_checkpointing=False, callbacks=[reader],
                               default_root_dir=tmp_path, **QUIET)
    trainer.fit(model, loader())
    assert [seen[0] for seen in reader.seen] == model.seen["loss"]
    assert reader.seen == [(loss, loss, loss) for loss in model.seen["loss"]]
    assert type(reader.seen[0][2]) is float


@pytest.fixture(scope="module")
def lightning_runs(tmp_path_factory) -> dict[str, Any]:
    """What each side-by-side helper of this module recorded under Lightning's Trainer, for every scenario: all in
    one process (one import of Lightning and torch_xla for all of them); ``logger_steps`` where TensorBoard is
    installed (it reads TensorBoard's event files)."""
    helpers = ["metric_reads", "metric_hooks", "evaluation_results", "log_refusals"]
    if importlib.util.find_spec("tensorboard") is not None:
        helpers.append("logger_steps")
    return lightning_records_of(tmp_path_factory.mktemp("lightning"), helpers)


@pytest.fixture
def lightning_reads(lightning_runs) -> dict[str, list[Any]]:
    """What the reading callback of ``helpers.metric_reads`` saw under Lightning's Trainer, for every scenario."""
    return lightning_runs["metric_reads"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["no_logger", "logger_every_2", "no_logger_every_5_sanity", "epoch_end_log",
                                      "ddp_fork", "two_val_loaders", "in_place_after_log"])
def test_the_three_metric_dicts_read_from_every_hook_as_in_lightning(tmp_path, lightning_reads, scenario,
                                                                     forked_python):
    """A callback reads ``callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics`` from every training and
    validation hook and after the fit, on accelkit's Trainer and Lightning's, with the same Module (every
    ``on_step``/``on_epoch`` combination, numbers and tensors, ``prog_bar``, ``sync_dist``, ``logger=False``,
    ``reduce_fx``, training and validation values): the same names, values, types, dtypes and devices at every read
    (``helpers.metric_reads`` lists the scenarios: with and without a logger, ``log_every_n_steps`` 1, 2 and 5, a
    sanity check, logs in ``on_train_epoch_end``, ``trainer.validate`` after the fit, and each rank of a ``ddp_fork``
    fit, where ``sync_dist`` reduces step values when logged and epoch values when computed; two validation loaders,
    where a value logged per step and per epoch is ``name_step/dataloader_idx_N`` as in Lightning, also with
    ``add_dataloader_idx=False``, each loader's epoch values are published once its batches end, and the CSV
    logger's columns and values are Lightning's; tensors changed in place after ``self.log``, whose logged step and
    epoch values do not change, as Lightning's)."""
    from helpers.metric_reads import differences, record

    if scenario == "ddp_fork":  # forked workers: torch refuses to fork a process whose autograd ran on a GPU (an
        # earlier test's, on a GPU machine), so this one runs in a process of its own on the CPU (forked from the
        # prewarmed interpreter, which ran nothing), as Lightning's side
        ours = forked_python(f"""
            import json
            from helpers.metric_reads import record
            print(json.dumps(record("accelkit", {str(tmp_path)!r}, "ddp_fork")))
            """, path=[Path(__file__).resolve().parent], env={"CUDA_VISIBLE_DEVICES": ""})
    else:
        ours = record("accelkit", str(tmp_path), scenario)
    assert differences(ours, lightning_reads[scenario]) == []


@pytest.fixture
def lightning_logger_steps(lightning_runs) -> dict[str, Any]:
    """The steps at which Lightning's CSV and TensorBoard loggers got each name, for every scenario of
    ``helpers.logger_steps``."""
    pytest.importorskip("tensorboard", reason="reads TensorBoard's event files")
    return lightning_runs["logger_steps"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["every_step", "every_2", "accumulate_2", "val_mid_epoch", "resume",
                                      "resume_mid_epoch", "manual_two_optimizers", "own_step"])
def test_the_loggers_get_each_value_at_lightnings_steps(tmp_path, lightning_logger_steps, scenario):
    """The CSV and TensorBoard loggers get every name at the steps (and, in the CSV, the epochs) Lightning's do: the
    training steps from 0 (the batches that stepped before), the epoch-end and validation rows at the step of the
    batch they follow, every ``log_every_n_steps`` batches that stepped, with gradient accumulation counting the
    batches that stepped (a manual batch stepping two optimizers counts once, a LearningRateMonitor's values too),
    and a resumed fit going on from the checkpoint's count (written at an epoch's end or inside one); per-step
    validation values (``on_step=True`` in ``validation_step``) without an epoch, at each loader's own step, which
    goes on across the fit's validations (a ``trainer.test`` after the fit: its epoch row at the fit's count, its
    step rows from 0); a value logged as ``step`` is the row's step (``helpers.logger_steps`` lists the scenarios)."""
    from helpers.logger_steps import record

    assert record("accelkit", str(tmp_path), scenario) == lightning_logger_steps[scenario]


def test_a_step_computes_none_of_the_three_dicts(tmp_path, monkeypatch):
    """A read may cost, a step must not: with a step-interval scheduler (OneCycleLR), no logger, no progress bar and
    no callback reading them, the running loop's values are never computed for the three dicts during the steps
    (only at the epoch's end, to publish them), and a read computes them."""
    from accelkit.loops.metrics import MetricStore

    calls: list[str] = []
    compute = MetricStore.current

    def counted(self: MetricStore, kind: str) -> dict[str, Any]:
        calls.append(kind)
        return compute(self, kind)

    class Count(accelkit.Callback):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == 3:
                self.during = list(calls)
                self.read = trainer.callback_metrics["train_loss_step"]

    monkeypatch.setattr(MetricStore, "current", counted)
    counter = Count()
    trainer = accelkit.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                               enable_checkpointing=False, callbacks=[counter], default_root_dir=tmp_path, **QUIET)
    trainer.fit(OneCycle(), loader())
    assert counter.during == [] and isinstance(counter.read, torch.Tensor)
    assert calls[0] == "callback_metrics"


def counted_log() -> tuple[accelkit.Module, Any, Callable[..., int]]:
    """A Module attached to a quiet Trainer outside a run, its metric store (with a current batch of 4), and
    ``log(name, value, **options)``: the Python instructions accelkit runs for that ``self.log`` (no clock)."""
    from helpers.instructions import instructions

    module = accelkit.Module()
    module.trainer = accelkit.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                                      enable_checkpointing=False)
    store = module.trainer.run_state.metrics
    store.current_batch = torch.zeros(4, 2)

    def log(name: str, value: Any, **options: Any) -> int:  # (self.log's instructions and the store's)
        return instructions(lambda: module.log(name, value, **options), within="accelkit/")
    return module, store, log


def test_a_name_logged_again_with_the_same_options_takes_its_first_decisions():
    """``self.log`` of a name already logged with the same options and a floating-point scalar tensor (the
    per-step log of a training or validation step) stores the value with the decisions made for its first log,
    a shorter path than deciding anew (counted in Python instructions: no clock); a changed option, a value of
    another kind, or a hook whose defaults differ (an epoch-end hook) is decided anew, with the results as before."""
    module, store, log = counted_log()

    values = [torch.tensor(float(i)) for i in range(4)]
    log("loss", values[0])
    repeated = log("loss", values[1])
    decided = log("first", values[2])  # a first log: decided in full
    assert repeated <= 0.75 * decided, (repeated, decided)
    with pytest.raises(ValueError, match=r"twice in <lambda> with different arguments \(prog_bar=False, then"):
        log("loss", values[2], prog_bar=True)  # a changed option from the same function: refused, as in Lightning
    entry = store.entries["loss"]
    log("loss", values[2])
    assert entry.step_value == 2.0 and entry.step_value is not values[2] and not entry.prog_bar  # a copy, as before
    log("loss", values[3])
    assert entry.step_value == 3.0 and entry.total is None and entry.fresh
    values[3].add_(10)  # changed in place after the log: not what was logged
    assert entry.step_value == 3.0
    # an epoch aggregate: the mean weighs each value by the batch's size (4) or the batch_size given
    for value, size in ((1.0, None), (3.0, None), (6.0, 2)):
        log("acc", torch.tensor(value), on_epoch=True, batch_size=size)
    acc = store.entries["acc"]
    assert acc.on_step and acc.on_epoch and float(acc.total) == 4 + 12 + 12 and acc.weight == 10.0
    # other kinds of values, decided anew each time
    log("acc", 2, on_epoch=True, batch_size=2)
    log("acc", torch.tensor([5.0]), on_epoch=True, batch_size=2)  # one element, not zero-dimensional
    assert float(acc.total) == 28 + 4 + 10 and acc.weight == 14.0 and acc.step_value.ndim == 0
    log("count", torch.tensor(3))  # an integer tensor becomes a float, as before
    log("count", torch.tensor(4))
    assert store.entries["count"].step_value.dtype == torch.float32 and store.entries["count"].step_value == 4
    # an epoch-end hook's defaults: the same call logs an epoch value there, a value of its own (another hook's, as in
    # Lightning: the step's value and options stay)
    store.set_epoch_end(True)
    log("loss", torch.tensor(7.0))
    [late] = [e for e in store.entries.values() if e.name == "loss" and e is not entry]
    assert late.on_epoch and not late.on_step and float(late.total) == 28.0 and late.weight == 4.0
    assert entry.step_value == 3.0 and entry.total is None


def test_a_name_logged_again_runs_one_frame_of_accelkit():
    """The per-step ``self.log(name, tensor)`` of a name logged before with the same options, by the same function,
    is told apart and kept in ``Module.log`` itself: one frame of accelkit (before, a second: ``Module.log`` handed
    the value to ``MetricStore.log_again``, which checked the hook running; before that, a third: ``MetricStore.log``
    was called with every option to tell it there)."""
    import sys

    module = counted_log()[0]
    module.log("loss", torch.tensor(1.0))
    frames: list[str] = []

    def seen(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and "/accelkit/" in frame.f_code.co_filename:
            frames.append(frame.f_code.co_qualname)

    previous = sys.getprofile()
    sys.setprofile(seen)
    try:
        module.log("loss", torch.tensor(2.0))
    finally:
        sys.setprofile(previous)
    assert frames == ["Module.log"], frames
    assert module.trainer.run_state.metrics.entries["loss"].step_value == 2.0
    # an option that cannot be part of the remembered key is decided in full, with its error as before
    with pytest.raises(ValueError, match="sync_dist_group is not supported"):
        module.log("loss", torch.tensor(3.0), sync_dist_group=[0, 1])
    with pytest.raises(ValueError, match=r"reduce_fx=\['mean'\] is not one of"):
        module.log("other", torch.tensor(3.0), reduce_fx=["mean"])
    module.trainer = None
    with pytest.raises(RuntimeError, match=r"Module.log\('loss', ...\) was called outside a Trainer run"):
        module.log("loss", torch.tensor(3.0))


class LogsTwice(accelkit.Module):
    """Logs ``x`` as ``case`` says: from one hook with other arguments at a later step or in the same step, from
    two hooks, from one helper run by a step and by an epoch-end hook, with the same arguments every time, or from
    a second hook first with the first hook's arguments, then with others (``other_hook_changes``)."""

    def __init__(self, case: str) -> None:
        super().__init__()
        self.case = case
        self.layer = torch.nn.Linear(2, 1)

    def helper(self) -> None:
        self.log("h", 1.0)  # the step's defaults in training_step, the epoch's in on_train_epoch_end

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.case == "later_step":
            self.log("x", 1.0, prog_bar=batch_idx == 0)
        elif self.case == "same_step":
            self.log("x", 1.0)
            self.log("x", 2.0, on_epoch=True)
        elif self.case in ("two_hooks", "same_arguments"):
            self.log("x", float(batch_idx), prog_bar=True)
        elif self.case == "other_hook_changes":
            self.log("x", torch.tensor(1.0), prog_bar=True)
        elif self.case == "helper":
            self.helper()
        return self.layer(batch[0]).pow(2).mean()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.case == "two_hooks":
            self.log("x", 2.0, prog_bar=False)
        elif self.case == "other_hook_changes":  # as training_step's at batch 0, then other arguments
            self.log("x", torch.tensor(2.0), prog_bar=batch_idx == 0)

    def on_train_epoch_end(self) -> None:
        if self.case == "helper":
            self.helper()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("case", ["later_step", "same_step", "two_hooks", "same_arguments", "helper",
                                  "other_hook_changes"])
def test_a_name_logged_twice_in_one_hook_with_other_arguments_is_refused_as_in_lightning(tmp_path, case):
    """Lightning 2.6.6 raises ``MisconfigurationException`` ("You called `self.log(x, ...)` twice in
    `training_step` with different arguments") for ``later_step`` and ``same_step``, and "... twice in
    `on_train_batch_end` ..." for ``other_hook_changes``, and runs the others (both Trainers were run on these cases
    when this was written); accelkit kept the first arguments silently, and later skipped the check for
    ``other_hook_changes`` (the second hook's first log took the first hook's remembered decisions without being
    noted). Now the same cases raise, naming the hook and what changed."""
    from torch.utils.data import TensorDataset

    trainer = accelkit.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                               enable_model_summary=False, enable_checkpointing=False, max_epochs=1,
                               default_root_dir=tmp_path)
    loader = torch.utils.data.DataLoader(TensorDataset(torch.randn(3, 2)), batch_size=1)
    if case in ("later_step", "same_step", "other_hook_changes"):
        changed = "on_epoch=False, then on_epoch=True" if case == "same_step" else "prog_bar=True, then prog_bar=False"
        hook = "on_train_batch_end" if case == "other_hook_changes" else "training_step"
        with pytest.raises(ValueError, match=rf"self.log\('x', ...\) was called twice in {hook} with "
                                             rf"different arguments \({changed}\)"):
            trainer.fit(LogsTwice(case), loader)
    else:
        trainer.fit(LogsTwice(case), loader)
        assert trainer.global_step == 3


@pytest.fixture
def lightning_hook_pairs(lightning_runs) -> dict[str, list[Any]]:
    """What the reading callback of ``helpers.metric_hooks`` saw under Lightning's Trainer, for every scenario."""
    return lightning_runs["metric_hooks"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["step_then_batch_end", "batch_start_then_step", "step_then_callback_batch_end",
                                      "step_then_epoch_end", "val_step_then_val_batch_end",
                                      "val_step_then_val_epoch_end"])
def test_a_name_logged_from_two_hooks_reads_as_in_lightning(tmp_path, lightning_hook_pairs, scenario):
    """A name logged from two hooks (``helpers.metric_hooks``: every combination of each hook's ``prog_bar``,
    ``logger`` and ``on_step``/``on_epoch``, the two hooks logging different values) is one value per hook, as in
    Lightning: each with its own options and epoch aggregate, and each of the three dicts (and the CSV logger) takes,
    for each of its names, the value of the last hook to log it among those whose options put it there. Before,
    accelkit kept one value per name, with the first hook's options and the last hook's value: the progress bar
    showed ``on_train_batch_end``'s value of a name only ``training_step`` logged with ``prog_bar=True``, and an
    epoch aggregate mixed both hooks' values."""
    from helpers.metric_hooks import record
    from helpers.metric_reads import differences

    assert differences(record("accelkit", str(tmp_path), scenario), lightning_hook_pairs[scenario]) == []


@pytest.mark.slow
def test_evaluation_results_and_epoch_end_values_of_several_loaders_as_in_lightning(tmp_path, lightning_runs):
    """What ``validate``/``test`` return (and ``predict``) after a fit, with one and two loaders, and the metric
    dicts' names after each (``helpers.evaluation_results``), as Lightning's Trainer. Before, a value logged in
    ``on_test_epoch_end`` (or ``on_validation_epoch_end``) with two loaders was named for the first loader
    (``test_end/dataloader_idx_0``) and only in its result; Lightning names it ``test_end``, in every loader's. So
    too, since, a value logged before the loaders run (``on_test_start``, ``on_test_epoch_start``,
    ``on_validation_epoch_start``, by the Module or a Callback); and the dicts after ``predict`` are Lightning's."""
    from helpers.evaluation_results import record

    theirs = lightning_runs["evaluation_results"]
    assert record("accelkit", str(tmp_path / "accelkit"), "after_fit") == theirs["after_fit"]


class LogsWithoutLoaderIndex(accelkit.Module):
    """Logs ``val_loss`` from each of two validation loaders with ``add_dataloader_idx=False``, under one name or
    (``own_names``) under a name per loader."""

    def __init__(self, own_names: bool) -> None:
        super().__init__()
        self.own_names = own_names
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        name = f"val_loss_{dataloader_idx}" if self.own_names else "val_loss"
        self.log(name, self.layer(batch[0]).pow(2).mean(), add_dataloader_idx=False)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_one_name_from_two_loaders_without_their_index_is_refused_as_in_lightning(tmp_path):
    """Lightning 2.6.6 raises ``MisconfigurationException`` ("You called `self.log(val_loss, ...)` twice in
    `validation_step` with different arguments") when two evaluation loaders log one name with
    ``add_dataloader_idx=False`` (run on both Trainers when this was written); accelkit mixed the two loaders' values
    into one mean silently. Now it raises, naming the loaders and what to do; a name per loader still works."""
    from torch.utils.data import TensorDataset

    def fit(own_names: bool) -> accelkit.Trainer:
        trainer = accelkit.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                                   enable_model_summary=False, enable_checkpointing=False, max_epochs=1,
                                   num_sanity_val_steps=0, default_root_dir=tmp_path)
        loader = torch.utils.data.DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
        trainer.fit(LogsWithoutLoaderIndex(own_names), loader, [loader, loader])
        return trainer

    with pytest.raises(ValueError, match=r"self.log\('val_loss', ..., add_dataloader_idx=False\) was called for "
                                         r"evaluation loaders 0 and 1, which would mix their values"):
        fit(own_names=False)
    assert {"val_loss_0", "val_loss_1"} <= set(fit(own_names=True).callback_metrics)


def test_a_repeated_log_of_a_tensor_or_a_float_is_one_lookup():
    """The per-step ``self.log(name, value)`` of a name logged before by the same function with the same options
    costs one lookup (counted in Python instructions: no clock): a floating-point scalar tensor's in ``Module.log``
    alone (was ~92 in two frames, the hook checked in the second), a Python float's too, then its value stored
    (was ~224: a float was decided in full every time). The values are what a full log stores."""
    module, store, log = counted_log()

    log("loss", torch.tensor(1.0))
    assert log("loss", torch.tensor(2.0)) <= 60
    log("lr", 0.5)
    assert log("lr", 0.25) <= 120
    log("mean", 1.0, on_epoch=True)
    log("mean", 3.0, on_epoch=True, batch_size=12)
    tensor = torch.tensor(5.0, requires_grad=True)
    log("loss", tensor * 1)
    assert store.entries["loss"].step_value == 5.0 and not store.entries["loss"].step_value.requires_grad
    assert store.entries["lr"].step_value == 0.25 and store.entries["mean"].step_value == 3.0
    assert store.entries["mean"].total == 1.0 * 4 + 3.0 * 12 and store.entries["mean"].weight == 16.0
    assert float(store.current("callback_metrics")["lr"]) == 0.25


class LogsFromAHelper(accelkit.Module):
    """Logs ``x`` through one helper from ``training_step`` and from ``on_train_batch_end`` (a tensor or, with
    ``number``, a Python float), and ``y`` from ``training_step`` itself: a repeat found for the helper's logs is
    taken only by the hook that logged it first, each hook keeps a value of its own (as in Lightning)."""

    def __init__(self, number: bool) -> None:
        super().__init__()
        self.number = number
        self.layer = torch.nn.Linear(4, 1)
        self.seen: list[tuple[float, float]] = []

    def helper(self, value: float) -> None:
        self.log("x", value if self.number else torch.tensor(value), prog_bar=True)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.helper(float(batch_idx))
        self.log("y", torch.tensor(float(batch_idx)))
        return self.layer(batch[0]).pow(2).mean()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        entries = self.trainer.run_state.metrics.entries
        before = float(entries["x"].step_value)
        self.helper(100.0 + batch_idx)
        self.seen.append((before, float(entries["x"].step_value)))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("number", [False, True], ids=["tensor", "float"])
def test_a_helper_run_by_two_hooks_logs_a_value_per_hook_when_logged_again(tmp_path, number):
    """A helper that logs ``x``, run by ``training_step`` and by ``on_train_batch_end`` every batch: the second hook's
    log never lands in the first hook's value (the repeat remembered for the helper is checked against the hook
    running it), over four batches, whether the value is a tensor or a Python float; the dicts read the last hook's."""
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    module = LogsFromAHelper(number)
    trainer.fit(module, loader(n=16, batch_size=4))
    assert module.seen == [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]
    assert float(trainer.progress_bar_metrics["x"]) == 103.0 and float(trainer.callback_metrics["y"]) == 3.0


class LogsFirstFromAnotherHookLater(accelkit.Module):
    """Logs ``x`` from ``training_step`` every batch, and in the second epoch from ``on_train_batch_start`` first;
    records the store's entries and the callback metrics at each epoch's last batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen: list[tuple[list[str], float]] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self.current_epoch == 1:
            self.log("x", torch.tensor(-1.0))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("x", torch.tensor(float(batch_idx)))
        return self.layer(batch[0]).pow(2).mean()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.is_last_batch:
            self.seen.append((list(self.trainer.run_state.metrics.entries),
                              float(self.trainer.callback_metrics["x"])))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_repeat_of_the_epoch_before_is_decided_anew_where_another_hook_logs_the_name_first(tmp_path):
    """An epoch's first ``self.log`` of a name that the same hook logged the epoch before takes that epoch's
    decisions, unless another hook logged the name first this epoch: then, as in a first epoch, the name is that
    hook's and the step's value is a value of its own (Lightning's one value per hook), which the dicts read last."""
    module = LogsFirstFromAnotherHookLater()
    quiet_trainer(tmp_path, max_epochs=3).fit(module, loader(n=16, batch_size=4))
    assert module.seen == [(["x"], 3.0), (["x", "x (from training_step)"], 3.0), (["x"], 3.0)]


def test_an_epochs_first_log_takes_the_decisions_of_the_epoch_before():
    """The first ``self.log(name, tensor)`` of an epoch, by the hook that logged it with the same options the epoch
    before, takes that epoch's decisions (counted in Python instructions: no clock): at most half of deciding
    anew (what every epoch's first log cost before), with the same entry and values."""
    module, store, log = counted_log()

    store.reset(training=True)
    decided = log("loss", torch.tensor(1.0), on_epoch=True)
    log("loss", torch.tensor(2.0), on_epoch=True)
    first = store.entries["loss"]
    store.set_epoch_end(True)  # the epoch's end, then the next epoch
    store.reset(training=True)
    carried = log("loss", torch.tensor(3.0), on_epoch=True)
    assert carried <= decided / 2, (carried, decided)
    entry = store.entries["loss"]
    assert entry is not first and (entry.on_step, entry.on_epoch, entry.caller) == (True, True, first.caller)
    assert entry.step_value == 3.0 and float(entry.total) == 12.0 and entry.weight == 4.0
    assert float(first.total) == 12.0  # the epoch before's entry is left as it was


@pytest.fixture
def lightning_log_refusals(lightning_runs) -> dict[str, Any]:
    """What each scenario of ``helpers.log_refusals`` did under Lightning's Trainer."""
    return lightning_runs["log_refusals"]


@pytest.mark.slow
def test_logging_is_refused_where_lightning_refuses_it_and_a_bad_value_is_a_value_error(tmp_path,
                                                                                      lightning_log_refusals):
    """Side by side with Lightning: ``self.log`` in each hook where Lightning refuses it (``configure_optimizers``,
    set-up, data loaders, the fit's and loops' ends, the batch transfer, checkpoints, the scheduler's step, the
    models' mode switches, prediction) raises, not a value silently dropped; in ``training_step`` and
    ``on_validation_start`` the value is kept; a string, a dict, a list or ``None`` logged raises a ``ValueError``
    on both (an ``except ValueError`` written for Lightning catches accelkit's); a ``bool`` is logged (as a float32
    1.0); ``on_train_start`` and the other hooks that run once per loop or epoch keep what they log (an epoch value),
    and refuse ``on_step=True`` or ``on_epoch=False`` (not a ``ValueError`` on either). A prediction hook that is a
    function of another name (``on_predict_start = shared_hook``) is refused too: its value was kept before."""
    from helpers.log_refusals import SCENARIOS, record

    ours = {scenario: record("accelkit", str(tmp_path), scenario) for scenario in SCENARIOS}
    assert {s: r for s, r in ours.items() if r != lightning_log_refusals[s]} == {}


@pytest.mark.parametrize("hook", ["configure_optimizers", "on_fit_start", "setup", "train_dataloader",
                                  "lr_scheduler_step", "on_validation_model_eval", "predict_step"])
def test_logging_in_a_hook_where_it_is_not_allowed_is_refused_by_name(tmp_path, hook):
    """``self.log`` in a hook where logging is not allowed (as in Lightning) raises a ``RuntimeError`` naming the hook
    and where logging is allowed, instead of the value being dropped."""
    from helpers.log_refusals import PREDICT_HOOKS, module_class

    trainer = quiet_trainer(tmp_path, max_epochs=1, limit_val_batches=1)
    with pytest.raises(RuntimeError, match=rf"self.log\(\) was called inside {hook}, where logging is not allowed "
                                           r"\(as in Lightning\): log from training_step"):
        trainer.predict(module_class("accelkit", hook)()) if hook in PREDICT_HOOKS else \
            trainer.fit(module_class("accelkit", hook)())


class LogsAheadOfTheEpoch(Net):
    """Logs ``start`` in ``on_train_start`` and ``epoch_start`` (its epoch, a Python float) in
    ``on_train_epoch_start``."""

    def on_train_start(self) -> None:
        self.log("start", 5.0)

    def on_train_epoch_start(self) -> None:
        self.log("epoch_start", float(self.current_epoch))


def test_what_on_train_start_logs_is_the_first_epochs_value_as_in_lightning(tmp_path):
    """As Lightning's: a value logged in ``on_train_start`` is the first epoch's (it was wiped by the epoch's start),
    in that epoch's row of the loggers beside the epoch's aggregates, and stays in ``callback_metrics``; a value
    logged in ``on_train_epoch_start`` is its epoch's value (it was a per-step value, at the first batch's step)."""
    logger = CSVLogger(tmp_path)
    trainer = quiet_trainer(tmp_path, max_epochs=2, logger=logger, log_every_n_steps=1, **QUIET)
    trainer.fit(LogsAheadOfTheEpoch(), loader())
    epoch_rows = [row for row in logger.rows if "train_loss_epoch" in row]
    assert [(row["step"], row.get("start"), row.get("epoch_start")) for row in epoch_rows] == [(3, 5.0, 0.0),
                                                                                             (7, None, 1.0)]
    assert not [row for row in logger.rows if "train_loss_epoch" not in row and {"start", "epoch_start"} & set(row)]
    assert float(trainer.callback_metrics["start"]) == 5.0 and float(trainer.logged_metrics["start"]) == 5.0
    assert float(trainer.callback_metrics["epoch_start"]) == 1.0


@pytest.mark.parametrize("scenario", ["on_step:on_train_start", "on_step:on_train_epoch_start",
                                      "on_epoch:on_train_epoch_end", "on_step:on_validation_start",
                                      "on_epoch:on_validation_epoch_end"])
def test_a_step_value_in_a_hook_that_logs_epoch_values_only_is_refused_by_name(tmp_path, scenario):
    """As Lightning's: ``on_step=True`` or ``on_epoch=False`` in a hook that runs once per loop or epoch raises a
    ``RuntimeError`` naming the name, the option, the hook and the values allowed there, instead of being dropped."""
    from helpers.log_refusals import module_class

    option, hook = scenario.split(":")
    given = "on_step=True" if option == "on_step" else "on_epoch=False"
    with pytest.raises(RuntimeError, match=rf"^self.log\('x', ..., {given}\) was called inside {hook}, which logs "
                                           r"epoch values only \(as in Lightning\): there on_step must be False and "
                                           r"on_epoch True \(the defaults\)"):
        quiet_trainer(tmp_path, max_epochs=1, limit_val_batches=1).fit(module_class("accelkit", scenario)())


def test_a_bool_is_logged_as_a_float32_one_or_zero_as_in_lightning(tmp_path):
    """As Lightning's: ``self.log("flag", True)`` records 1.0 (a float32 tensor in ``callback_metrics``), ``False``
    0.0, per step and in the epoch's mean, instead of a ``LoggedValueError``."""

    class Flags(Net):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("flag", batch_idx % 2 == 0, on_step=True, on_epoch=True)
            return super().training_step(batch, batch_idx)

    logger = CSVLogger(tmp_path)
    trainer = quiet_trainer(tmp_path, max_epochs=1, logger=logger, log_every_n_steps=1, **QUIET)
    trainer.fit(Flags(), loader())
    assert [row["flag_step"] for row in logger.rows if "flag_step" in row] == [1.0, 0.0, 1.0, 0.0]
    assert trainer.callback_metrics["flag_epoch"].dtype == torch.float32
    assert float(trainer.callback_metrics["flag_epoch"]) == 0.5


@pytest.mark.parametrize("kind", ["str", "dict", "list", "none"])
def test_a_value_that_cannot_be_logged_is_a_value_error_and_a_type_error(tmp_path, kind):
    """A value ``self.log`` cannot record raises :class:`accelkit.errors.LoggedValueError`: a ``ValueError`` as
    Lightning's, and a ``TypeError`` as accelkit's was, naming the value, its type and what can be logged."""
    from accelkit.errors import LoggedValueError
    from helpers.log_refusals import VALUES, module_class

    value = VALUES[kind]
    with pytest.raises(LoggedValueError) as raised:
        quiet_trainer(tmp_path, max_epochs=1).fit(module_class("accelkit", f"value:{kind}")())
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, TypeError)
    assert str(raised.value) == ("log('x'): value must be a number, a scalar tensor or a metric object with "
                                 f"update/compute/reset, not {type(value).__name__} ({value!r})")


def test_fewer_batches_an_epoch_than_log_every_n_steps_is_a_warning(tmp_path):
    """An epoch shorter than ``log_every_n_steps`` with a logger warns, as Lightning's fit loop does: a first run on
    a few batches (dogsteven/saliency-prediction's GAN, Cogniveon/pytorch-template's classifier) otherwise writes
    no per-step value and says nothing. Not with a logger off, nor once the epoch reaches the interval."""
    import warnings

    def warned(**kwargs: Any) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quiet_trainer(tmp_path, max_epochs=1, **QUIET, **kwargs).fit(RegressionModule(batch_size=8, n=32))
        return [str(w.message) for w in caught if "log_every_n_steps" in str(w.message)]

    found = warned(logger=CSVLogger(tmp_path / "csv"), log_every_n_steps=5)
    assert len(found) == 1 and "log_every_n_steps=5" in found[0] and "has 4 batches" in found[0], found
    assert warned(logger=CSVLogger(tmp_path / "csv"), log_every_n_steps=4) == []
    assert warned(logger=False, log_every_n_steps=5) == []
