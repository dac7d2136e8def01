"""Modules and callbacks of the fsdp tests (importable by name in spawned workers and torchrun scripts)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit


def _data(n: int = 64, seed: int = 1) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=generator)
    y = x[:, :1] * 0.5 - x[:, 1:2] + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class Block(nn.Module):
    """One residual MLP block: the auto-wrap unit of the tests."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


class MLP(accelkit.Module):
    """An MLP of ``depth`` blocks trained with Adam (or SGD) on a fixed regression set.

    The per-process batch is ``global_batch // world_size`` and the loader is not shuffled, so every step sees the
    same global batch at any world size (the distributed sampler deals sample ``i`` to rank ``i % world_size``).
    """

    def __init__(self, width: int = 64, depth: int = 3, global_batch: int = 16, lr: float = 0.01,
                 optimizer: str = "adam", seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(seed)
        self.inp = nn.Linear(16, width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, 1)
        self.forward_dtypes: set[str] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forward_dtypes.add(str(self.inp.weight.dtype))
        return self.head(self.blocks(torch.relu(self.inp(x))))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x).float(), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x).float(), y), sync_dist=True)

    def configure_optimizers(self) -> Any:
        if self.hparams.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    def _loader(self, dataset: TensorDataset) -> DataLoader:
        world = self.trainer.world_size if self._trainer is not None else 1
        return DataLoader(dataset, batch_size=self.hparams.global_batch // world, shuffle=False)

    def train_dataloader(self) -> DataLoader:
        return self._loader(_data())

    def val_dataloader(self) -> DataLoader:
        return self._loader(_data(32, seed=2))


def local_bytes(tensor: Any) -> int:
    """Bytes this process holds for ``tensor``: its local shard for a DTensor."""
    if tensor is None:
        return 0
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


class Probe(accelkit.Callback):
    """Writes, per rank, to ``FOLDER/<tag>-rank<r>.pt``: the peak bytes this process held for parameters,
    gradients and optimizer state (local shards), the gradients' presence after each backward, and the
    processes' ids and launcher."""

    def __init__(self, folder: str | os.PathLike, tag: str) -> None:
        self.folder, self.tag = str(folder), tag
        self.peak = {"params": 0, "grads": 0, "optimizer": 0}
        self.grads_after_backward: list[bool] = []

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self.grads_after_backward.append(any(p.grad is not None for p in pl_module.parameters()))

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._measure(pl_module, optimizer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._measure(pl_module, trainer.optimizers[0])

    def _measure(self, module: Any, optimizer: Any) -> None:
        sizes = {
            "params": sum(local_bytes(p) for p in module.parameters()),
            "grads": sum(local_bytes(p.grad) for p in module.parameters()),
            "optimizer": sum(local_bytes(t) for state in optimizer.state.values() for t in state.values()
                             if isinstance(t, torch.Tensor) and t.dim() > 0),
        }
        for key, value in sizes.items():
            self.peak[key] = max(self.peak[key], value)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        strategy = trainer.strategy
        torch.save({"rank": trainer.global_rank, "world_size": trainer.world_size, "pid": os.getpid(),
                    "ppid": os.getppid(), "launcher": type(strategy.launcher).__name__,
                    "peak": dict(self.peak), "grads_after_backward": list(self.grads_after_backward),
                    "forward_dtypes": sorted(pl_module.forward_dtypes),
                    "param_dtypes": sorted({str(p.dtype) for p in pl_module.parameters()})},
                   Path(self.folder) / f"{self.tag}-rank{trainer.global_rank}.pt")
