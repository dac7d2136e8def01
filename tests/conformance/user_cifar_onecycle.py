"""(z2) The CIFAR10 baseline notebook of Lightning's tutorials (Lightning-AI/tutorials, CC BY-SA 4.0:
``lightning_examples/cifar10-baseline/baseline.py``), re-written in our own words with the features it uses:
``save_hyperparameters()``, one ``evaluate(batch, stage)`` shared by validation and test logging ``{stage}_loss`` and
``{stage}_acc`` with ``prog_bar=True``, a ``OneCycleLR`` sized from ``self.trainer.max_epochs`` and stepped every batch
(``"interval": "step"``), ``LearningRateMonitor(logging_interval="step")``, ``TQDMProgressBar(refresh_rate=10)``, a
``CSVLogger``, and the notebook's last cell: ``metrics.csv`` read back from ``trainer.logger.log_dir``, its ``step``
column dropped and its rows indexed by ``epoch``.

Stand-ins: CIFAR10 becomes random 3x16x16 images (class: the brightest channel), the ResNet18 a small CNN, the
notebook's pandas the standard ``csv`` module, 3 epochs. Only the imports point at accelkit.
"""

import csv
from pathlib import Path

import torch
import torch.nn.functional as F
from _cli import expect, ok, parse_args, report, trainer_kwargs
from torch import nn
from torch.optim.lr_scheduler import OneCycleLR
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.functional import accuracy

import accelkit as L  # was: import lightning as L
from accelkit.callbacks import (
    LearningRateMonitor,  # was: from lightning.pytorch.callbacks import LearningRateMonitor
    TQDMProgressBar,  # was: from lightning.pytorch.callbacks import TQDMProgressBar
)
from accelkit.loggers import CSVLogger  # was: from lightning.pytorch.loggers import CSVLogger

BATCH_SIZE = 32
TRAIN_SIZE = 256


def create_model():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 3))


def make_data(n, seed):
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 3, 16, 16, generator=generator)
    labels = torch.randint(0, 3, (n,), generator=generator)
    images[torch.arange(n), labels] += 0.5
    return TensorDataset(images, labels)


class LitResnet(L.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.model = create_model()

    def forward(self, x):
        return F.log_softmax(self.model(x), dim=1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.nll_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def evaluate(self, batch, stage=None):
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        acc = accuracy(torch.argmax(logits, dim=1), y, task="multiclass", num_classes=3)
        if stage:
            self.log(f"{stage}_loss", loss, prog_bar=True)
            self.log(f"{stage}_acc", acc, prog_bar=True)

    def validation_step(self, batch, batch_idx):
        self.evaluate(batch, "val")

    def test_step(self, batch, batch_idx):
        self.evaluate(batch, "test")

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=5e-4)
        steps_per_epoch = TRAIN_SIZE // BATCH_SIZE // self.trainer.world_size
        scheduler = OneCycleLR(optimizer, 0.1, epochs=self.trainer.max_epochs, steps_per_epoch=steps_per_epoch)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main():
    args = parse_args(__doc__)
    L.seed_everything(7)
    model = LitResnet(lr=0.05)
    trainer = L.Trainer(max_epochs=3, logger=CSVLogger(save_dir=str(Path(args.root) / "logs")),
                        callbacks=[LearningRateMonitor(logging_interval="step"), TQDMProgressBar(refresh_rate=10)],
                        log_every_n_steps=4, **trainer_kwargs(args))
    train = DataLoader(make_data(TRAIN_SIZE, 0), batch_size=BATCH_SIZE, shuffle=True, drop_last=True)
    val = DataLoader(make_data(64, 1), batch_size=BATCH_SIZE)
    trainer.fit(model, train, val)
    results = trainer.test(model, dataloaders=DataLoader(make_data(64, 2), batch_size=BATCH_SIZE))
    report(results=results, metrics={k: float(v) for k, v in trainer.callback_metrics.items()},
           steps=trainer.global_step, lr=trainer.optimizers[0].param_groups[0]["lr"])
    expect(len(results) == 1 and set(results[0]) == {"test_loss", "test_acc"}, f"test results: {results}")
    expect(results[0]["test_acc"] > 0.6, f"the model did not learn: {results}")
    if trainer.global_rank == 0:
        with open(Path(trainer.logger.log_dir) / "metrics.csv") as handle:
            rows = list(csv.DictReader(handle))
        columns = set(rows[0])
        expected = {"epoch", "step", "lr-SGD", "train_loss", "val_loss", "val_acc", "test_loss", "test_acc"}
        expect(columns == expected, f"metrics.csv columns: {sorted(columns)}, wanted {sorted(expected)}")
        for row in rows:
            del row["step"]
        by_epoch = {}
        for row in rows:
            by_epoch.setdefault(row["epoch"], []).append(row)
        # LearningRateMonitor's rows carry no epoch (as Lightning's): pandas would index them by NaN
        expect(sorted(by_epoch) == ["", "0", "1", "2", "3"], f"epochs in metrics.csv: {sorted(by_epoch)}")
        expect(all(row["lr-SGD"] for row in by_epoch[""]), f"rows without an epoch: {by_epoch['']}")
        rates = [float(row["lr-SGD"]) for row in rows if row["lr-SGD"]]
        # the one cycle rises then falls: logged every 4 steps of 8 per epoch, at least 6 values
        peak = rates.index(max(rates))
        expect(len(rates) >= 6 and 0 < peak < len(rates) - 1, f"learning rates logged: {rates}")
    ok("user_cifar_onecycle")


if __name__ == "__main__":
    main()
