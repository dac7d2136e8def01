"""A fit whose every training sample is accounted for, for the tests of resuming on changed data
(``tests/test_exact_resume.py``): :class:`IndexNet` trains on :class:`Indexed` samples and appends
``epoch rank index...`` lines to a log file, one per batch, from every process (spawned workers included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import accelkit


class Indexed(Dataset):
    """``size`` samples; sample ``i`` holds its own index (and a small input derived from it)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([float(index), index / self.size])


class IndexNet(accelkit.Module):
    """A linear model on :class:`Indexed` data (shuffled), logging the indices of every batch it trains on."""

    def __init__(self, log: str, size: int = 32, batch_size: int = 4) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.log, self.size, self.batch_size = log, size, batch_size

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        indices = " ".join(str(int(i)) for i in batch[:, 0])
        with open(self.log, "a") as handle:
            handle.write(f"{self.trainer.current_epoch} {self.trainer.global_rank} {indices}\n")
        return self.layer(batch[:, 1:]).pow(2).mean()

    def train_dataloader(self) -> Any:
        return DataLoader(Indexed(self.size), batch_size=self.batch_size, shuffle=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StopAfter(accelkit.Callback):
    """Raises after optimizer step ``step`` (a crash; the checkpoint of that step is written first)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("stopped here")


def trained(log: str | Path) -> dict[int, list[int]]:
    """The indices trained on per epoch (every process's, in the order they were logged)."""
    found: dict[int, list[int]] = {}
    for line in Path(log).read_text().splitlines():
        epoch, _, *indices = (int(word) for word in line.split())
        found.setdefault(epoch, []).extend(indices)
    return found
