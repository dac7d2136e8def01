"""A worker script for the tests: debug runs of one small module, one per kind named, one after the other in this
process of its own (torch_xla's counters are process-wide; the debug report counts what each run added to them).

    python scenario.py ROOT_DIR KIND [KIND ...] [--via-plugins KIND] [--devices N]

KIND is one of clean, shapes, item, fallback; each run writes under ``ROOT_DIR/KIND`` and prints one JSON line: the
kind, the strategy, whether torch_xla was imported in this (launching) process before its ``fit()`` ran, and the
steps. Only the first run meets torch_xla unimported (and so sets its debug variables before the runtime starts);
the kinds that follow train graphs of their own shapes or ops, so what one run compiled is not what another checks.
Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import accelkit

#: the "shapes" kind's batches: 17, 18, ... 28 samples in its 12 steps, none the 16 of the other kinds (a graph another
#: run of this process compiled would not compile again)
SHAPES_FIRST_BATCH, SHAPES_SAMPLES = 17, 288


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
    """Batches of ``first``, ``first + 1``, ... samples: every step has a new shape."""

    def __init__(self, n: int, first: int) -> None:
        self.n, self.first = n, first

    def __iter__(self):
        start, size = 0, self.first
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
        self.data = Blobs(SHAPES_SAMPLES if kind == "shapes" else 192)
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
            return DataLoader(self.data, batch_sampler=VaryingBatches(len(self.data), SHAPES_FIRST_BATCH))
        return DataLoader(self.data, batch_size=16, drop_last=True)


def run(kind: str, root: str, devices: int, via_plugins: bool) -> None:
    """One debug run of ``kind`` (12 steps) under ``root``; prints its JSON line."""
    torch.manual_seed(0)
    extra = {"plugins": "tpu_spawn_debug"} if via_plugins else {"strategy": "xla_spawn_debug"}
    trainer = accelkit.Trainer(accelerator="xla", devices=devices, max_epochs=1, max_steps=12,
                               enable_progress_bar=False, enable_checkpointing=False, logger=False,
                               default_root_dir=root, **extra)
    imported_before = "torch_xla" in sys.modules
    trainer.fit(Scenario(kind))
    print(json.dumps({"kind": kind, "strategy": type(trainer.strategy).__name__,
                      "torch_xla_imported_before_fit": imported_before, "global_step": trainer.global_step}),
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("kinds", nargs="+", choices=["clean", "shapes", "item", "fallback"])
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--via-plugins", action="append", default=[], metavar="KIND",
                        help="the run of KIND passes plugins='tpu_spawn_debug' instead")
    args = parser.parse_args()
    for kind in args.kinds:
        run(kind, str(Path(args.root) / kind), args.devices, kind in args.via_plugins)


if __name__ == "__main__":
    main()
