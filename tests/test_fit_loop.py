"""The fit loop's epoch: a fit with nothing around the step trains, counts, logs, validates, stops and checkpoints
exactly as the same fit with a batch callback that does nothing: each scenario runs both and compares weights,
counters, metrics, logged rows and the checkpoint written at the end."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch

import accelkit
from helpers.compare import assert_same_weights
from helpers.models import RegressionModule, quiet_trainer


class BatchEndNoOp(accelkit.Callback):
    """Overrides ``on_train_batch_end`` and does nothing: a fit with it must end as the same fit without it."""

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        pass


class StopsAtBatch(RegressionModule):
    """Sets ``trainer.should_stop`` in ``training_step`` at global step ``stop_at``."""

    def __init__(self, stop_at: int) -> None:
        super().__init__()
        self.stop_at = stop_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == self.stop_at:
            self.trainer.should_stop = True
        return super().training_step(batch, batch_idx)


class SetsMaxSteps(RegressionModule):
    """Sets ``trainer.max_steps`` to ``max_steps`` in ``training_step`` at global step ``at`` (a limit changed
    mid-run: the loops read it after every batch)."""

    def __init__(self, at: int, max_steps: int) -> None:
        super().__init__()
        self.at, self.max_steps = at, max_steps

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == self.at:
            self.trainer.max_steps = self.max_steps
        return super().training_step(batch, batch_idx)


class StopsAtEpochStart(accelkit.Callback):
    """Requests a stop when epoch ``epoch`` starts (an epoch-level callback, no batch hook)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.should_stop = True


class SavesMidEpoch(accelkit.Callback):
    """Writes ``path`` after global step ``step`` (a checkpoint inside an epoch, to resume from)."""

    def __init__(self, path: Path, step: int) -> None:
        self.path, self.step = path, step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def fit(folder: Path, general: bool, module: accelkit.Module | None = None, callbacks: tuple = (),
        ckpt_path: Path | None = None, **options: Any) -> dict[str, Any]:
    """One fit (``general``: with :class:`BatchEndNoOp`), and what it left: weights, counters, metrics, the
    CSV logger's rows and the checkpoint written after it."""
    torch.manual_seed(0)
    module = module if module is not None else RegressionModule()
    logger = accelkit.loggers.CSVLogger(folder, name="", version=0)
    trainer = quiet_trainer(folder, logger=logger, max_epochs=options.pop("max_epochs", 3),
                            callbacks=[*callbacks, *([BatchEndNoOp()] if general else [])], **options)
    trainer.fit(module, ckpt_path=ckpt_path)
    trainer.save_checkpoint(folder / "end.ckpt")
    checkpoint = torch.load(folder / "end.ckpt", weights_only=False)
    checkpoint["callbacks"] = {k: v for k, v in checkpoint.get("callbacks", {}).items() if "BatchEndNoOp" not in k}
    with open(folder / "version_0" / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    return {"weights": {k: v.clone() for k, v in module.state_dict().items()},
            "counters": (trainer.global_step, trainer.current_epoch, trainer.should_stop),
            "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
            "logged_metrics": {k: float(v) for k, v in trainer.logged_metrics.items()},
            "rows": rows, "checkpoint": checkpoint}


def assert_same_checkpoint(a: Any, b: Any, where: str = "checkpoint") -> None:
    """Two checkpoints hold the same keys and values (tensors compared exactly)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, sorted(a), sorted(b))
        for key in a:
            assert_same_checkpoint(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_checkpoint(x, y, f"{where}[{index}]")
    else:
        assert a == b, (where, a, b)


def assert_same_fit(plain: dict[str, Any], general: dict[str, Any]) -> None:
    """The fit without a batch callback and the fit with one that does nothing ended alike."""
    assert_same_weights(plain["weights"], general["weights"])
    for key in ("counters", "callback_metrics", "logged_metrics", "rows"):
        assert plain[key] == general[key], key
    assert_same_checkpoint(plain["checkpoint"], general["checkpoint"])


SCENARIOS = {
    "max_steps_mid_epoch": dict(max_steps=6),  # 4 batches an epoch: the second epoch stops after its second
    "stop_from_training_step": dict(module=lambda: StopsAtBatch(stop_at=5)),
    "stop_from_epoch_callback": dict(callbacks=lambda: (StopsAtEpochStart(epoch=1),)),
    "validation_at_epoch_end": dict(limit_val_batches=2),
    "limit_train_batches": dict(limit_train_batches=3),
    "log_every_n_steps": dict(log_every_n_steps=3),
    "max_steps_set_mid_run": dict(module=lambda: SetsMaxSteps(at=3, max_steps=6)),
    "max_time_set": dict(max_time={"hours": 1}),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_an_epoch_without_batch_hooks_trains_logs_and_stops_as_one_with_them(tmp_path, scenario):
    """(a) max_steps reached mid-epoch, or set mid-run by the module, (b) a stop requested from training_step or from
    an epoch-level callback, validation at the epoch's end, (d) limit_train_batches, (e) log_every_n_steps, a time
    limit set (not reached): a fit without batch hooks and the same fit with a batch callback that does nothing give
    identical weights, counters, metrics, logged rows and checkpoints."""
    options = {k: (v() if callable(v) else v) for k, v in SCENARIOS[scenario].items()}
    plain = fit(tmp_path / "plain", general=False, **options)
    options = {k: (v() if callable(v) else v) for k, v in SCENARIOS[scenario].items()}
    general = fit(tmp_path / "general", general=True, **options)
    assert_same_fit(plain, general)


def test_validation_within_the_epoch_gives_the_same_results_with_or_without_batch_hooks(tmp_path):
    """(c) ``val_check_interval`` within the epoch (validation may be due after any batch): the same results with or
    without a batch callback that does nothing, and validation ran."""
    plain = fit(tmp_path / "plain", general=False, val_check_interval=2, limit_val_batches=1)
    general = fit(tmp_path / "general", general=True, val_check_interval=2, limit_val_batches=1)
    assert_same_fit(plain, general)
    assert any(row.get("val_loss") for row in plain["rows"])


def test_a_fit_resumed_mid_epoch_gives_the_same_results_with_or_without_batch_hooks(tmp_path):
    """(f) A fit resumed from a checkpoint written inside an epoch (random states put back once the loader started)
    ends as the same resumed fit with a batch callback that does nothing."""
    path = tmp_path / "mid.ckpt"
    fit(tmp_path / "first", general=True, callbacks=(SavesMidEpoch(path, step=6),), max_epochs=2)
    plain = fit(tmp_path / "plain", general=False, ckpt_path=path)
    general = fit(tmp_path / "general", general=True, ckpt_path=path)
    assert_same_fit(plain, general)
    assert plain["counters"][0] == 12


class RecordsLastBatch(RegressionModule):
    """Records ``trainer.is_last_batch`` as ``training_step`` and ``on_train_epoch_start`` see it."""

    def __init__(self) -> None:
        super().__init__()
        self.in_steps: list[bool] = []
        self.at_epoch_start: list[bool] = []

    def on_train_epoch_start(self) -> None:
        self.at_epoch_start.append(self.trainer.is_last_batch)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.in_steps.append(self.trainer.is_last_batch)
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("limit", [None, 1], ids=["four batches", "one batch"])
@pytest.mark.parametrize("general", [False, True], ids=["no batch hook", "a batch callback"])
def test_the_last_batch_flag_is_set_at_each_epochs_last_batch_and_put_down_at_the_next(tmp_path, general, limit):
    """The loops set ``trainer.is_last_batch`` only when it changes (the epoch's last batch, the next epoch's
    first): every batch still sees its own value, and the flag stays up from the last batch until the next
    epoch's first (its ``on_train_epoch_start`` included, as when it was written at every batch)."""
    module = RecordsLastBatch()
    options = {} if limit is None else {"limit_train_batches": limit}
    fit(tmp_path, general, module, max_epochs=3, **options)
    per_epoch = [True] if limit == 1 else [False, False, False, True]
    assert module.in_steps == per_epoch * 3
    assert module.at_epoch_start == [False, True, True]
