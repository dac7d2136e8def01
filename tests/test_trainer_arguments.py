"""The Trainer arguments Lightning users pass (issue 8, item 6), each observed on a real CPU fit:
``num_sanity_val_steps``, ``enable_model_summary``, ``fast_dev_run``, ``val_check_interval``,
``check_val_every_n_epoch``, ``deterministic``, ``min_epochs``/``min_steps``, ``max_time``, ``overfit_batches``,
``benchmark``, ``profiler``, ``inference_mode``, ``detect_anomaly``, ``sync_batchnorm``,
``reload_dataloaders_every_n_epochs``, ``max_epochs=-1``, ``barebones``, Lightning-cloud arguments and bad values.

Before issue 8 these arguments were unknown (``TypeError``) or silently ignored; each test checks the behaviour
Lightning documents, not only that the argument is accepted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.errors import ConfigurationError  # noqa: E402
from helpers.fixtures import lightning_records_of  # noqa: E402
from helpers.guards import child_env  # noqa: E402
from helpers.models import RegressionModule, WeightDump, quiet_trainer, regression_data  # noqa: E402
from helpers.prewarmed import Prewarmed  # noqa: E402

QUIET = dict(enable_model_summary=False)


def indexed_data(n: int) -> TensorDataset:
    """Samples whose first feature is their index, so a step can tell which samples it got."""
    data = regression_data(n)
    x, y = data.tensors
    x = x.clone()
    x[:, 0] = torch.arange(n, dtype=x.dtype)
    return TensorDataset(x, y)


class Recorder(accelkit.Module):
    """Records every step with the trainer state it ran in.

    :param n_train: training samples (batches of 4).
    :param n_val: validation samples (batches of 4).
    """

    def __init__(self, n_train: int = 16, n_val: int = 8, shuffle: bool = False, sleep: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.n_train, self.n_val, self.shuffle, self.sleep = n_train, n_val, shuffle, sleep
        self.train_batches: list[tuple[int, int, list[int]]] = []
        self.val_calls: list[dict[str, Any]] = []
        self.flags: dict[str, list[Any]] = {}
        self.loader_calls = {"train": 0, "val": 0}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def _flag(self, name: str, value: Any) -> None:
        self.flags.setdefault(name, []).append(value)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.train_batches.append((self.current_epoch, batch_idx, x[:, 0].long().tolist()))
        self._flag("train_deterministic", torch.are_deterministic_algorithms_enabled())
        self._flag("train_anomaly", torch.is_anomaly_enabled())
        self._flag("train_grad", torch.is_grad_enabled())
        if self.sleep:
            time.sleep(self.sleep)
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.val_calls.append({"sanity": self.trainer.sanity_checking, "epoch": self.current_epoch,
                               "step": self.global_step, "batch_idx": batch_idx})
        self._flag("val_inference", torch.is_inference_mode_enabled())
        self._flag("val_grad", torch.is_grad_enabled())
        self.log("val_loss", F.mse_loss(self(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._flag("test_inference", torch.is_inference_mode_enabled())
        self._flag("test_grad", torch.is_grad_enabled())

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        self._flag("predict_inference", torch.is_inference_mode_enabled())
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader:
        self.loader_calls["train"] += 1
        return DataLoader(indexed_data(self.n_train), batch_size=4, shuffle=self.shuffle)

    def val_dataloader(self) -> DataLoader:
        self.loader_calls["val"] += 1
        return DataLoader(regression_data(self.n_val, seed=1), batch_size=4)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(8, seed=2), batch_size=4)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(8, seed=3), batch_size=4)

    # helpers for the assertions
    def sanity_calls(self) -> int:
        return sum(1 for c in self.val_calls if c["sanity"])

    def real_val_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.val_calls if not c["sanity"]]


def batches_per_epoch(model: Recorder) -> dict[int, int]:
    counts: dict[int, int] = {}
    for epoch, _, _ in model.train_batches:
        counts[epoch] = counts.get(epoch, 0) + 1
    return counts


# ---------------------------------------------------------------------------------------------- sanity check
@pytest.mark.parametrize("steps, expected", [(0, 0), (2, 2), (-1, 4)])
def test_num_sanity_val_steps(tmp_path, steps, expected):
    model = Recorder(n_val=16)  # 4 validation batches
    trainer = quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=steps, **QUIET)
    trainer.fit(model)
    assert model.sanity_calls() == expected
    assert len(model.real_val_calls()) == 4  # the epoch's validation runs every batch
    assert all(not c["sanity"] for c in model.val_calls[expected:])


def test_num_sanity_val_steps_default_is_two(tmp_path):
    model = Recorder(n_val=16)
    quiet_trainer(tmp_path, max_epochs=1, **QUIET).fit(model)
    assert model.sanity_calls() == 2


class MetricsAtSanityEnd(accelkit.Callback):
    """What ``callback_metrics``/``logged_metrics`` hold in the sanity check's ``on_validation_end`` and
    ``on_sanity_check_end`` and when training starts."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def _keep(self, when: str, trainer: Any) -> None:
        self.seen[when] = {"callback": dict(trainer.callback_metrics), "logged": dict(trainer.logged_metrics)}

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            self._keep("validation_end", trainer)

    def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
        self._keep("sanity_end", trainer)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.seen.setdefault("train_start", {"callback": dict(trainer.callback_metrics),
                                             "logged": dict(trainer.logged_metrics)})


def test_sanity_check_metrics_are_not_logged(tmp_path):
    from accelkit.loggers import CSVLogger

    spy = MetricsAtSanityEnd()
    logger = CSVLogger(tmp_path)
    model = Recorder(n_val=16)
    trainer = quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=2, logger=logger, callbacks=[spy],
                            **QUIET)
    trainer.fit(model)
    assert model.sanity_calls() == 2
    # as in Lightning: the sanity check's value is in callback_metrics until the check ends (a callback's
    # on_validation_end reads it there), then cleared before training; no logger receives it
    for when in ("validation_end", "sanity_end"):
        assert "val_loss" in spy.seen[when]["callback"] and "val_loss" in spy.seen[when]["logged"], when
    assert spy.seen["train_start"] == {"callback": {}, "logged": {}}
    rows = [row for row in logger.rows if row.get("val_loss") not in (None, "")]
    assert len(rows) == 1  # the epoch's validation only, not the sanity check


# ---------------------------------------------------------------------------------------------- model summary
def test_enable_model_summary_prints_the_table_once(tmp_path, capsys):
    model = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=2, num_sanity_val_steps=0, enable_model_summary=True)
    trainer.fit(model)
    out = capsys.readouterr().out
    assert out.count("Linear") == 1, out
    assert "layer" in out and "5" in out  # the layer's name and its parameter count (4 weights + 1 bias)
    assert out.count("Total params") == 1, out


def test_model_summary_is_on_by_default(tmp_path, capsys):
    quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0).fit(Recorder())
    assert "Linear" in capsys.readouterr().out


def test_enable_model_summary_false_prints_none(tmp_path, capsys):
    quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0, enable_model_summary=False).fit(Recorder())
    out = capsys.readouterr().out
    assert "Linear" not in out and "params" not in out.lower(), out


# ---------------------------------------------------------------------------------------------- fast_dev_run
@pytest.mark.parametrize("fast, batches", [(True, 1), (3, 3)])
def test_fast_dev_run(tmp_path, fast, batches):
    model = Recorder(n_train=32, n_val=32)  # 8 batches each
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, fast_dev_run=fast, max_epochs=5,
                               enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model)
    assert batches_per_epoch(model) == {0: batches}  # one epoch of N batches
    assert model.sanity_calls() == 0
    assert len(model.real_val_calls()) == batches
    assert trainer.global_step == batches
    # no checkpoint and no logger files
    assert list(tmp_path.rglob("*.ckpt")) == []
    assert list(tmp_path.rglob("*.csv")) == [] and list(tmp_path.rglob("events.out.tfevents*")) == []
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "logs").exists()
    tested = trainer.test(model, verbose=False)
    assert len(model.flags["test_grad"]) == min(batches, 2) and tested == [{}]
    predictions = trainer.predict(model)
    assert len(predictions) == min(batches, 2)


# ---------------------------------------------------------------------------------------------- validation timing
def test_val_check_interval_int_counts_batches(tmp_path):
    model = Recorder(n_train=32, n_val=4)  # 8 training batches, 1 validation batch
    trainer = quiet_trainer(tmp_path, max_epochs=2, val_check_interval=2, num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    # every 2 training batches: 4 validations per epoch, after steps 2, 4, 6, 8, 10, ...
    assert [c["step"] for c in model.val_calls] == [2, 4, 6, 8, 10, 12, 14, 16]


def test_val_check_interval_fraction(tmp_path):
    model = Recorder(n_train=32, n_val=4)
    trainer = quiet_trainer(tmp_path, max_epochs=2, val_check_interval=0.5, num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert [c["step"] for c in model.val_calls] == [4, 8, 12, 16]


def test_val_check_interval_across_epochs_without_check_val_every_n_epoch(tmp_path):
    """``check_val_every_n_epoch=None`` with an int interval counts batches across epochs (Lightning)."""
    model = Recorder(n_train=12, n_val=4)  # 3 batches per epoch
    trainer = quiet_trainer(tmp_path, max_epochs=4, val_check_interval=4, check_val_every_n_epoch=None,
                            num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert [c["step"] for c in model.val_calls] == [4, 8, 12]


def test_check_val_every_n_epoch(tmp_path):
    model = Recorder(n_train=8, n_val=4)
    trainer = quiet_trainer(tmp_path, max_epochs=4, check_val_every_n_epoch=2, num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert [c["epoch"] for c in model.val_calls] == [1, 3]


# ---------------------------------------------------------------------------------------------- determinism, flags
def test_deterministic_inside_training_step_and_restored(tmp_path):
    before = torch.are_deterministic_algorithms_enabled()
    model = Recorder()
    quiet_trainer(tmp_path, max_epochs=1, deterministic=True, num_sanity_val_steps=0, **QUIET).fit(model)
    assert model.flags["train_deterministic"] == [True] * 4
    assert torch.are_deterministic_algorithms_enabled() == before
    model = Recorder()
    quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0, **QUIET).fit(model)
    assert model.flags["train_deterministic"] == [before] * 4


def test_detect_anomaly(tmp_path):
    model = Recorder()
    quiet_trainer(tmp_path, max_epochs=1, detect_anomaly=True, num_sanity_val_steps=0, **QUIET).fit(model)
    assert model.flags["train_anomaly"] == [True] * 4
    assert not torch.is_anomaly_enabled()
    model = Recorder()
    quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0, **QUIET).fit(model)
    assert model.flags["train_anomaly"] == [False] * 4


def test_detect_anomaly_finds_the_nan_producing_op(tmp_path):
    class NaN(Recorder):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, _ = batch
            return torch.sqrt(self(x) * 0.0 - 1.0).sum()  # sqrt of a negative: NaN in the backward

    with pytest.raises(RuntimeError, match="SqrtBackward"):
        quiet_trainer(tmp_path, max_epochs=1, detect_anomaly=True, num_sanity_val_steps=0, **QUIET).fit(NaN())


def test_benchmark_on_an_accelerator_without_one_is_named_in_a_warning(tmp_path):
    # cuDNN's benchmark mode is the CUDA plugin's (plugins/cuda/tests/test_determinism.py); the CPU has none
    with pytest.warns(UserWarning, match=r"Trainer\(benchmark=True\) has no effect on the 'cpu' accelerator"):
        quiet_trainer(tmp_path, max_epochs=1, benchmark=True, num_sanity_val_steps=0, **QUIET).fit(Recorder())


@pytest.mark.parametrize("inference_mode", [True, False])
def test_inference_mode(tmp_path, inference_mode):
    model = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=1, inference_mode=inference_mode, num_sanity_val_steps=0, **QUIET)
    trainer.validate(model, verbose=False)
    trainer.test(model, verbose=False)
    trainer.predict(model)
    for stage in ("val", "test", "predict"):
        assert model.flags[f"{stage}_inference"] == [inference_mode] * 2, stage
    for stage in ("val", "test"):
        assert model.flags[f"{stage}_grad"] == [False] * 2, stage  # no_grad without inference mode


def test_validation_inside_fit_runs_without_grad(tmp_path):
    model = Recorder()
    quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0, **QUIET).fit(model)
    assert model.flags["val_grad"] == [False] * 2
    assert model.flags["train_grad"] == [True] * 4


# ---------------------------------------------------------------------------------------------- stopping rules
class StopAt(accelkit.Callback):
    """Requests a stop once: at the end of epoch ``epoch`` or after training batch ``batch`` of epoch 0."""

    def __init__(self, epoch: int | None = None, batch: int | None = None) -> None:
        self.epoch, self.batch = epoch, batch

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.epoch is not None and trainer.current_epoch == self.epoch:
            trainer.should_stop = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.batch is not None and trainer.current_epoch == 0 and batch_idx == self.batch:
            trainer.should_stop = True


def test_should_stop_without_minimum_stops_now(tmp_path):
    model = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=10, callbacks=[StopAt(epoch=0)], num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert trainer.current_epoch == 1 and trainer.global_step == 4


def test_min_epochs_defers_an_early_stop(tmp_path):
    """A stop requested in epoch 0 waits for ``min_epochs=3`` and then happens (Lightning keeps the request:
    training continues to min_epochs, not to max_epochs)."""
    model = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=10, min_epochs=3, callbacks=[StopAt(epoch=0)],
                            num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert sorted(batches_per_epoch(model)) == [0, 1, 2]
    assert trainer.current_epoch == 3 and trainer.global_step == 12


def test_min_steps_defers_an_early_stop(tmp_path):
    """As Lightning's: ``min_steps`` without ``min_epochs`` also waits for the first epoch's end (Lightning's
    ``min_epochs`` becomes 1), so a stop requested at batch 0 with ``min_steps=6`` happens after the 8 batches
    of epoch 0; in a later epoch it happens once ``min_steps`` is reached."""
    model = Recorder(n_train=32)  # 8 batches per epoch
    trainer = quiet_trainer(tmp_path, max_epochs=10, min_steps=6, callbacks=[StopAt(batch=0)],
                            num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert trainer.global_step == 8
    assert len(model.train_batches) == 8
    model = Recorder(n_train=32)
    trainer = quiet_trainer(tmp_path, max_epochs=10, min_steps=11, callbacks=[StopAt(batch=0)],
                            num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert trainer.global_step == 11


@pytest.fixture(scope="module")
def lightning_runs(tmp_path_factory) -> dict[str, Any]:
    """What each side-by-side helper of this module recorded under Lightning's Trainer, for every scenario: all in
    one process (one import of Lightning and torch_xla for the three)."""
    return lightning_records_of(tmp_path_factory.mktemp("lightning"),
                                ["stop_runs", "epoch_limit_warnings", "log_interval_warnings"])


@pytest.fixture
def lightning_stop_runs(lightning_runs) -> dict[str, list[list[Any]]]:
    """The batches Lightning's Trainer runs in every scenario of ``helpers.stop_runs``."""
    return lightning_runs["stop_runs"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["callback_mid_epoch", "step_mid_epoch", "last_batch", "min_steps_defers",
                                      "min_epochs_defers", "val_every_2_epochs", "val_interval_3"])
def test_a_requested_stop_validates_first_and_waits_for_the_minimums_as_in_lightning(tmp_path, lightning_stop_runs,
                                                                                    scenario):
    """A stop requested in the middle of an epoch (from a callback's ``on_train_batch_end`` or from
    ``training_step``) runs the validation first, as Lightning's Trainer does, in an epoch that validates
    (``check_val_every_n_epoch``), also right after a validation due at ``val_check_interval``; with
    ``min_steps`` (and no ``min_epochs``) the stop waits for the end of the first epoch, with ``min_epochs`` for
    that many epochs: the same training and validation batches, at the same steps, as Lightning's."""
    from helpers.stop_runs import record

    assert record("accelkit", str(tmp_path), scenario) == lightning_stop_runs[scenario]


@pytest.fixture
def lightning_epoch_limit_warnings(lightning_runs) -> dict[str, dict[str, Any]]:
    """What Lightning's Trainer warns about the epoch limit in every scenario of ``helpers.epoch_limit_warnings``."""
    return lightning_runs["epoch_limit_warnings"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["nothing_bounds", "max_epochs_given", "max_epochs_unlimited", "max_steps",
                                      "max_time", "timer_callback", "fast_dev_run"])
def test_a_fit_bounded_by_nothing_warns_of_its_1000_epochs_as_in_lightning(tmp_path, lightning_epoch_limit_warnings,
                                                                           scenario):
    """With no ``max_epochs`` and neither ``max_steps``, ``max_time`` nor a ``Timer`` callback, a fit stops after
    1000 epochs and says so in a ``UserWarning`` that names ``max_epochs=-1``, as Lightning's (a
    ``PossibleUserWarning``); bounded any other way, it does not warn. Before, accelkit set the 1000 silently. The
    warning is located at the ``fit`` call (Lightning's, in its own ``loops/utilities.py``)."""
    from helpers.epoch_limit_warnings import record

    ours, theirs = record("accelkit", str(tmp_path), scenario), lightning_epoch_limit_warnings[scenario]
    assert [w[:3] for w in ours["warnings"]] == [w[:3] for w in theirs["warnings"]]
    assert {**ours, "warnings": None} == {**theirs, "warnings": None}
    assert all(where == "epoch_limit_warnings.py" for *_, where in ours["warnings"])


@pytest.fixture
def lightning_log_interval_warnings(lightning_runs) -> dict[str, list[list[Any]]]:
    """What Lightning's Trainer warns about a short epoch in every scenario of ``helpers.log_interval_warnings``."""
    return lightning_runs["log_interval_warnings"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["fewer_batches", "as_many_batches", "more_batches", "limited_below",
                                      "no_logger", "fast_dev_run", "no_length"])
def test_an_epoch_shorter_than_the_logging_interval_warns_as_in_lightning(tmp_path, lightning_log_interval_warnings,
                                                                         scenario):
    """A fit with a logger whose training epoch has fewer batches than ``log_every_n_steps`` (after
    ``limit_train_batches``) warns, naming both, as Lightning's ``PossibleUserWarning`` (a ``UserWarning``); with
    no logger, under ``fast_dev_run`` or with a loader without a length it does not. Before, accelkit said
    nothing and a user saw no training values in the logger for a whole short epoch."""
    from helpers.log_interval_warnings import record

    ours = record("accelkit", str(tmp_path), scenario)
    assert ours == lightning_log_interval_warnings[scenario]
    assert ours == ([[True, True, True]] if scenario in ("fewer_batches", "limited_below") else []), ours


def test_max_time_stops_early(tmp_path):
    model = Recorder(sleep=0.05)
    trainer = quiet_trainer(tmp_path, max_epochs=1000, max_time="00:00:00:01", num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert trainer.current_epoch < 1000
    assert 0 < trainer.global_step < 4000


def test_max_time_accepts_timedelta_and_dict(tmp_path):
    from datetime import timedelta

    for value in (timedelta(seconds=1), {"seconds": 1}):
        model = Recorder(sleep=0.05)
        trainer = quiet_trainer(tmp_path, max_epochs=1000, max_time=value, num_sanity_val_steps=0, **QUIET)
        trainer.fit(model)
        assert trainer.current_epoch < 1000


def test_max_epochs_minus_one_with_max_steps(tmp_path):
    model = Recorder()  # 4 batches per epoch
    trainer = quiet_trainer(tmp_path, max_epochs=-1, max_steps=10, num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert trainer.global_step == 10
    assert batches_per_epoch(model) == {0: 4, 1: 4, 2: 2}


def test_max_steps_alone_is_not_capped_at_1000_epochs(tmp_path):
    """``max_steps`` without ``max_epochs``: Lightning sets max_epochs=-1 (the steps decide)."""
    trainer = quiet_trainer(tmp_path, max_steps=6, num_sanity_val_steps=0, **QUIET)
    trainer.fit(Recorder(n_train=4))  # one batch per epoch
    assert trainer.global_step == 6 and trainer.current_epoch == 6


def test_max_epochs_default_is_1000_without_max_steps(tmp_path):
    """As Lightning's: ``None`` until a fit sets the default (1000 without ``max_steps``, ``max_time`` or a Timer;
    ``-1`` with ``max_time``: ``tests/helpers/trainer_counts.py`` compares the reads with Lightning's)."""
    trainer = quiet_trainer(tmp_path, limit_train_batches=0, num_sanity_val_steps=0, **QUIET)
    assert trainer.max_epochs is None
    with pytest.warns(UserWarning, match="no training"):
        trainer.fit(Recorder())
    assert trainer.max_epochs == 1000
    timed = quiet_trainer(tmp_path, max_time="00:01:00:00", limit_train_batches=0, num_sanity_val_steps=0, **QUIET)
    with pytest.warns(UserWarning, match="no training"):
        timed.fit(Recorder())
    assert timed.max_epochs == -1


# ---------------------------------------------------------------------------------------------- data
def test_overfit_batches_repeats_the_same_batches_sequentially(tmp_path):
    model = Recorder(n_train=32, n_val=32, shuffle=True)
    trainer = quiet_trainer(tmp_path, max_epochs=3, overfit_batches=2, num_sanity_val_steps=0, **QUIET)
    with pytest.warns(UserWarning, match="shuffl"):
        trainer.fit(model)
    per_epoch: dict[int, list[list[int]]] = {}
    for epoch, _, indices in model.train_batches:
        per_epoch.setdefault(epoch, []).append(indices)
    assert sorted(per_epoch) == [0, 1, 2]
    for epoch in per_epoch:
        assert per_epoch[epoch] == [[0, 1, 2, 3], [4, 5, 6, 7]], epoch  # the first 2 batches, in order
    assert len(model.real_val_calls()) == 3 * 2  # validation is limited to 2 batches as well


class _Stream(IterableDataset):
    def __iter__(self):
        data = regression_data(16)
        return iter([data[i] for i in range(16)])


class _StreamModule(RegressionModule):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Stream(), batch_size=4)


def test_overfit_batches_on_a_dataset_without_a_length_says_so(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, overfit_batches=2, num_sanity_val_steps=0, **QUIET)
    with pytest.raises(ValueError, match="overfit_batches cannot re-order a loader over _Stream, a dataset without a "
                                         "length"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        trainer.fit(_StreamModule())


def test_overfit_batches_fraction(tmp_path):
    model = Recorder(n_train=32)
    trainer = quiet_trainer(tmp_path, max_epochs=1, overfit_batches=0.25, num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert batches_per_epoch(model) == {0: 2}


def test_reload_dataloaders_every_n_epochs(tmp_path):
    model = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=3, reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0,
                            **QUIET)
    trainer.fit(model)
    assert model.loader_calls["train"] == 3
    assert model.loader_calls["val"] == 3
    model = Recorder()
    quiet_trainer(tmp_path, max_epochs=3, num_sanity_val_steps=0, **QUIET).fit(model)
    assert model.loader_calls == {"train": 1, "val": 1}


# ---------------------------------------------------------------------------------------------- profiler
def test_simple_profiler_reports_training_step(tmp_path, capsys):
    model = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=1, profiler="simple", num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    out = capsys.readouterr().out
    assert "training_step" in out, out
    assert "training_step" in trainer.profiler.summary()


def test_pytorch_profiler_records_operators(tmp_path, capsys):
    from accelkit.profilers import PyTorchProfiler

    model = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=1, profiler="pytorch", num_sanity_val_steps=0, **QUIET)
    assert isinstance(trainer.profiler, PyTorchProfiler)
    trainer.fit(model)
    out = capsys.readouterr().out
    report = out + trainer.profiler.summary()
    assert "training_step" in report
    assert "aten::" in report  # torch.profiler's operator table


def test_unknown_profiler_is_an_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="fancy"):
        quiet_trainer(tmp_path, profiler="fancy")


# ---------------------------------------------------------------------------------------------- sync_batchnorm
class WithBatchNorm(accelkit.Module):
    """A BatchNorm layer in front of a linear one; records the class of its norm layer inside the run."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = nn.BatchNorm1d(4)
        self.layer = nn.Linear(4, 1)
        self.norm_types: set[str] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.norm(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.norm_types.add(type(self.norm).__name__)
        x, y = batch
        return F.mse_loss(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader:
        # rank-dependent statistics: the second half of the data is shifted and scaled
        x, y = regression_data(32).tensors
        x = x.clone()
        x[16:] = x[16:] * 3.0 + 5.0
        return DataLoader(TensorDataset(x, y), batch_size=4)


class NormTypeDump(accelkit.Callback):
    def __init__(self, folder: str) -> None:
        self.folder = folder

    def teardown(self, trainer: Any, module: Any, stage: str) -> None:
        Path(self.folder, f"norm{trainer.global_rank}.json").write_text(json.dumps(sorted(module.norm_types)))


def run_sync_batchnorm_scenario(root: str, sync: bool, accelerator: str = "cpu") -> None:
    """Run in a fresh interpreter by the tests below (the spawned workers import this module by name). Writes
    ``error.txt`` with the message if the fit raises."""
    try:
        trainer = accelkit.Trainer(accelerator=accelerator, devices=2, strategy="ddp_spawn", max_epochs=1,
                                   sync_batchnorm=sync, logger=False, enable_checkpointing=False,
                                   enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                                   callbacks=[WeightDump(root), NormTypeDump(root)])
        trainer.fit(WithBatchNorm())
    except Exception as exc:  # noqa: BLE001 - the test reads the message
        Path(root, "error.txt").write_text(f"{type(exc).__name__}: {exc}")


def sync_batchnorm_run(root: Path, sync: bool, accelerator: str,
                       prewarmed: Prewarmed) -> tuple[list[dict[str, Any]], list[Any]] | str:
    """The scenario's caller forked from the prewarmed interpreter; its two workers spawned (fresh interpreters)."""
    root.mkdir()
    code = (f"import test_trainer_arguments as t; "
            f"t.run_sync_batchnorm_scenario({str(root)!r}, {sync}, {accelerator!r})")
    proc = prewarmed.run(["-c", code], cwd=root, env=child_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    if (root / "error.txt").exists():
        return (root / "error.txt").read_text()
    ranks = [torch.load(root / f"rank{r}.pt", weights_only=True)["state_dict"] for r in range(2)]
    types = [json.loads((root / f"norm{r}.json").read_text()) for r in range(2)]
    return ranks, types


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="torch's SyncBatchNorm under DDP needs 2 CUDA devices")
def test_sync_batchnorm_on_ddp_spawn(tmp_path, prewarmed):
    """With sync_batchnorm the norm layer is a SyncBatchNorm in each worker and both ranks' running statistics
    are those of the global batch (equal); without it each rank keeps its own (they differ: the ranks see
    different samples)."""
    synced = sync_batchnorm_run(tmp_path / "sync", True, "cuda", prewarmed)
    assert not isinstance(synced, str), synced
    ranks, types = synced
    assert types == [["SyncBatchNorm"], ["SyncBatchNorm"]]
    for key in ("norm.running_mean", "norm.running_var"):
        torch.testing.assert_close(ranks[0][key], ranks[1][key], rtol=0, atol=1e-6)
    plain = sync_batchnorm_run(tmp_path / "plain", False, "cuda", prewarmed)
    assert not isinstance(plain, str), plain
    ranks, types = plain
    assert types == [["BatchNorm1d"], ["BatchNorm1d"]]
    assert not torch.allclose(ranks[0]["norm.running_mean"], ranks[1]["norm.running_mean"])


@pytest.mark.slow
def test_sync_batchnorm_on_cpu_ddp_spawn_is_a_clear_error(tmp_path, prewarmed):
    """torch's DistributedDataParallel refuses SyncBatchNorm on CPU modules ("SyncBatchNorm layers only work with
    GPU modules"), in Lightning too. accelkit's promise is a clear error naming the argument the user passed
    (``sync_batchnorm``), not torch's message from inside a spawned worker."""
    outcome = sync_batchnorm_run(tmp_path / "sync", True, "cpu", prewarmed)
    assert isinstance(outcome, str), "sync_batchnorm=True on CPU ddp_spawn trained; expected an error"
    # the messages, not the traceback lines (torch's frames are named *_sync_batchnorm_*)
    messages = [line for line in outcome.splitlines() if line.strip() and not line.startswith((" ", "\t"))]
    assert any("sync_batchnorm" in line for line in messages), outcome


def test_sync_batchnorm_on_one_device_is_a_no_op(tmp_path):
    """As in Lightning, sync_batchnorm only matters in a distributed run: one CPU process keeps BatchNorm."""
    model = WithBatchNorm()
    trainer = quiet_trainer(tmp_path, max_epochs=1, sync_batchnorm=True, num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    assert model.norm_types == {"BatchNorm1d"}
    assert isinstance(model.norm, nn.BatchNorm1d) and trainer.global_step == 8


# ---------------------------------------------------------------------------------------------- refused arguments
#: Lightning 1.x Trainer arguments (Lightning's 2.0 upgrade guide): a value, and what the error must tell to write
LIGHTNING_1X = {
    "gpus": (2, "accelerator='gpu', devices=2"),
    "progress_bar_refresh_rate": (10, "TQDMProgressBar(refresh_rate=10)"),
    "resume_from_checkpoint": ("last.ckpt", "trainer.fit(model, ckpt_path='last.ckpt')"),
    "auto_lr_find": (True, "Tuner(trainer).lr_find(model)"),
    "auto_scale_batch_size": ("power", "Tuner(trainer).scale_batch_size(model)"),
    "weights_summary": ("full", "ModelSummary(max_depth="),
    "checkpoint_callback": (False, "enable_checkpointing=False"),
    "flush_logs_every_n_steps": (50, "CSVLogger(save_dir, flush_logs_every_n_steps=50)"),
    "prepare_data_per_node": (False, "self.prepare_data_per_node = False"),
    "num_processes": (2, "accelerator='cpu', devices=2"),
    "auto_select_gpus": (True, "devices='auto'"),
    "distributed_backend": ("ddp", "strategy='ddp'"),
    "process_position": (1, "TQDMProgressBar(process_position=1)"),
    "log_gpu_memory": ("all", "DeviceStatsMonitor()"),
    "stochastic_weight_avg": (True, "StochasticWeightAveraging(swa_lrs="),
    "terminate_on_nan": (True, "detect_anomaly=True"),
    "weights_save_path": ("w", "ModelCheckpoint(dirpath='w')"),
    "reload_dataloaders_every_epoch": (True, "reload_dataloaders_every_n_epochs=1"),
    "replace_sampler_ddp": (False, "use_distributed_sampler=False"),
    "amp_backend": ("apex", "precision='16-mixed'"),
    "amp_level": ("O2", "precision='16-mixed'"),
    "move_metrics_to_cpu": (True, "remove it"),
    "multiple_trainloader_mode": ("min_size", "CombinedLoader(loaders, mode='min_size')"),
    "track_grad_norm": (2, "grad_norm(self, norm_type=2)"),
    "truncated_bptt_steps": (5, "manual optimization"),
    "ipus": (8, "not supported"),
}


@pytest.mark.parametrize("name", sorted(LIGHTNING_1X))
def test_a_lightning_1x_argument_is_named_with_its_2x_spelling(name, tmp_path):
    value, replacement = LIGHTNING_1X[name]
    with pytest.raises(TypeError) as info:
        accelkit.Trainer(accelerator="cpu", default_root_dir=tmp_path, **{name: value})
    message = str(info.value)
    assert f"{name}={value!r} (removed in Lightning 2.0): use " in message and replacement in message, message


def test_every_lightning_1x_argument_and_typo_is_reported_at_once(tmp_path):
    with pytest.raises(TypeError) as info:
        accelkit.Trainer(accelerator="cpu", default_root_dir=tmp_path, gpus=1, progress_bar_refresh_rate=10,
                         weights_summary=None, max_epoch=3)
    message = str(info.value)
    assert "\n" not in message
    for part in ("gpus=1", "accelerator='gpu', devices=1", "TQDMProgressBar(refresh_rate=10)", "weights_summary=None",
                 "max_epoch (did you mean 'max_epochs'?)"):
        assert part in message, (part, message)


def test_model_registry_is_refused_mentioning_lightning_cloud(tmp_path):
    with pytest.raises(ConfigurationError) as info:
        accelkit.Trainer(accelerator="cpu", model_registry="x", default_root_dir=tmp_path)
    message = str(info.value)
    assert "model_registry" in message and "Lightning" in message and "cloud" in message.lower()


def test_barebones_runs_without_extras(tmp_path, capsys):
    model = Recorder()
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, barebones=True, default_root_dir=tmp_path)
    trainer.fit(model)
    assert trainer.global_step == 4
    assert trainer.loggers == [] and trainer.checkpoint_callbacks == []
    assert model.sanity_calls() == 0  # Lightning: barebones turns the sanity check off
    assert list(tmp_path.iterdir()) == []  # nothing written
    out = capsys.readouterr()
    assert "Linear" not in out.out and "Epoch" not in out.err


def test_barebones_with_enable_checkpointing_is_an_error(tmp_path):
    with pytest.raises(ConfigurationError, match="enable_checkpointing"):
        accelkit.Trainer(accelerator="cpu", barebones=True, enable_checkpointing=True, default_root_dir=tmp_path)


@pytest.mark.parametrize("argument, value", [
    ("max_epochs", -2), ("val_check_interval", 0), ("num_sanity_val_steps", -5), ("fast_dev_run", -1),
    ("limit_val_batches", 1.5), ("min_epochs", -1), ("max_steps", -3), ("check_val_every_n_epoch", 0),
    ("reload_dataloaders_every_n_epochs", -1), ("overfit_batches", 2.5), ("val_check_interval", 1.5),
    ("max_time", "1 hour"),
])
def test_bad_values_are_errors_naming_the_value(tmp_path, argument, value):
    with pytest.raises((ConfigurationError, ValueError)) as info:
        accelkit.Trainer(accelerator="cpu", default_root_dir=tmp_path, **{argument: value})
    assert f"{argument}={value!r}" in str(info.value)


def test_several_bad_values_are_reported_together(tmp_path):
    with pytest.raises(ConfigurationError) as info:
        accelkit.Trainer(accelerator="cpu", default_root_dir=tmp_path, max_epochs=-2, num_sanity_val_steps=-5,
                         limit_val_batches=1.5)
    message = str(info.value)
    for part in ("max_epochs=-2", "num_sanity_val_steps=-5", "limit_val_batches=1.5"):
        assert part in message


# ------------------------------------------------------------------- accumulate_grad_batches, limit_train_batches
class Stream(IterableDataset):
    """Ten samples with no ``__len__``."""

    def __iter__(self):
        data = regression_data(10)
        return iter([data[i] for i in range(10)])


def test_a_partial_accumulation_window_is_stepped_even_without_a_loader_length(tmp_path):
    sized = quiet_trainer(tmp_path, max_epochs=2, accumulate_grad_batches=2)
    sized_model = RegressionModule()
    sized.fit(sized_model, DataLoader(regression_data(10), batch_size=2))
    stream = quiet_trainer(tmp_path, max_epochs=2, accumulate_grad_batches=2)
    stream_model = RegressionModule()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the trainer may warn that it cannot shard an iterable dataset
        stream.fit(stream_model, DataLoader(Stream(), batch_size=2))
    assert sized.global_step == stream.global_step == 6  # 5 batches, windows of 2 -> 3 steps per epoch
    assert all(p.grad is None for p in stream_model.parameters())  # nothing left over after fit
    for a, b in zip(sized_model.parameters(), stream_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_no_training_batches_stops_instead_of_looping(tmp_path):
    trainer = quiet_trainer(tmp_path, max_steps=5, limit_train_batches=0)
    with pytest.warns(UserWarning, match="no training is done"):
        trainer.fit(RegressionModule())
    assert trainer.global_step == 0 and trainer.current_epoch == 0


def test_options_a_single_device_strategy_does_not_read_are_refused(tmp_path):
    from accelkit.strategies import SingleDeviceStrategy

    with pytest.raises(ConfigurationError, match=r"takes no options, but was given \['device'\]"):
        accelkit.Trainer(accelerator="cpu", strategy=SingleDeviceStrategy(device="cpu"), default_root_dir=tmp_path)


def test_val_check_interval_longer_than_an_epoch_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="val_check_interval=10 must be <= the number of training batches per "
                                         "epoch \\(4\\).*check_val_every_n_epoch=None"):
        quiet_trainer(tmp_path, max_epochs=2, val_check_interval=10).fit(RegressionModule())


class RecordsOrder(RegressionModule):
    """A shuffled training loader; records the first batch's targets."""

    def __init__(self) -> None:
        super().__init__()
        self.first: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 0:
            self.first.append(batch[1].flatten().clone())
        return super().training_step(batch, batch_idx)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(32), batch_size=8, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(16, seed=1), batch_size=8, shuffle=True)


def test_the_sanity_check_does_not_change_the_training_order(tmp_path):
    orders = []
    for steps in (0, 2):
        torch.manual_seed(123)
        model = RecordsOrder()
        quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=steps).fit(model)
        orders.append(model.first[0])
    torch.testing.assert_close(orders[0], orders[1], rtol=0, atol=0)


# ------------------------------------------------------------------- every argument type-checked (issue 36, item 7)
# The cases issue 36 found (case 9): each was a bare TypeError/RuntimeError from pathlib, a tensor or timedelta, or a
# wrong value silently taken (any truthy value for a flag, a float or NaN seed).
WRONG_VALUES = [
    ("default_root_dir", 3.5), ("default_root_dir", "runs\0here"), ("default_root_dir", [".", "x"]),
    ("use_distributed_sampler", torch.tensor([1, 2])), ("detect_anomaly", torch.tensor([1, 2])),
    ("deterministic", torch.tensor([1, 2])), ("deterministic", 1), ("deterministic", "bogus"),
    ("barebones", "bogus"), ("enable_checkpointing", 1 + 2j), ("enable_progress_bar", 1), ("benchmark", "yes"),
    ("inference_mode", None), ("sync_batchnorm", 0),
    ("max_time", {"minutes": "x"}), ("max_time", {"bogus": 1}), ("max_time", {"days": 10**12}),
    ("max_time", {"hours": float("nan")}), ("max_time", "99999999999:00:00:00"), ("max_time", 3600),
    ("seed", float("nan")), ("seed", 3.5), ("seed", -1), ("seed", 2**32), ("seed", "42"), ("seed", True),
    ("num_nodes", 0), ("num_nodes", 1.0), ("num_nodes", np.int64(1)), ("accelerator", 3), ("strategy", 2),
    ("devices", 1.5), ("devices", [0.5]), ("precision", 32.0), ("precision", True), ("logger", 3),
    ("logger", [object()]), ("callbacks", 1), ("callbacks", [None]), ("profiler", 1), ("profiler", "advanced"),
    ("gradient_clip_val", float("nan")), ("compile_step", "yes"),
    # 0 was silently taken for the default 50 (Lightning reads 0 as "never log steps"): refused, naming it
    ("log_every_n_steps", 0), ("log_every_n_steps", torch.tensor([1, 2])),
]


# ids without memory addresses (an object()'s repr): every xdist worker must collect the same names
@pytest.mark.parametrize("argument, value", WRONG_VALUES,
                         ids=[re.sub(r" at 0x[0-9a-f]+", "", f"{a}={v!r:.30}") for a, v in WRONG_VALUES])
def test_a_wrong_type_or_value_is_a_configuration_error_naming_the_argument(tmp_path, argument, value):
    with pytest.raises(ConfigurationError) as info:
        accelkit.Trainer(**{"accelerator": "cpu", "default_root_dir": tmp_path, argument: value})
    message = str(info.value)
    assert f"{argument}=" in message, message
    assert any(word in message for word in ("must", "takes", "use ", "pass", "choose")), f"says what works: {message}"


@pytest.mark.parametrize("value, fix", [(np.True_, "bool(value)"), (torch.tensor(True), "bool(tensor.item())")])
def test_a_numpy_or_tensor_boolean_for_a_flag_is_refused_with_the_fix(tmp_path, value, fix):
    """Not taken for its truth value: ``np.False_ is not False``, so accepting one would turn a default on."""
    with pytest.raises(ConfigurationError, match=r"enable_checkpointing=.*pass a Python bool: " + re.escape(fix)):
        accelkit.Trainer(accelerator="cpu", default_root_dir=tmp_path, enable_checkpointing=value)


def test_every_wrong_type_is_reported_at_once(tmp_path):
    with pytest.raises(ConfigurationError) as info:
        accelkit.Trainer(accelerator="cpu", default_root_dir=3.5, barebones="bogus", seed=3.5)
    assert {"default_root_dir=3.5", "barebones='bogus'", "seed=3.5"} <= {
        p.split(" ", 1)[0] for p in info.value.problems}


@pytest.mark.parametrize("argument, value", [
    ("deterministic", "warn"), ("deterministic", None), ("max_time", "00:00:01:00"), ("max_time", {"minutes": 1.5}),
    ("max_time", timedelta(hours=1)), ("devices", 1), ("devices", "1"), ("precision", 32), ("precision", None),
    ("precision", "32"), ("precision", "32-true"), ("val_check_interval", 0.5), ("val_check_interval", 2),
    ("limit_train_batches", 0.5), ("limit_train_batches", 3), ("gradient_clip_val", 1), ("gradient_clip_val", 0.5),
    ("gradient_clip_val", None), ("seed", 0), ("seed", 2**32 - 1), ("seed", np.int64(7)), ("num_nodes", 1),
    ("enable_checkpointing", None), ("benchmark", None), ("enable_progress_bar", False), ("logger", False),
    ("logger", "csv"), ("profiler", "simple"), ("compile_step", False), ("default_root_dir", "relative/runs"),
])
def test_the_forms_lightning_accepts_are_accepted(tmp_path, monkeypatch, argument, value):
    monkeypatch.chdir(tmp_path)
    kwargs: dict[str, Any] = {"accelerator": "cpu", "default_root_dir": tmp_path, argument: value}
    trainer = accelkit.Trainer(**kwargs)
    if argument == "seed":
        assert trainer.seed == value


#: the documented Trainer parameters (its docstring's ``:param NAME:``), less the catch-all ``legacy_arguments``
DOCUMENTED = [name for name in re.findall(r":param (\w+):", accelkit.Trainer.__doc__ or "")
              if name != "legacy_arguments"]
#: values of every kind, right and wrong, for any parameter
ANY_VALUE = [
    None, True, False, 0, 1, -1, 2, 16, 32, -2, 2**32, 10**30, -10**30, 0.0, 0.5, 1.0, 3.5, -0.5, float("nan"),
    float("inf"), float(2**40), 1 + 2j, "", "bogus", "warn", "1", "0,1", "cpu", "auto", "simple", "advanced", "csv",
    "norm", "value", "32-true", "16-mixed", "no:cpu", "00:00:01:00", "99999999999:00:00:00", "1 hour", "a\0b", b"x",
    [], [1, 2], [0.5], ["cpu"], ["bogus"], (1,), {}, {"minutes": "x"}, {"minutes": 1}, {"days": 10**12},
    {"bogus": 1}, {"mode": "bogus"}, {"mode": "default"}, timedelta(seconds=-1), timedelta(minutes=1), Path("x"),
    np.True_, np.False_, np.int64(3), np.float64(0.5), torch.tensor(True), torch.tensor(3), torch.tensor([1, 2]),
]
BOOL_ONLY = ("inference_mode", "use_distributed_sampler", "detect_anomaly", "barebones", "sync_batchnorm")
BOOL_OR_NONE = ("enable_checkpointing", "enable_progress_bar", "enable_model_summary", "benchmark")


def must_refuse(name: str, value: Any) -> bool:
    """An oracle for the arguments whose accepted types are short to state: ``True`` when ``value`` is wrong."""
    if name in BOOL_ONLY:
        return type(value) is not bool
    if name in BOOL_OR_NONE:
        return value is not None and type(value) is not bool
    if name == "seed":
        return value is not None and not (isinstance(value, (int, np.integer)) and type(value) is not bool
                                          and 0 <= value < 2**32)
    if name == "default_root_dir":
        return not (value is None or (isinstance(value, (str, Path)) and "\0" not in str(value)))
    if name == "deterministic":
        return not (value is None or type(value) is bool or (type(value) is str and value == "warn"))
    return False


class Hang(Exception):
    """Raised by the alarm in a construction that did not end."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang("the Trainer's construction did not end within 60 s")


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="bounds each construction with SIGALRM (POSIX only)")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(DOCUMENTED), st.sampled_from(ANY_VALUE), min_size=1, max_size=3))
def test_any_documented_argument_combination_builds_or_names_the_argument(tmp_path, kwargs):
    """Fuzz over the documented parameters: building the Trainer (only) either works or raises a ConfigurationError
    naming a given argument; any other exception, a wrong value taken (the oracle) or a hang fails."""
    kwargs = {"accelerator": "cpu", "default_root_dir": tmp_path, **kwargs}
    refused = [name for name, value in kwargs.items() if must_refuse(name, value)]
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, 60)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # a relative default_root_dir stays inside the test's folder
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            accelkit.Trainer(**kwargs)
    except ConfigurationError as exc:
        message = str(exc)
        assert any(f"{name}" in message for name in kwargs), f"{kwargs!r}: names no argument: {message}"
        for name in refused:  # wrong types are all reported at once, before any value is checked
            assert f"{name}=" in message or not set(refused) <= set(BOOL_ONLY + BOOL_OR_NONE), (kwargs, message)
    else:
        assert not refused, f"{kwargs!r}: {refused} should have been refused"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(cwd)
