"""Worker script for the bf16 tests: fit a small classifier on XLA (PJRT CPU) with each precision named on
the command line, in this process of its own, and print one JSON line per precision with what the training step
saw. Not collected by pytest (no ``test_`` prefix).

    python bf16_run.py ROOT PRECISION [PRECISION ...]
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit


def blobs(n: int = 512) -> TensorDataset:
    """Three separable Gaussian blobs in 16 dimensions (deterministic)."""
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (n,), generator=g)
    centers = torch.randn(3, 16, generator=g) * 3
    return TensorDataset(centers[y] + torch.randn(n, 16, generator=g), y)


class Probe(accelkit.Module):
    """An MLP that records, inside ``training_step``, the dtypes of its inputs, parameters and activations."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
        self.seen: dict[str, set[str]] = {"input": set(), "param": set(), "hidden": set(), "logits": set(),
                                          "loss": set()}
        self.losses: list[torch.Tensor] = []
        self.device_text = ""

    def training_step(self, batch, batch_idx):
        x, y = batch
        hidden = self.net[1](self.net[0](x))
        logits = self.net[2](hidden)
        loss = F.cross_entropy(logits, y)
        for key, value in (("input", x), ("hidden", hidden), ("logits", logits), ("loss", loss)):
            self.seen[key].add(str(value.dtype))
        self.seen["param"].update(str(p.dtype) for p in self.parameters())
        if batch_idx == 0:
            import torch_xla

            # what the XLA graph really stores (differs from .dtype only in the legacy XLA_USE_BF16 mode)
            self.device_text = torch_xla._XLAC._get_xla_tensors_text([self.net[0].weight])
        self.losses.append(loss.detach())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self):
        return DataLoader(blobs(), batch_size=32, shuffle=True, drop_last=True)


def main() -> None:
    root, precisions = sys.argv[1], sys.argv[2:]
    for precision in precisions:
        torch.manual_seed(0)
        model = Probe()
        trainer = accelkit.Trainer(accelerator="xla", devices=1, precision=int(precision) if precision.isdigit()
                                   else precision, max_epochs=2, enable_progress_bar=False,
                                   enable_checkpointing=False, logger=False, default_root_dir=root)
        trainer.fit(model)
        losses = [float(v) for v in torch.stack([v.cpu().float() for v in model.losses])]
        print(json.dumps({
            "asked": precision,
            "resolved": trainer.precision.name,
            "precision_class": type(trainer.precision).__name__,
            "seen": {k: sorted(v) for k, v in model.seen.items()},
            "device_weight_type": "bf16" if "bf16[" in model.device_text else (
                "f32" if "f32[" in model.device_text else "?"),
            "final_param_dtype": str(next(model.parameters()).dtype),
            "losses_finite": all(math.isfinite(v) for v in losses),
            "first_loss": sum(losses[:4]) / 4,
            "last_loss": sum(losses[-4:]) / 4,
            "steps": trainer.global_step,
            "XLA_USE_BF16": os.environ.get("XLA_USE_BF16"),
        }), flush=True)


if __name__ == "__main__":
    main()
