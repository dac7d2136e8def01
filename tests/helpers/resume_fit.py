"""A small fit for the exact-resume tests: shuffled loader, dropout, Adam and a step LR scheduler.

``python resume_fit.py ROOT STRATEGY DEVICES EPOCHS EVERY [stateful]`` trains (resuming from ``ckpt_path="last"``
when ROOT holds a checkpoint), prints ``step <global_step>`` after each batch and writes the final weights to
``ROOT/final.pt``. The tests kill it with SIGKILL at random steps and compare the weights with an uninterrupted run.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit


def dataset(n: int = 48, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=generator)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    return TensorDataset(x, y)


class DropoutNet(accelkit.Module):
    """Linear -> ReLU -> Dropout -> Linear on a shuffled loader; Adam with a per-step StepLR."""

    def __init__(self, batch_size: int = 4, stateful: bool = False, workers: int = 0) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
        self.batch_size, self.stateful, self.workers = batch_size, stateful, workers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.binary_cross_entropy_with_logits(self(x), y)

    def train_dataloader(self) -> Any:
        if self.stateful:
            from torchdata.stateful_dataloader import StatefulDataLoader

            return StatefulDataLoader(dataset(), batch_size=self.batch_size, shuffle=True, num_workers=self.workers)
        return DataLoader(dataset(), batch_size=self.batch_size, shuffle=True, num_workers=self.workers)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=0.02)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.8)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class PrintSteps(accelkit.Callback):
    """Prints ``step <global_step>`` after every batch (one write: spawned workers share the pipe)."""

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.is_global_zero:
            sys.stdout.write(f"step {trainer.global_step}\n")
            sys.stdout.flush()
        time.sleep(float(os.environ.get("STEP_SLEEP_S", "0")))  # room for the test's kill; changes no number


def make_trainer(root: str | Path, strategy: str = "auto", devices: int = 1, epochs: int = 3, every: int = 3,
                 **kwargs: Any) -> accelkit.Trainer:
    checkpoint = accelkit.callbacks.ModelCheckpoint(dirpath=Path(root) / "checkpoints", every_n_train_steps=every,
                                                    save_last=True, save_top_k=0)
    return accelkit.Trainer(accelerator="cpu", strategy=strategy, devices=devices, max_epochs=epochs, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                            callbacks=[checkpoint, *kwargs.pop("callbacks", [])], **kwargs)


def main() -> None:
    root, strategy, devices, epochs, every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5])
    stateful = len(sys.argv) > 6 and sys.argv[6] == "stateful"
    accelkit.seed_everything(0)
    model = DropoutNet(stateful=stateful)
    trainer = make_trainer(root, strategy, devices, epochs, every, callbacks=[PrintSteps()])
    resume = os.environ.get("RESUME_FROM") or ("last" if any((Path(root) / "checkpoints").glob("last*.ckpt"))
                                               else None)
    trainer.fit(model, ckpt_path=resume)
    torch.save(model.state_dict(), os.path.join(root, "final.pt"))
    sys.stdout.write("done\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
