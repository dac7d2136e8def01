"""Where ``DeviceStatsMonitor`` writes on the CPU: the CSV logger's columns it fills and the steps of the rows it
fills them in, recorded the same way on accelkit's Trainer and on Lightning's (``tests/test_callbacks_builtin.py``
compares them). The figures' values (the host's CPU and memory use) differ from run to run and are not compared.

A scenario is a dict of Trainer options plus ``stop_at`` (the Module asks to stop after that training batch) and
``test`` (``trainer.test`` after the fit, same logger). Each fit is 2 epochs of 5 training batches and 2
validation batches (a sanity check of 2), ``log_every_n_steps=2`` unless given.
"""

from __future__ import annotations

import csv
import glob
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.frameworks import pick

#: the scenarios the tests compare, by name
SCENARIOS: dict[str, dict[str, Any]] = {
    "every_2": {"test": True},
    "every_1": {"log_every_n_steps": 1},
    "accumulate_2": {"accumulate_grad_batches": 2, "log_every_n_steps": 1},
    "val_mid_epoch_every_3": {"val_check_interval": 2, "log_every_n_steps": 3},
    "stop_requested": {"stop_at": 2, "log_every_n_steps": 4},
    "no_cpu_stats": {"cpu_stats": False},
}


def record(framework: str, root: str, scenario: str) -> dict[str, list[int]]:
    """Fit (and test) with ``framework`` (``"accelkit"`` or ``"lightning"``) under ``scenario``; returns, per CSV
    column the monitor filled, the steps of the rows that hold a value in it, in the file's order."""
    options = dict(SCENARIOS[scenario])
    stop_at, test, cpu_stats = options.pop("stop_at", None), options.pop("test", False), options.pop("cpu_stats", None)
    chosen = pick(framework)

    class Tiny(chosen.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if stop_at is not None and self.global_step >= stop_at:
                self.trainer.should_stop = True
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.layer(batch[0])

        test_step = validation_step

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def loader(n: int) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(n, 2)), batch_size=1)

    options.setdefault("log_every_n_steps", 2)
    trainer = chosen.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=chosen.loggers.CSVLogger(root),
                             callbacks=[chosen.callbacks.DeviceStatsMonitor(cpu_stats=cpu_stats)],
                             enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                             num_sanity_val_steps=2, **options)
    module = Tiny()
    trainer.fit(module, loader(5), loader(2))
    if test:
        trainer.test(module, loader(3))
    columns: dict[str, list[int]] = {}
    for path in sorted(glob.glob(f"{root}/**/metrics.csv", recursive=True)):
        with open(path, newline="") as file:
            for row in csv.DictReader(file):
                for name, value in row.items():
                    if name.startswith("DeviceStatsMonitor.") and value != "":
                        columns.setdefault(name, []).append(int(row["step"]))
    return columns
