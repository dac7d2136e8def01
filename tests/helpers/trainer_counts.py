"""The Trainer's counters and batch counts read from each hook, and its metric dicts after ``validate``/``test``
following a fit, recorded the same way on accelkit's Trainer and on Lightning's (``tests/test_trainer.py`` compares
them).

A scenario is a dict of Trainer options plus ``"train_batches"``/``"val_batches"`` (the loaders' lengths, default 6
and 4), ``"val_loaders"`` (default 1), ``"timer"`` (a ``Timer`` callback of that duration) and
``"stop_after_epochs"`` (a callback sets ``should_stop`` at the end of that epoch) and ``"no_length"`` (every loader
over an ``IterableDataset``, without a length). The Module logs ``train_loss`` per
step and per epoch and ``val_loss`` per epoch; after the fit, ``trainer.validate``, ``trainer.test`` and
``trainer.predict`` run with the same Trainer. Each read (from every hook, once the Trainer is made and after each
call) is ``[hook, current_epoch, global_step, num_training_batches, num_val_batches, num_sanity_val_batches and
estimated_stepping_batches (in fit), max_steps, max_epochs, limit_train/val/test/predict_batches, min_epochs,
min_steps, num_sanity_val_steps]``; after ``validate`` and ``test`` the three metric dicts' names and values too.
Lightning's loops keep a fit's batch counts after it (``num_training_batches`` is ``inf`` before the first fit's
training loader is loaded; ``num_val_batches`` in ``test``/``predict`` is the fit's), and so does accelkit.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, IterableDataset

from helpers.frameworks import linear_module, pick, random_pairs, reading_callback

SCENARIOS: dict[str, dict[str, Any]] = {
    "plain": {"max_epochs": 2},
    "limits_int": {"max_epochs": 2, "limit_train_batches": 4, "limit_val_batches": 2},
    "limits_fraction": {"max_epochs": 2, "limit_train_batches": 0.5, "limit_val_batches": 0.25},
    "accumulate_3": {"max_epochs": 2, "accumulate_grad_batches": 3, "train_batches": 7},
    "accumulate_and_limit": {"max_epochs": 3, "accumulate_grad_batches": 2, "limit_train_batches": 5},
    "max_steps": {"max_steps": 5, "max_epochs": -1},
    "max_steps_accumulate": {"max_steps": 4, "accumulate_grad_batches": 2, "max_epochs": -1},
    "val_interval_two_loaders": {"max_epochs": 1, "val_check_interval": 3, "val_loaders": 2,
                                 "num_sanity_val_steps": 1},
    "sanity_all": {"max_epochs": 1, "num_sanity_val_steps": -1, "limit_val_batches": 3},
    "no_validation": {"max_epochs": 1, "limit_val_batches": 0},
    "fast_dev_run_2": {"fast_dev_run": 2},
    "max_steps_without_epochs": {"max_steps": 5},
    "min_steps": {"min_steps": 3, "max_epochs": 2},
    "min_epochs": {"min_epochs": 2, "max_epochs": 3},
    # no max_epochs: 1000 unless a Timer callback or max_time bounds the fit (-1); a callback stops after 2 epochs
    "no_epoch_limit": {"stop_after_epochs": 2},
    "timer_without_max_epochs": {"timer": "00:01:00:00", "stop_after_epochs": 2},
    "max_time_without_max_epochs": {"max_time": "00:01:00:00", "stop_after_epochs": 2},
    # loaders without a length (an IterableDataset): their counts read inf; with int limits, the limits
    "no_length": {"max_epochs": 2, "no_length": True, "num_sanity_val_steps": -1},
    "no_length_limits": {"max_epochs": 1, "no_length": True, "limit_train_batches": 3, "limit_val_batches": 2,
                         "num_sanity_val_steps": 1},
}

HOOKS = ("on_fit_start", "on_sanity_check_start", "on_train_start", "on_train_epoch_start", "on_train_batch_start",
         "on_train_batch_end", "on_validation_start", "on_validation_batch_end", "on_validation_end",
         "on_train_epoch_end", "on_train_end", "on_fit_end", "on_test_start", "on_test_end")


def plain(value: Any) -> Any:
    """A count as JSON (``inf`` as a string, a list of counts as a list)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return value


def record(framework: str, root: str, scenario: str) -> list[Any]:
    """Run ``scenario`` with ``framework`` (``"accelkit"`` or ``"lightning"``); returns the reads."""
    options = dict(SCENARIOS[scenario])
    train_batches, val_batches = options.pop("train_batches", 6), options.pop("val_batches", 4)
    val_loaders = options.pop("val_loaders", 1)
    timer, stop_after = options.pop("timer", None), options.pop("stop_after_epochs", None)
    no_length = options.pop("no_length", False)
    chosen = pick(framework)
    seen: list[Any] = []

    class Net(linear_module(chosen.Module, lr=0.05)):  # type: ignore[misc]
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = F.mse_loss(self.layer(batch[0]), batch[1])
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
            return loss

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("val_loss", F.mse_loss(self.layer(batch[0]), batch[1]), prog_bar=True)

        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.log("test_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

        def predict_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch[0])

    def counts(trainer: Any, hook: str) -> list[Any]:
        fitting = trainer.state.fn == "fit"
        stepping = plain(trainer.estimated_stepping_batches) if fitting else None
        return [hook, trainer.current_epoch, trainer.global_step, plain(trainer.num_training_batches),
                plain(trainer.num_val_batches),
                plain(trainer.num_sanity_val_batches) if fitting else None, stepping, trainer.max_steps,
                trainer.max_epochs, trainer.limit_train_batches, trainer.limit_val_batches,
                trainer.limit_test_batches, trainer.limit_predict_batches, trainer.min_epochs, trainer.min_steps,
                plain(trainer.num_sanity_val_steps)]

    Reader = reading_callback(chosen.Callback, HOOKS, lambda hook, trainer, *args: seen.append(counts(trainer, hook)))

    class Stopper(chosen.Callback):  # type: ignore[misc, name-defined]
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch + 1 >= stop_after:
                trainer.should_stop = True

    timers = [chosen.callbacks.Timer(duration=timer)] if timer else []
    callbacks = [Reader()] + ([Stopper()] if stop_after else []) + timers
    generator = torch.Generator().manual_seed(0)

    def data(batches: int) -> DataLoader:
        pairs = random_pairs(2 * batches, generator)
        return DataLoader(Unsized(pairs) if no_length else pairs, batch_size=2)

    options.setdefault("num_sanity_val_steps", 0)
    trainer = chosen.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=callbacks,
                             enable_model_summary=False, enable_progress_bar=False, enable_checkpointing=False,
                             default_root_dir=root, **options)
    module = Net()
    seen.append(counts(trainer, "made"))
    vals = [data(val_batches) for _ in range(val_loaders)]
    trainer.fit(module, data(train_batches), vals if val_loaders > 1 else vals[0])
    seen.append(counts(trainer, "after fit") + [metrics(trainer)])
    trainer.validate(module, data(val_batches), verbose=False)
    seen.append(counts(trainer, "after validate") + [metrics(trainer)])
    trainer.test(module, data(val_batches), verbose=False)
    seen.append(counts(trainer, "after test") + [metrics(trainer)])
    trainer.predict(module, data(val_batches))
    seen.append(counts(trainer, "after predict"))
    return seen


class Unsized(IterableDataset):
    """A dataset's samples in order, without a ``__len__``: its loader's batch count is unknown."""

    def __init__(self, samples: Any) -> None:
        self.samples = samples

    def __iter__(self) -> Any:
        return (self.samples[i] for i in range(len(self.samples)))


def metrics(trainer: Any) -> dict[str, Any]:
    """The three metric dicts, their values rounded."""
    return {kind: {name: round(float(value), 5) for name, value in sorted(getattr(trainer, kind).items())}
            for kind in ("callback_metrics", "logged_metrics", "progress_bar_metrics")}
