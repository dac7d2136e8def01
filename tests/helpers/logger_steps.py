"""The steps (and epochs) at which the CSV and TensorBoard loggers get each logged name, recorded the same way on
accelkit's Trainer and on Lightning's (``tests/test_logging_api.py`` compares them).

A scenario is a dict of Trainer options (``log_every_n_steps``, ``accumulate_grad_batches``,
``val_check_interval``) plus ``resume``: fit one epoch with a ``ModelCheckpoint`` (``save_last``), then a second
Trainer with fresh loggers fits on to two epochs from ``last.ckpt``, and its loggers' steps are recorded
(``"mid_epoch"``: the first fit stops at ``max_steps=3``, inside the epoch, where the checkpoint is written in
``on_train_batch_end``, ``every_n_train_steps=3``); ``test``:
``trainer.test`` after the fit (same loggers); ``manual``: manual optimization stepping two optimizers per batch
(two optimizer steps, one batch that stepped), with a ``LearningRateMonitor``; ``own_step``: the Module logs a value
named ``step`` (ten times the batch index), which Lightning takes as the row's step. The Module logs a per-step and
per-epoch training value, an epoch validation value and a per-step validation value (and the same in ``test_step``),
and saves its hyper-parameters; the record has the CSV folder's files too (:func:`csv_files`).
"""

from __future__ import annotations

import csv
import os
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers.frameworks import pick

#: the scenarios the tests compare, by name
SCENARIOS: dict[str, dict[str, Any]] = {
    "every_step": {"log_every_n_steps": 1, "test": True},
    "every_2": {"log_every_n_steps": 2},
    "accumulate_2": {"log_every_n_steps": 1, "accumulate_grad_batches": 2},
    "val_mid_epoch": {"log_every_n_steps": 1, "val_check_interval": 2},
    "resume": {"log_every_n_steps": 1, "resume": True},
    "resume_mid_epoch": {"log_every_n_steps": 1, "resume": "mid_epoch"},
    "manual_two_optimizers": {"log_every_n_steps": 1, "manual": True},
    "own_step": {"log_every_n_steps": 1, "own_step": True},
}


def record(framework: str, root: str, scenario: str) -> dict[str, Any]:
    """Fit 2 epochs of 5 training and 2 validation batches with ``framework`` (``"accelkit"`` or ``"lightning"``)
    in scenario ``scenario`` (:data:`SCENARIOS`), with a CSV and a TensorBoard logger; returns
    ``{"csv": {name: [[step, epoch], ...]}, "tensorboard": {tag: [step, ...]}}`` (epoch ``None`` where the row has
    none)."""
    options = dict(SCENARIOS[scenario])
    resume, manual, own_step, test = (options.pop(key, False) for key in ("resume", "manual", "own_step", "test"))
    chosen = pick(framework)

    class Steps(chosen.Module):  # type: ignore[misc, name-defined]
        def __init__(self, lr: float = 0.05) -> None:
            super().__init__()
            self.save_hyperparameters()
            torch.manual_seed(0)
            self.layer = nn.Linear(4, 1)
            self.automatic_optimization = not manual

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = F.mse_loss(self.layer(batch[0]), batch[1])
            self.log("loss", loss, on_step=True, on_epoch=True)
            if own_step:
                self.log("step", float(batch_idx * 10))
            if manual:
                self.manual_backward(loss)
                for optimizer in self.optimizers():
                    optimizer.step()
                    optimizer.zero_grad()
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            loss = F.mse_loss(self.layer(batch[0]), batch[1])
            self.log("val_loss", loss)
            self.log("val_each", loss * 2, on_step=True, on_epoch=False)

        def test_step(self, batch: Any, batch_idx: int) -> None:
            loss = F.mse_loss(self.layer(batch[0]), batch[1])
            self.log("test_loss", loss)
            self.log("test_each", loss * 2, on_step=True, on_epoch=False)

        def configure_optimizers(self) -> Any:
            if manual:
                return [torch.optim.SGD(self.parameters(), lr=0.05), torch.optim.SGD(self.parameters(), lr=0.01)]
            return torch.optim.SGD(self.parameters(), lr=0.05)

    generator = torch.Generator().manual_seed(0)
    train = TensorDataset(torch.randn(20, 4, generator=generator), torch.randn(20, 1, generator=generator))
    val = TensorDataset(torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator))

    def fit(max_epochs: int, ckpt_path: str | None, run: str, max_steps: int = -1) -> tuple[Any, Any]:
        folder = os.path.join(root, run)
        loggers = chosen.loggers.CSVLogger(folder), chosen.loggers.TensorBoardLogger(folder)
        every = {"every_n_train_steps": 3} if resume == "mid_epoch" else {}
        saving = chosen.callbacks.ModelCheckpoint(dirpath=os.path.join(root, "checkpoints"), save_last=True, **every)
        callbacks = [saving]
        callbacks += [chosen.callbacks.LearningRateMonitor()] if manual else []
        trainer = chosen.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs, logger=list(loggers),
                                 callbacks=callbacks, num_sanity_val_steps=0, enable_model_summary=False,
                                 enable_progress_bar=False, default_root_dir=root, max_steps=max_steps, **options)
        trainer.fit(Steps(), DataLoader(train, batch_size=4), DataLoader(val, batch_size=4), ckpt_path=ckpt_path)
        if test:  # after the fit: the test's epoch row at the count of all batches, its step rows from 0
            trainer.test(ckpt_path=None, dataloaders=DataLoader(val, batch_size=4), verbose=False)
        return loggers

    if resume:
        fit(1, None, "first", max_steps=3 if resume == "mid_epoch" else -1)
        csv_logger, tb_logger = fit(2, os.path.join(root, "checkpoints", "last.ckpt"), "resumed")
    else:
        csv_logger, tb_logger = fit(2, None, "run")
    return {"csv": csv_steps(csv_logger.log_dir), "tensorboard": tensorboard_steps(tb_logger.log_dir),
            "csv_files": csv_files(csv_logger.log_dir)}


def csv_steps(log_dir: str) -> dict[str, list[list[Any]]]:
    """``{name: [[step, epoch], ...]}`` of what a CSV logger wrote to ``metrics.csv`` in ``log_dir``, in the order
    written (epoch ``None`` in a row without one)."""
    with open(os.path.join(log_dir, "metrics.csv")) as handle:
        rows = list(csv.DictReader(handle))
    steps: dict[str, list[list[Any]]] = {}
    for row in rows:
        epoch = int(float(row["epoch"])) if row.get("epoch") else None
        for name, value in row.items():
            if name not in ("step", "epoch") and value != "":
                steps.setdefault(name, []).append([int(float(row["step"])), epoch])
    return steps


def csv_files(log_dir: str) -> dict[str, str]:
    """What a Lightning user's analysis script reads of a CSV logger's folder besides the steps: the files there
    (TensorBoard's event files aside), ``metrics.csv``'s header and ``hparams.yaml``'s text."""
    names = sorted(name for name in os.listdir(log_dir) if not name.startswith("events.out.tfevents"))
    with open(os.path.join(log_dir, "metrics.csv")) as handle:
        found = {"files": " ".join(names), "metrics.csv header": handle.readline().strip()}
    if "hparams.yaml" in names:
        with open(os.path.join(log_dir, "hparams.yaml")) as handle:
            found["hparams.yaml"] = handle.read()
    return found


def tensorboard_steps(log_dir: str) -> dict[str, list[int]]:
    """``{tag: [step, ...]}`` of the scalars in the TensorBoard event files of ``log_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(log_dir)
    accumulator.Reload()
    return {tag: [event.step for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}
