"""(i) A metric object logged with ``self.log(name, metric)``: torchmetrics' ``Accuracy`` when torchmetrics is
installed, otherwise a small class with the same ``update`` / ``compute`` / ``reset`` protocol.

Lightning computes a logged metric object once at the epoch's end (``compute`` syncs its state across
processes) and resets it for the next epoch. The logged ``val_acc`` must therefore equal the accuracy of the
final weights on the whole validation set. Written as a Lightning user writes it; only the imports point at
accelkit.
"""

import numpy as np
import torch
import torch.distributed as dist
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule

try:
    from torchmetrics import Accuracy as _TorchmetricsAccuracy
except ImportError:
    _TorchmetricsAccuracy = None


class SimpleAccuracy(nn.Module):
    """torchmetrics-style accuracy: per-batch ``update``, ``compute`` summed over processes, ``reset``.

    The state is kept in plain tensor attributes, not buffers, so that DDP's buffer broadcast leaves each
    process's counts alone (torchmetrics does the same).
    """

    def __init__(self):
        super().__init__()
        self.reset()

    def update(self, preds, target):
        self.correct = self.correct.to(preds.device) + (preds == target).sum()
        self.total = self.total.to(preds.device) + target.numel()

    def compute(self):
        correct, total = self.correct.clone().float(), self.total.clone().float()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(correct)
            dist.all_reduce(total)
        return correct / total

    def reset(self):
        self.correct = torch.tensor(0)
        self.total = torch.tensor(0)


def make_accuracy():
    if _TorchmetricsAccuracy is not None:
        return _TorchmetricsAccuracy(task="multiclass", num_classes=10, average="micro")
    return SimpleAccuracy()


class DigitsModel(LightningModule):
    def __init__(self, root: str):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        self.train_acc = make_accuracy()
        self.val_acc = make_accuracy()
        self.root = root

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.train_acc.update(logits.argmax(dim=1), y)
        self.log("train_acc", self.train_acc, on_step=False, on_epoch=True)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.val_acc.update(self(x).argmax(dim=1), y)
        self.log("val_acc", self.val_acc, prog_bar=True)

    def on_train_epoch_end(self):
        append(self.root, "train_acc", self.global_rank, float(self.trainer.callback_metrics["train_acc"]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)


def main():
    from sklearn.datasets import load_digits

    args = parse_args(__doc__)
    L.seed_everything(4)
    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    x = torch.tensor(digits.data[order] / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target[order], dtype=torch.long)
    train = DataLoader(TensorDataset(x[:1000], y[:1000]), batch_size=50, shuffle=True)
    val = DataLoader(TensorDataset(x[1000:1400], y[1000:1400]), batch_size=50)

    model = DigitsModel(args.root)
    trainer = L.Trainer(max_epochs=3, enable_progress_bar=False, enable_checkpointing=False, **trainer_kwargs(args))
    trainer.fit(model, train, val)

    with torch.no_grad():
        expected = (model.cpu()(x[1000:1400]).argmax(dim=1) == y[1000:1400]).float().mean().item()
    logged = float(trainer.callback_metrics["val_acc"])
    expect(abs(logged - expected) < 1e-6,
           f"logged val_acc {logged} != accuracy of the final weights on all validation samples {expected} "
           f"(computed once per epoch over every process, reset between epochs)")
    validated = trainer.validate(model, dataloaders=val)
    expect(abs(validated[0]["val_acc"] - expected) < 1e-6, f"validate returned {validated}, expected {expected}")
    expect(expected > 0.8, f"accuracy {expected}")

    curves = read(args.root, "train_acc")
    expect(sorted(curves) == list(range(args.devices)), f"epoch ends on ranks {sorted(curves)}")
    for rank, curve in curves.items():
        expect(len(curve) == 3 and all(0.0 <= a <= 1.0 for a in curve), f"rank {rank}: train_acc {curve}")
        expect(curve[-1] > curve[0], f"rank {rank}: train accuracy did not rise: {curve}")
        expect(curve == curves[0], f"train_acc differs across ranks: {curves}")
    ok("metric")


if __name__ == "__main__":
    main()
