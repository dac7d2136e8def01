"""(c) A LightningDataModule (``prepare_data``, ``setup(stage)``, ``teardown(stage)``, the four loaders) used
by ``fit``, ``validate``, ``test`` and ``predict``.

``prepare_data`` "downloads" scikit-learn's digits into a data folder once (the way Lightning's MNIST
DataModule downloads), ``setup`` builds the splits in every process. Written as a Lightning user writes it;
only the imports point at accelkit.
"""

import math
import os
from pathlib import Path

import numpy as np
import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

import accelkit as L  # was: import lightning as L
from accelkit import (
    LightningDataModule,  # was: from lightning.pytorch import LightningDataModule
    LightningModule,  # was: from lightning.pytorch import LightningModule
)

BATCH, EPOCHS = 32, 3


class DigitsDataModule(LightningDataModule):
    def __init__(self, data_dir: str, batch_size: int = BATCH):
        super().__init__()
        self.data_dir = Path(data_dir)
        self.batch_size = batch_size

    def prepare_data(self):
        # download / write to disk: Lightning calls this on one process per node
        with open(self.data_dir / "prepare_data.log", "a") as log:
            log.write(f"{os.getpid()}\n")
        target = self.data_dir / "digits.npz"
        if not target.exists():
            from sklearn.datasets import load_digits

            digits = load_digits()
            np.savez(target, x=digits.data.astype(np.float32) / 16.0, y=digits.target.astype(np.int64))

    def setup(self, stage: str):
        append(self.data_dir, "setup", self.trainer.global_rank, stage)
        data = np.load(self.data_dir / "digits.npz")
        full = TensorDataset(torch.from_numpy(data["x"]), torch.from_numpy(data["y"]))
        train, val, test = random_split(full, [1257, 270, 270], generator=torch.Generator().manual_seed(0))
        if stage == "fit":
            self.digits_train, self.digits_val = train, val
        if stage == "validate":
            self.digits_val = val
        if stage == "test":
            self.digits_test = test
        if stage == "predict":
            self.digits_predict = test

    def train_dataloader(self):
        return DataLoader(self.digits_train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.digits_val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.digits_test, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.digits_predict, batch_size=self.batch_size)

    def teardown(self, stage: str):
        append(self.data_dir, "teardown", self.trainer.global_rank, stage)


class DigitsClassifier(LightningModule):
    def __init__(self, lr: float = 0.01):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        self.lr = lr

    def forward(self, x):
        return self.net(x)

    def _accuracy(self, batch):
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits, y), (logits.argmax(dim=1) == y).float().mean()

    def training_step(self, batch, batch_idx):
        loss, acc = self._accuracy(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, acc = self._accuracy(batch)
        self.log_dict({"val_loss": loss, "val_acc": acc}, sync_dist=True)

    def test_step(self, batch, batch_idx):
        loss, acc = self._accuracy(batch)
        self.log_dict({"test_loss": loss, "test_acc": acc}, sync_dist=True)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        x, _ = batch
        return self(x).argmax(dim=1)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def main():
    args = parse_args(__doc__)
    L.seed_everything(7)
    data_dir = Path(args.root) / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    dm = DigitsDataModule(str(data_dir))
    model = DigitsClassifier()
    trainer = L.Trainer(max_epochs=EPOCHS, enable_progress_bar=False, **trainer_kwargs(args))

    trainer.fit(model, dm)  # a DataModule as the second positional argument, as Lightning allows
    validated = trainer.validate(model, datamodule=dm)
    tested = trainer.test(model, datamodule=dm)
    predictions = trainer.predict(model, datamodule=dm)

    expect(validated[0]["val_acc"] > 0.8, f"validation accuracy {validated}")
    expect(tested[0]["test_acc"] > 0.8, f"test accuracy {tested}")

    world = args.devices
    calls = (data_dir / "prepare_data.log").read_text().split()
    expect(len(calls) == 4, f"prepare_data ran {len(calls)} times for 4 trainer calls (once per call and node)")
    stages = ["fit", "validate", "test", "predict"]
    setups, teardowns = read(data_dir, "setup"), read(data_dir, "teardown")
    expect(sorted(setups) == list(range(world)), f"setup ran on ranks {sorted(setups)}")
    for rank in range(world):
        expect(setups[rank] == stages, f"rank {rank}: setup stages {setups[rank]}, expected {stages}")
        expect(teardowns.get(rank) == stages, f"rank {rank}: teardown stages {teardowns.get(rank)}")

    labels = torch.cat(predictions)
    expect(labels.shape == (math.ceil(270 / world),), f"predictions of shape {tuple(labels.shape)}")
    ok("datamodule")


if __name__ == "__main__":
    main()
