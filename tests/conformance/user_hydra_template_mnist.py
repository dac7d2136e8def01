"""(z1) The MNIST example of a widely used project template (ashleve/lightning-hydra-template, MIT licence:
``src/models/mnist_module.py``, ``src/data/mnist_datamodule.py``, ``src/train.py``), re-written in our own words with
the features it uses: torchmetrics *objects* (``Accuracy``, ``MeanMetric``, ``MaxMetric``) updated in the steps and
logged as objects, the best validation accuracy so far logged from ``on_validation_epoch_end`` with ``sync_dist``,
the metrics reset in ``on_train_start``, ``save_hyperparameters(logger=False, ignore=["net"])`` with the network as
an argument, a ``ReduceLROnPlateau`` monitoring ``val/loss`` returned in a dict, a DataModule whose ``setup``
splits once and divides the batch size by ``trainer.world_size``, ``EarlyStopping`` and ``ModelCheckpoint`` on
``val/acc`` with a ``/`` in the metric name, then ``trainer.test(ckpt_path="best")`` and
``trainer.callback_metrics`` read back.

Stand-ins: hydra's configuration becomes keyword arguments, MNIST random 1x28x28 images whose class is the sign of
their mean, 3 epochs. Only the imports point at accelkit.
"""

from pathlib import Path

import torch
from _cli import expect, ok, parse_args, report, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification.accuracy import Accuracy

import accelkit as L  # was: import lightning as L
from accelkit.callbacks import (
    EarlyStopping,  # was: from lightning.pytorch.callbacks import EarlyStopping
    ModelCheckpoint,  # was: from lightning.pytorch.callbacks import ModelCheckpoint
)


class DenseNet(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, width), nn.BatchNorm1d(width), nn.ReLU(),
                                    nn.Linear(width, 2))

    def forward(self, x):
        return self.layers(x)


class MNISTLitModule(L.LightningModule):
    def __init__(self, net, lr=0.01, weight_decay=0.0, patience=2):
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=["net"])
        self.net = net
        self.criterion = nn.CrossEntropyLoss()
        self.train_acc = Accuracy(task="multiclass", num_classes=2)
        self.val_acc = Accuracy(task="multiclass", num_classes=2)
        self.test_acc = Accuracy(task="multiclass", num_classes=2)
        self.train_loss, self.val_loss, self.test_loss = MeanMetric(), MeanMetric(), MeanMetric()
        self.val_acc_best = MaxMetric()

    def forward(self, x):
        return self.net(x)

    def on_train_start(self):
        self.val_loss.reset()
        self.val_acc.reset()
        self.val_acc_best.reset()

    def model_step(self, batch):
        x, y = batch
        logits = self(x)
        return self.criterion(logits, y), logits.argmax(dim=1), y

    def training_step(self, batch, batch_idx):
        loss, preds, targets = self.model_step(batch)
        self.train_loss(loss)
        self.train_acc(preds, targets)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, preds, targets = self.model_step(batch)
        self.val_loss(loss)
        self.val_acc(preds, targets)
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self):
        self.val_acc_best(self.val_acc.compute())
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    def test_step(self, batch, batch_idx):
        loss, preds, targets = self.model_step(batch)
        self.test_loss(loss)
        self.test_acc(preds, targets)
        self.log("test/loss", self.test_loss, on_step=False, on_epoch=True)
        self.log("test/acc", self.test_acc, on_step=False, on_epoch=True)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.trainer.model.parameters(), lr=self.hparams.lr,
                                     weight_decay=self.hparams.weight_decay)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.1,
                                                               patience=self.hparams.patience)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "monitor": "val/loss", "interval": "epoch", "frequency": 1}}


class MNISTDataModule(L.LightningDataModule):
    def __init__(self, batch_size=32, split=(512, 128, 128)):
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.data_train = self.data_val = self.data_test = None
        self.batch_size_per_device = batch_size
        self.setups = 0

    def setup(self, stage=None):
        if self.trainer is not None:
            if self.hparams.batch_size % self.trainer.world_size != 0:
                raise RuntimeError("batch size not divisible by the number of devices")
            self.batch_size_per_device = self.hparams.batch_size // self.trainer.world_size
        if not self.data_train and not self.data_val and not self.data_test:
            self.setups += 1
            generator = torch.Generator().manual_seed(7)
            images = torch.randn(sum(self.hparams.split), 1, 28, 28, generator=generator)
            labels = (images.mean(dim=(1, 2, 3)) > 0).long()
            images[labels == 1] += 0.3
            self.data_train, self.data_val, self.data_test = random_split(
                TensorDataset(images, labels), self.hparams.split, generator=torch.Generator().manual_seed(42))

    def train_dataloader(self):
        return DataLoader(self.data_train, batch_size=self.batch_size_per_device, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.data_val, batch_size=self.batch_size_per_device)

    def test_dataloader(self):
        return DataLoader(self.data_test, batch_size=self.batch_size_per_device)


def main():
    args = parse_args(__doc__)
    L.seed_everything(12345, workers=True)
    datamodule = MNISTDataModule()
    model = MNISTLitModule(net=DenseNet())
    checkpoint = ModelCheckpoint(dirpath=str(Path(args.root) / "checkpoints"), monitor="val/acc", mode="max",
                                 save_last=True, filename="epoch_{epoch:03d}", auto_insert_metric_name=False)
    stopping = EarlyStopping(monitor="val/acc", patience=100, mode="max")
    trainer = L.Trainer(max_epochs=3, callbacks=[checkpoint, stopping], enable_progress_bar=False, logger=False,
                        deterministic=True, **trainer_kwargs(args))
    trainer.fit(model=model, datamodule=datamodule)
    train_metrics = dict(trainer.callback_metrics)
    trainer.test(model=model, datamodule=datamodule, ckpt_path="best")
    test_metrics = dict(trainer.callback_metrics)
    metrics = {**train_metrics, **test_metrics}
    report(metrics={k: float(v) for k, v in metrics.items()}, steps=trainer.global_step, epoch=trainer.current_epoch,
           best=Path(checkpoint.best_model_path).name, best_score=checkpoint.best_model_score)
    for key in ("train/loss", "train/acc", "val/loss", "val/acc", "val/acc_best", "test/loss", "test/acc"):
        expect(key in metrics, f"{key} missing from callback_metrics: {sorted(metrics)}")
    expect(float(metrics["val/acc_best"]) >= float(train_metrics["val/acc"]) - 1e-6, f"best below last: {metrics}")
    expect(float(metrics["test/acc"]) > 0.7, f"the classifier did not learn: {metrics}")
    best = Path(checkpoint.best_model_path)
    expect(best.name.startswith("epoch_") and best.exists(), f"best checkpoint: {checkpoint.best_model_path!r}")
    expect((best.parent / "last.ckpt").exists(), f"no last.ckpt beside {best}")
    if trainer.world_size == 1:  # under DDP, setup ran on the workers' copies of the DataModule (as Lightning)
        expect(datamodule.setups == 1, f"the data were split {datamodule.setups} times, once wanted")
        expect(datamodule.batch_size_per_device == 32, f"{datamodule.batch_size_per_device}")
    expect(model.hparams.lr == 0.01 and "net" not in model.hparams, f"hparams: {dict(model.hparams)}")
    ok("user_hydra_template_mnist")


if __name__ == "__main__":
    main()
