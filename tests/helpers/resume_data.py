"""A fit whose every training sample is accounted for, for the tests of resuming on changed data
(``tests/test_exact_resume.py``): :class:`IndexNet` trains on :class:`Indexed` samples and appends
``epoch rank index...`` lines to a log file, one per batch, from every process (spawned workers included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

import accelkit
from helpers.guards import standard_error_to


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

    def __init__(self, log: str, size: int = 32, batch_size: int = 4, replacement: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.log, self.size, self.batch_size, self.replacement = log, size, batch_size, replacement

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        indices = " ".join(str(int(i)) for i in batch[:, 0])
        with open(self.log, "a") as handle:
            handle.write(f"{self.trainer.current_epoch} {self.trainer.global_rank} {indices}\n")
        return self.layer(batch[:, 1:]).pow(2).mean()

    def train_dataloader(self) -> Any:
        if self.replacement:  # an epoch of ``size`` draws that repeats some samples and leaves others out
            sampler = WeightedRandomSampler(torch.ones(self.size), self.size, replacement=True)
            return DataLoader(Indexed(self.size), batch_size=self.batch_size, sampler=sampler)
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


def indexed_fit(root: Path, log: str, size: int = 32, batch_size: int = 4, stop: int | None = None,
                every: int = 6, ckpt_path: Any = None, devices: int = 1, epochs: int = 3,
                replacement: bool = False) -> Any:
    """:class:`IndexNet` for ``epochs`` epochs on ``devices`` processes (``ddp_fork`` for more than one); a checkpoint
    every ``every`` steps; crashes after step ``stop``; ``replacement``: a ``WeightedRandomSampler`` drawing with
    replacement instead of shuffling. Returns the trainer."""
    checkpoint = accelkit.callbacks.ModelCheckpoint(dirpath=root / "checkpoints", every_n_train_steps=every,
                                                    save_last=True, save_top_k=0)
    trainer = accelkit.Trainer(accelerator="cpu", devices=devices, strategy="ddp_fork" if devices > 1 else "auto",
                               max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                               default_root_dir=root, callbacks=[checkpoint] + ([StopAfter(stop)] if stop else []))
    accelkit.seed_everything(0)
    try:
        trainer.fit(IndexNet(str(root / log), size, batch_size, replacement), ckpt_path=ckpt_path)
    except RuntimeError as exc:
        assert stop is not None and "stopped here" in str(exc), exc
    return trainer


def resumed_on_other_processes(root: str, devices: int, then: int, every: int,
                               replacement: bool = False) -> dict[str, Any]:
    """A fit on ``devices`` processes with a checkpoint every ``every`` steps crashes after step ``every + 1``, and
    is resumed from its last checkpoint on ``then`` processes (logs ``a.log`` and ``b.log`` in ``root``;
    ``replacement`` as for :func:`indexed_fit`). Returns the resumed Trainer's epoch and step and what the resumed
    run's processes wrote to the standard error."""
    indexed_fit(Path(root), "a.log", devices=devices, every=every, stop=every + 1, replacement=replacement)
    with standard_error_to(Path(root, "stderr.txt")) as err:
        trainer = indexed_fit(Path(root), "b.log", devices=then, ckpt_path="last", every=100, replacement=replacement)
    return {"current_epoch": trainer.current_epoch, "global_step": trainer.global_step, "err": err.read_text()}
