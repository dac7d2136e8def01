"""What a fit runs, and when, under Trainer options that decide the schedule (validation intervals, limits,
accumulation, step and epoch limits, sanity checks, loader reloads, schedulers, checkpoint cadence, early
stopping), recorded the same way on accelkit's Trainer and on Lightning's (``tests/test_schedules.py`` compares
them).

A scenario is a dict of Trainer options plus optional ``"scheduler"`` (``"step_2"``: a StepLR stepped every 2
optimizer steps; ``"plateau"``: ReduceLROnPlateau on ``val_loss``, every epoch), ``"checkpoint"`` (keyword
arguments of a ModelCheckpoint), ``"early_stopping"`` (of an EarlyStopping on ``val_loss``), ``"batch_start_stop"``
(``on_train_batch_start`` returns -1 at that batch of epoch 1) and ``"train_batches"``/``"val_batches"`` (the
loaders' lengths, default 6 and 2). The recorded events: ``["train", epoch, batch_idx, global_step, lr]``,
``["val", epoch, batch_idx, global_step, sanity]``, ``["train_dl", epoch]`` and ``["val_dl", epoch]`` (a loader
built), ``["epoch_end", epoch, global_step]``, ``["train_start"]``, ``["train_end", ...]`` and ``["fit_end", ...]``;
then the checkpoint files' names and the fit's end state.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.frameworks import pick

#: the scenarios the tests compare, by name
SCENARIOS: dict[str, dict[str, Any]] = {
    "val_half_epoch": {"val_check_interval": 0.5, "max_epochs": 2},
    "val_every_4_batches_across_epochs": {"val_check_interval": 4, "check_val_every_n_epoch": None, "max_epochs": 2,
                                          "train_batches": 5},
    "val_every_2nd_epoch": {"check_val_every_n_epoch": 2, "max_epochs": 3},
    "limits_fraction": {"limit_train_batches": 0.5, "limit_val_batches": 0.5, "max_epochs": 2, "val_batches": 4},
    "limits_int": {"limit_train_batches": 2, "limit_val_batches": 1, "max_epochs": 2},
    "accumulate_4_partial_window": {"accumulate_grad_batches": 4, "max_epochs": 2},
    "max_steps_mid_epoch": {"max_steps": 8, "max_epochs": -1},
    "max_steps_and_val_interval": {"max_steps": 5, "val_check_interval": 2},
    "sanity_all": {"num_sanity_val_steps": -1, "max_epochs": 1, "val_batches": 3},
    "sanity_one": {"num_sanity_val_steps": 1, "max_epochs": 1},
    "reload_every_epoch": {"reload_dataloaders_every_n_epochs": 1, "max_epochs": 3},
    "reload_every_2_epochs": {"reload_dataloaders_every_n_epochs": 2, "max_epochs": 3},
    "step_scheduler": {"scheduler": "step_2", "max_epochs": 2},
    "plateau_scheduler": {"scheduler": "plateau", "max_epochs": 4},
    "checkpoint_every_3_steps": {"checkpoint": {"every_n_train_steps": 3, "save_top_k": -1}, "max_epochs": 2},
    "checkpoint_top2_last": {"checkpoint": {"monitor": "val_loss", "save_top_k": 2, "save_last": True},
                             "max_epochs": 3},
    "checkpoint_every_2_epochs": {"checkpoint": {"every_n_epochs": 2, "save_top_k": -1}, "max_epochs": 3},
    "early_stopping_min_epochs": {"early_stopping": {"patience": 0}, "min_epochs": 3, "max_epochs": 6},
    "batch_start_stop": {"batch_start_stop": 2, "max_epochs": 3},
    "fast_dev_run_2": {"fast_dev_run": 2},
    "reload_every_epoch_val_every_3": {"reload_dataloaders_every_n_epochs": 1, "check_val_every_n_epoch": 3,
                                       "max_epochs": 4},
    "no_validation": {"limit_val_batches": 0, "max_epochs": 2, "checkpoint": {"save_top_k": -1}},
    "overfit_2": {"overfit_batches": 2, "max_epochs": 2},
    "val_quarter_epoch": {"val_check_interval": 0.25, "max_epochs": 1},
    "epoch_scheduler_every_2": {"scheduler": "epoch_2", "max_epochs": 5},
    "plateau_every_step_on_train_loss": {"scheduler": "plateau_step", "max_epochs": 1},
    "early_stopping_train_epoch_end": {"early_stopping": {"patience": 0, "monitor": "train_epoch_loss",
                                                          "check_on_train_epoch_end": True}, "max_epochs": 6},
    "checkpoint_steps_and_val_mid_epoch_last": {"checkpoint": {"every_n_train_steps": 2, "save_top_k": -1,
                                                               "save_last": True}, "val_check_interval": 3,
                                                "max_epochs": 2},
    "checkpoint_monitor_val_every_2nd_epoch": {"checkpoint": {"monitor": "val_loss", "save_top_k": 1},
                                               "check_val_every_n_epoch": 2, "max_epochs": 4},
    "max_epochs_zero": {"max_epochs": 0},
    "max_steps_zero": {"max_steps": 0, "num_sanity_val_steps": 2},
    "limit_train_zero": {"limit_train_batches": 0, "max_epochs": 2},
    "min_epochs_over_max_steps": {"min_epochs": 3, "max_steps": 4, "max_epochs": 5},
    "limit_train_float_with_val_fraction": {"limit_train_batches": 0.5, "val_check_interval": 0.5, "max_epochs": 2},
}


def record(framework: str, root: str, scenario: str) -> dict[str, Any]:
    """Fit under ``scenario`` with ``framework`` (``"accelkit"`` or ``"lightning"``); see the module's text."""
    options = dict(SCENARIOS[scenario])
    extras = {key: options.pop(key, None) for key in ("scheduler", "checkpoint", "early_stopping",
                                                      "batch_start_stop", "train_batches", "val_batches")}
    chosen = pick(framework)
    events: list[list[Any]] = []
    train_batches, val_batches = extras["train_batches"] or 6, extras["val_batches"] or 2
    val_losses = [0.5, 0.4, 0.45, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4]  # improves twice, then worsens

    class Scheduled(chosen.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(2, 1)
            self.validations = 0

        def train_dataloader(self) -> DataLoader:
            events.append(["train_dl", self.trainer.current_epoch])
            return DataLoader(TensorDataset(torch.randn(train_batches, 2)), batch_size=1)

        def val_dataloader(self) -> DataLoader:
            events.append(["val_dl", self.trainer.current_epoch])
            return DataLoader(TensorDataset(torch.randn(val_batches, 2)), batch_size=1)

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
            if extras["batch_start_stop"] is not None and self.current_epoch == 1 and \
                    batch_idx == extras["batch_start_stop"]:
                return -1
            return None

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            lr = self.trainer.optimizers[0].param_groups[0]["lr"]
            events.append(["train", self.current_epoch, batch_idx, self.global_step, round(lr, 6)])
            self.log("train_loss", float(batch_idx % 3))  # falls, rises: a plateau scheduler on it reduces
            self.log("train_epoch_loss", [0.5, 0.4, 0.6, 0.7, 0.8, 0.9][min(self.current_epoch, 5)], on_step=False,
                     on_epoch=True)
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            events.append(["val", self.current_epoch, batch_idx, self.global_step, self.trainer.sanity_checking])

        def on_validation_epoch_end(self) -> None:
            if not self.trainer.sanity_checking:
                self.validations += 1
            self.log("val_loss", val_losses[min(self.validations, len(val_losses) - 1)])

        def on_train_epoch_end(self) -> None:
            events.append(["epoch_end", self.current_epoch, self.global_step])

        def on_train_start(self) -> None:
            events.append(["train_start"])

        def on_train_end(self) -> None:
            events.append(["train_end", self.current_epoch, self.global_step])

        def on_fit_end(self) -> None:
            events.append(["fit_end", self.current_epoch, self.global_step])

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            if extras["scheduler"] == "step_2":
                scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
                return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step",
                                                                 "frequency": 2}}
            if extras["scheduler"] == "epoch_2":
                scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
                return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "frequency": 2}}
            if extras["scheduler"] == "plateau_step":
                scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
                return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "train_loss",
                                                                 "interval": "step"}}
            if extras["scheduler"] == "plateau":
                scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
                return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}
            return optimizer

    callbacks: list[Any] = []
    checkpoint_dir = os.path.join(root, "checkpoints")
    if extras["checkpoint"] is not None:
        callbacks.append(chosen.callbacks.ModelCheckpoint(dirpath=checkpoint_dir, **extras["checkpoint"]))
    if extras["early_stopping"] is not None:
        callbacks.append(chosen.callbacks.EarlyStopping(**{"monitor": "val_loss", **extras["early_stopping"]}))
    options.setdefault("num_sanity_val_steps", 0)
    trainer = chosen.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=callbacks,
                             enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=extras["checkpoint"] is not None, default_root_dir=root, **options)
    trainer.fit(Scheduled())
    files = sorted(os.listdir(checkpoint_dir)) if os.path.isdir(checkpoint_dir) else []
    return {"events": events, "checkpoints": files,
            "end": [trainer.current_epoch, trainer.global_step, trainer.should_stop]}
