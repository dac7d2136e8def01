"""A worker script for the tests: one debug run of one small module, in a process of its own (torch_xla's counters
are process-wide, so every scenario gets its own process).

    python scenario.py {clean,shapes,item,fallback} ROOT_DIR [--devices N]

Prints one JSON line: the report paths found, and whether torch_xla was imported in this (launching) process
before ``fit()`` ran. Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import accelkit


class Blobs(Dataset):
    """Two Gaussian blobs in 8 dimensions; deterministic."""

    def __init__(self, n: int = 192) -> None:
        g = torch.Generator().manual_seed(0)
        self.y = torch.randint(0, 2, (n,), generator=g)
        self.x = torch.randn(n, 8, generator=g) + self.y[:, None].float() * 2.0

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class VaryingBatches(torch.utils.data.Sampler):
    """Batches of 8, 9, 10, ... samples: every step has a new shape."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        start, size = 0, 8
        while start + size <= self.n:
            yield list(range(start, start + size))
            start, size = start + size, size + 1

    def __len__(self) -> int:
        return sum(1 for _ in iter(self))


class Scenario(accelkit.Module):
    """A logistic-regression-sized MLP whose training step misbehaves as ``kind`` says."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        self.data = Blobs()
        self.seen_values: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        if self.kind == "fallback":
            # no XLA lowering on purpose (checked in the test: it shows up as an aten:: counter)
            logits = logits + torch.special.i0e(logits.detach()) * 0
        loss = F.cross_entropy(logits, y)
        if self.kind == "item":
            self.seen_values.append(loss.item())  # a device->host read every step, on purpose
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        if self.kind == "shapes":
            return DataLoader(self.data, batch_sampler=VaryingBatches(len(self.data)))
        return DataLoader(self.data, batch_size=16, drop_last=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["clean", "shapes", "item", "fallback"])
    parser.add_argument("root")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--via-plugins", action="store_true", help="pass plugins='tpu_spawn_debug' instead")
    args = parser.parse_args()
    torch.manual_seed(0)
    extra = {"plugins": "tpu_spawn_debug"} if args.via_plugins else {"strategy": "xla_spawn_debug"}
    trainer = accelkit.Trainer(accelerator="xla", devices=args.devices, max_epochs=1, max_steps=12,
                               enable_progress_bar=False, enable_checkpointing=False, logger=False,
                               default_root_dir=args.root, **extra)
    imported_before = "torch_xla" in sys.modules
    trainer.fit(Scenario(args.kind))
    print(json.dumps({"strategy": type(trainer.strategy).__name__, "torch_xla_imported_before_fit": imported_before,
                      "global_step": trainer.global_step}))


if __name__ == "__main__":
    main()
