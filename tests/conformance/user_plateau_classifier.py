"""(x) A user project's classifier training (satwik-kambham/insight: ``insight/classification/train/train.py`` and
``models/classifier.py``): ``save_hyperparameters()``, a torchmetrics ``Accuracy`` logged per epoch, a
``ReduceLROnPlateau`` monitoring ``val_loss`` returned as ``[optimizer], [scheduler dict]``, the loggers given as
a list and ``LearningRateMonitor(log_momentum=True)``, whose values the project then reads in ``callback_metrics``.

Stand-ins: CIFAR10 becomes random 3x32x32 images, LeNet5 a small CNN, 2 epochs instead of 20; the project's
``WandbLogger`` and ``torchinfo.summary`` are left out (neither library is installed here). Only the imports point
at accelkit.
"""

from pathlib import Path

import torch
import torch.nn as nn
import torch.optim as optim
import torchmetrics as tm
from _cli import expect, ok, parse_args, trainer_kwargs
from torch.utils.data import DataLoader, TensorDataset

import accelkit as pl  # was: import lightning.pytorch as pl
from accelkit import (
    LightningDataModule,  # was: pl.LightningDataModule
    LightningModule,  # was: pl.LightningModule
)
from accelkit.callbacks.lr_monitor import LearningRateMonitor  # was: lightning.pytorch.callbacks.lr_monitor
from accelkit.loggers import TensorBoardLogger  # was: from lightning.pytorch.loggers import TensorBoardLogger


class Classifier(LightningModule):
    def __init__(self, num_classes, num_channels, img_shape, labels, lr=0.01, weight_decay=0.0, factor=0.1,
                 patience=10, threshold=0.0001):
        super().__init__()
        self.save_hyperparameters()
        self.classifier = nn.Sequential(nn.Conv2d(num_channels, 6, 5), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                                        nn.Flatten(), nn.Linear(96, num_classes))
        self.lr, self.weight_decay, self.factor, self.patience, self.threshold = lr, weight_decay, factor, \
            patience, threshold
        self.criterion = nn.CrossEntropyLoss()
        self.accuracy = tm.Accuracy(task="multiclass", num_classes=num_classes)

    def forward(self, x):
        return self.classifier(x)

    def training_step(self, batch, batch_idx):
        data, target = batch
        loss = self.criterion(self(data), target)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        data, target = batch
        output = self(data)
        loss = self.criterion(output, target)
        pred = output.argmax(dim=1, keepdim=False)
        self.log("val_loss", loss, sync_dist=True)
        self.accuracy(pred, target)
        self.log("val_acc", self.accuracy, on_step=False, on_epoch=True)

    def configure_optimizers(self):
        optimizer = optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        lr_scheduler1 = optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=self.factor, patience=self.patience,
                                                             threshold=self.threshold)
        return [optimizer], [{"scheduler": lr_scheduler1, "monitor": "val_loss", "interval": "epoch"}]


class DataModule(LightningDataModule):
    num_classes, num_channels, img_shape, labels = 10, 3, (32, 32), [str(i) for i in range(10)]

    def __init__(self, train_batch_size=64, val_batch_size=64):
        super().__init__()
        self.train_batch_size, self.val_batch_size = train_batch_size, val_batch_size

    def setup(self, stage):
        generator = torch.Generator().manual_seed(0)
        self.train = TensorDataset(torch.randn(256, 3, 32, 32, generator=generator),
                                   torch.randint(0, 10, (256,), generator=generator))
        self.val = TensorDataset(torch.randn(64, 3, 32, 32, generator=generator),
                                 torch.randint(0, 10, (64,), generator=generator))

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.train_batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.val_batch_size)


def main():
    args = parse_args(__doc__)
    pl.seed_everything(42, workers=True)
    datamodule = DataModule()
    classifier = Classifier(num_classes=datamodule.num_classes, num_channels=datamodule.num_channels,
                            img_shape=datamodule.img_shape, labels=datamodule.labels, lr=0.001, patience=3)
    tensorboard_logger = TensorBoardLogger(str(Path(args.root) / "tensorboard_logs"))
    lr_monitor = LearningRateMonitor(log_momentum=True)
    trainer = pl.Trainer(max_epochs=2, logger=[tensorboard_logger], callbacks=[lr_monitor],
                         enable_progress_bar=False, **trainer_kwargs(args))
    trainer.fit(classifier, datamodule=datamodule)

    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    print(metrics)
    expect(abs(metrics.get("lr-Adam", 0) - 0.001) < 1e-6 and abs(metrics.get("lr-Adam-momentum", 0) - 0.9) < 1e-6,
           f"learning-rate monitor values: {metrics}")
    expect({"val_loss", "val_acc", "train_loss"} <= set(metrics), f"callback_metrics: {sorted(metrics)}")
    expect(classifier.hparams.patience == 3 and classifier.hparams.labels == datamodule.labels,
           f"hparams: {dict(classifier.hparams)}")
    events = list((Path(args.root) / "tensorboard_logs").rglob("events.out.tfevents*"))
    expect(events != [], "the TensorBoard logger wrote no event file")
    ok("user_plateau_classifier")


if __name__ == "__main__":
    main()
