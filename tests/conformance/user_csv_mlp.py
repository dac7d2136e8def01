"""(w) A user project's MLP, DataModule and log reading (soutrik71/pytorch_lightning_journey: ``lightning_advanced/
engine.py`` and ``utils.py``): torchmetrics ``Accuracy`` objects logged per epoch, a cosine schedule stepped every
batch (a scheduler dict with ``interval="step"``), a ``CSVLogger`` whose ``metrics.csv`` is read back after the fit and
grouped by epoch as the
project's ``plot_csv_logs`` does (printing instead of plotting), then ``trainer.test(ckpt_path="best")``.

Stand-ins: ``sklearn.datasets.make_classification`` (20000 samples) becomes 1200 random samples whose label is
the sign of their first feature. Only the imports point at accelkit.
"""

import csv
from pathlib import Path

import torch
import torchmetrics
from _cli import expect, ok, parse_args, trainer_kwargs
from torch.utils.data import DataLoader, Dataset

import accelkit as L  # was: import lightning as L
from accelkit import (
    LightningDataModule,  # was: L.LightningDataModule
    LightningModule,  # was: L.LightningModule
)
from accelkit.loggers import CSVLogger  # was: from lightning.pytorch.loggers import CSVLogger

EPOCHS = 3


class PyTorchMLP(torch.nn.Module):
    def __init__(self, num_features, num_classes):
        super().__init__()
        self.all_layers = torch.nn.Sequential(
            torch.nn.Linear(num_features, 100), torch.nn.BatchNorm1d(100), torch.nn.Dropout1d(0.2), torch.nn.ReLU(),
            torch.nn.Linear(100, 50), torch.nn.BatchNorm1d(50), torch.nn.ReLU(), torch.nn.Dropout1d(0.2),
            torch.nn.Linear(50, num_classes))

    def forward(self, x):
        return self.all_layers(torch.flatten(x, start_dim=1))


class LightningMLP(LightningModule):
    def __init__(self, model, learning_rate, num_iters=1000):
        super().__init__()
        self.learning_rate = learning_rate
        self.model = model
        self.criterion = torch.nn.CrossEntropyLoss()
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=10)
        self.test_acc = torchmetrics.Accuracy(task="multiclass", num_classes=10)
        self.save_hyperparameters(ignore=["model"])
        self.num_iters = num_iters

    def forward(self, x):
        return self.model(x)

    def _shared_step(self, batch):
        features, label = batch
        logits = self(features)
        return label, self.criterion(logits, label), torch.argmax(logits, dim=1)

    def training_step(self, batch, batch_idx):
        label, loss, predictions = self._shared_step(batch)
        self.log(name="train_loss", value=loss, prog_bar=True)
        self.train_acc(predictions, label)
        self.log(name="train_acc", value=self.train_acc, prog_bar=True, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        label, loss, predictions = self._shared_step(batch)
        self.log(name="val_loss", value=loss, prog_bar=True)
        self.test_acc(predictions, label)
        self.log(name="val_acc", value=self.test_acc, prog_bar=True, on_epoch=True, on_step=False)

    def test_step(self, batch, batch_idx):
        label, loss, predictions = self._shared_step(batch)
        self.test_acc(predictions, label)
        self.log(name="test_acc", value=self.test_acc, prog_bar=True, on_epoch=True, on_step=False)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.learning_rate, momentum=0.9)
        sch = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.num_iters)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": sch, "monitor": "train_loss", "interval": "step", "frequency": 1}}


class CustomDataset(Dataset):
    def __init__(self, feature_array, label_array):
        self.x, self.y = feature_array, label_array

    def __getitem__(self, index):
        return self.x[index], self.y[index]

    def __len__(self):
        return self.y.shape[0]


class LightningData(LightningDataModule):
    def __init__(self, batch_size=64):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage):
        generator = torch.Generator().manual_seed(123)
        x = torch.randn(1200, 100, generator=generator)
        y = (x[:, 0] > 0).long()
        if stage == "fit":
            self.train_dataset = CustomDataset(x[:1000], y[:1000])
            self.val_dataset = CustomDataset(x[1000:1100], y[1000:1100])
        if stage == "test":
            self.test_dataset = CustomDataset(x[1100:], y[1100:])

    def train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_dataset, batch_size=self.batch_size, shuffle=False)

    def test_dataloader(self):
        return DataLoader(self.test_dataset, batch_size=self.batch_size, shuffle=False)


def main():
    args = parse_args(__doc__)
    L.seed_everything(123)
    dm = LightningData()
    model = LightningMLP(PyTorchMLP(100, 2), learning_rate=0.05, num_iters=100)
    trainer = L.Trainer(max_epochs=EPOCHS, logger=CSVLogger(save_dir=str(Path(args.root) / "logs"), name="mlp"),
                        enable_progress_bar=False, **trainer_kwargs(args))
    trainer.fit(model, datamodule=dm)
    files = sorted((Path(args.root) / "logs").rglob("metrics.csv"))
    expect(len(files) == 1, f"metrics.csv files: {files}")
    with open(files[0]) as handle:
        rows = list(csv.DictReader(handle))
    by_epoch = {}
    for row in rows:
        for key, value in row.items():
            if value not in ("", None) and key != "epoch" and row["epoch"] not in ("", None):
                by_epoch.setdefault(int(float(row["epoch"])), {})[key] = float(value)
    print(by_epoch)
    for epoch in range(EPOCHS):
        expect({"train_acc", "val_loss", "val_acc"} <= set(by_epoch.get(epoch, {})),
               f"epoch {epoch} logged {sorted(by_epoch.get(epoch, {}))}")
    expect(by_epoch[EPOCHS - 1]["val_acc"] > 0.6, f"validation accuracy {by_epoch[EPOCHS - 1]['val_acc']}")
    tested = trainer.test(model, datamodule=dm, ckpt_path="best", verbose=False)
    expect(len(tested) == 1 and tested[0]["test_acc"] > 0.6, f"test results: {tested}")
    ok("user_csv_mlp")


if __name__ == "__main__":
    main()
