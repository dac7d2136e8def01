"""A module for the ddp_spawn GPU test; importable by the spawned workers (it must live in a file)."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit


class RankProbe(accelkit.Module):
    """Writes ``rank<N>.json`` with the GPU and process group each worker ended up with."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out
        self.net = nn.Linear(8, 2)
        self.batches = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.batches += 1
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(256, 8, generator=generator)
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16, shuffle=True)

    def on_train_end(self):
        grouped = dist.is_initialized()  # a one-GPU ddp_spawn run needs no process group
        record = {"current_device": torch.cuda.current_device(),
                  "world_size": dist.get_world_size() if grouped else 1,
                  "backend": dist.get_backend() if grouped else "none", "batches": self.batches}
        with open(os.path.join(self.out, f"rank{self.global_rank}.json"), "w") as f:
            json.dump(record, f)
