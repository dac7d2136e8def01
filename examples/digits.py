"""A small classifier for scikit-learn's digits data set (8x8 images, 10 classes; it ships inside
scikit-learn, so nothing is downloaded).

    accelkit fit examples/digits.py:DigitsClassifier
    accelkit fit examples/digits.py:DigitsClassifier --accelerator cpu --devices 2 --strategy ddp_spawn
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit


def digits_datasets(seed: int = 0) -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """The 1,797 digits split 70/10/20 into train, validation and test (stratified), pixels scaled to [0, 1].

    The test split is used only after training, so its accuracy is truly held out.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    x_rest, x_test, y_rest, y_test = train_test_split(
        images / 16.0, labels, test_size=0.2, random_state=seed, stratify=labels)
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=0.125, random_state=seed, stratify=y_rest)

    def as_dataset(x, y):
        return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))

    return as_dataset(x_train, y_train), as_dataset(x_val, y_val), as_dataset(x_test, y_test)


class DigitsClassifier(accelkit.Module):
    """A two-layer perceptron: 64 pixels -> 128 hidden units -> 10 classes."""

    def __init__(self, hidden: int = 128, lr: float = 1e-2, batch_size: int = 64) -> None:
        super().__init__()
        self.save_hyperparameters(hidden=hidden, lr=lr, batch_size=batch_size)
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
        self.train_set, self.val_set, self.test_set = digits_datasets()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True, sync_dist=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self(x).argmax(-1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams["lr"])
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=20)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams["batch_size"], shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=256)
