"""Small, deterministic Modules and Callbacks used by the Trainer, DDP and checkpoint tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit


def regression_data(n: int = 32, features: int = 4, seed: int = 0) -> TensorDataset:
    """A fixed linear-regression data set: ``y = x @ w + 0.1 * noise`` (the same on every process)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    w = torch.arange(1.0, features + 1.0).unsqueeze(1)
    y = x @ w + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class PredictsInputs:
    """A Module mix-in whose ``predict_step`` runs the forward on a batch's inputs (the first item of an
    ``(input, target)`` batch, or a bare tensor): the default ``predict_step`` passes the whole batch, as Lightning's,
    so a module predicting from its training data says so, as a Lightning module must."""

    def predict_step(self, batch: Any, batch_idx: int = 0, dataloader_idx: int = 0) -> Any:
        return self(batch[0] if isinstance(batch, (list, tuple)) else batch)  # type: ignore[operator]


class RegressionModule(PredictsInputs, accelkit.Module):
    """A linear layer trained with plain SGD (no momentum) on a mean-squared-error loss.

    With SGD and a mean loss, one step over a global batch equals a DDP step over its shards, and two
    accumulated half batches equal one full batch: the tests compare weights across those layouts.

    :param lr: learning rate.
    :param batch_size: batch size of the default training loader (``shuffle=False``).
    :param n: number of samples.
    :param seed: seed of the initial weights.
    """

    def __init__(self, lr: float = 0.05, batch_size: int = 8, n: int = 32, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.layer = nn.Linear(4, 1)
        self.lr, self.batch_size, self.n = lr, batch_size, n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        # Rank-dependent values: with sync_dist the epoch value is reduced over ranks, without it stays local.
        rank = float(self.global_rank)
        self.log("rank_mean", rank, on_step=False, on_epoch=True, sync_dist=True)
        self.log("rank_max", rank, on_step=False, on_epoch=True, sync_dist=True, reduce_fx="max")
        self.log("rank_local", rank, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y), sync_dist=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y), sync_dist=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(self.n), batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(16, seed=1), batch_size=8)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(16, seed=2), batch_size=8)


class WeightDump(accelkit.Callback):
    """At teardown, every rank writes ``rank<global_rank>.pt`` into ``folder``: its weights, pid, step count."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = str(folder)

    def teardown(self, trainer: Any, module: Any, stage: str) -> None:
        state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
        payload = {"state_dict": state, "pid": os.getpid(), "global_step": trainer.global_step,
                   "world_size": trainer.world_size, "rank": trainer.global_rank,
                   "threads": torch.get_num_threads()}
        torch.save(payload, Path(self.folder) / f"rank{trainer.global_rank}.pt")


class FailingModule(RegressionModule):
    """Each rank records its pid in ``folder``; rank ``fail_rank`` raises at training batch ``fail_at``."""

    def __init__(self, folder: str | os.PathLike, fail_rank: int = 1, fail_at: int = 1) -> None:
        super().__init__()
        self.folder, self.fail_rank, self.fail_at = str(folder), fail_rank, fail_at

    def on_fit_start(self) -> None:
        (Path(self.folder) / f"pid{self.global_rank}").write_text(str(os.getpid()))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_rank == self.fail_rank and batch_idx == self.fail_at:
            raise ValueError(f"deliberate failure on rank {self.global_rank} at batch {batch_idx}")
        return super().training_step(batch, batch_idx)


class TiedModule(accelkit.Module):
    """An encoder/decoder pair whose decoder shares the encoder's weight (``decoder.weight is encoder.weight``).

    :param break_tie: the ``on_post_move_to_device`` hook replaces the decoder's weight with a copy, which
        breaks the tie (the Trainer must warn about the changed parameter count).
    """

    def __init__(self, break_tie: bool = False) -> None:
        super().__init__()
        self.encoder = nn.Linear(4, 4, bias=False)
        self.decoder = nn.Linear(4, 4, bias=False)
        self.decoder.weight = self.encoder.weight
        self.break_tie = break_tie
        self.events: list[str] = []

    def on_post_move_to_device(self) -> None:
        self.events.append(f"post_move:{self.encoder.weight.device.type}:{self.encoder.weight.dtype}")
        if self.break_tie:
            self.decoder.weight = nn.Parameter(self.encoder.weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self(x), y[:, :1].expand(-1, 4))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(8), batch_size=4)


class Opaque:
    """An arbitrary Python object: ``torch.load(weights_only=True)`` must refuse to unpickle it."""

    def __init__(self, note: str = "opaque") -> None:
        self.note = note

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.note == self.note


class ExplodingPickle:
    """Pickling this raises, after whatever was written before it: a write that fails halfway."""

    def __reduce__(self) -> Any:
        raise RuntimeError("pickling refused halfway through the checkpoint")


class SlowPickle:
    """Pickling this prints ``WRITING`` and then blocks, so a test can kill the writer mid-write."""

    def __reduce__(self) -> Any:
        import sys
        import time

        print("WRITING", flush=True)
        sys.stdout.flush()
        time.sleep(120)
        return (str, ("never",))


def quiet_trainer(tmp_path: Any, **kwargs: Any) -> accelkit.Trainer:
    """A quiet one-process CPU Trainer writing under ``tmp_path`` (no logger, bar or checkpoints unless asked)."""
    options = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, default_root_dir=tmp_path)
    options.update(kwargs)
    return accelkit.Trainer(**options)
