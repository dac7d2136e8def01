"""(z) A user project's LightningCLI in subclass mode (Cogniveon/pytorch-template, MIT: ``train.py``,
``example_config.yaml``, ``models/swin_transformer.py``, ``data_modules/flowers102.py``): ``lightning.pytorch``
imported as ``pl``, ``LightningCLI(pl.LightningModule, pl.LightningDataModule, subclass_mode_model=True,
subclass_mode_data=True, trainer_defaults={...})``, the model and the data chosen by ``class_path`` in the YAML file,
whose trainer section names Lightning's ``TensorBoardLogger`` (``default_hp_metric: false``) and four callbacks by
Lightning's class paths (``LearningRateMonitor(logging_interval="step")``, ``EarlyStopping`` and ``ModelCheckpoint``
on ``val/loss``, the latter as ``best.ckpt`` with ``save_last``, and ``ModelSummary(max_depth=2)`` while the
script's defaults turn the summary off); torchmetrics ``Accuracy`` logged with ``on_step`` and ``on_epoch``, a
``StepLR`` returned as ``[optimizer], [scheduler]``, ``example_input_array``, and a ``validation_step`` returning a
set. Stand-ins: the pretrained Swin backbone is a small CNN, Flowers102 random 3x16x16 images of 5 classes, 3 epochs
instead of 10; ``torch.Any`` (gone from torch) is ``typing.Any``. Only the imports point at accelkit (the YAML file
is the project's, with the stand-ins' sizes).
"""

import os
import textwrap
import typing

import torch
import torch.nn as nn
import torchmetrics
from _cli import expect, ok, parse_args
from torch.utils.data import DataLoader

import accelkit.pytorch as pl  # was: import lightning.pytorch as pl
from accelkit.cli import LightningCLI  # was: from lightning.pytorch.cli import LightningCLI

CONFIG = textwrap.dedent("""
    seed_everything: 6839323
    model:
      class_path: __main__.SwinTransformer
      init_args:
        num_classes: 5
        learning_rate: 0.001
    data:
      class_path: __main__.Flowers102DataModule
      init_args:
        data_dir: './data'
        batch_size: 5
        num_workers: 0
    trainer:
      limit_train_batches: 0.5
      limit_val_batches: 0.25
      limit_test_batches: 0.25
      logger:
        class_path: "lightning.pytorch.loggers.TensorBoardLogger"
        init_args:
          save_dir: "ROOT"
          name: "runs"
          default_hp_metric: false
      callbacks:
        - class_path: "lightning.pytorch.callbacks.LearningRateMonitor"
          init_args:
            logging_interval: "step"
        - class_path: "lightning.pytorch.callbacks.EarlyStopping"
          init_args:
            monitor: "val/loss"
        - class_path: "lightning.pytorch.callbacks.ModelSummary"
          init_args:
            max_depth: 2
        - class_path: "lightning.pytorch.callbacks.ModelCheckpoint"
          init_args:
            filename: "best"
            monitor: "val/loss"
            save_last: true
            save_top_k: 1
""")


class Flowers102(torch.utils.data.Dataset):
    """Stand-in for ``torchvision.datasets.Flowers102``: random images, the split's size."""

    def __init__(self, root, split, download=False, transform=None):
        generator = torch.Generator().manual_seed(len(split))
        n = {"train": 40, "val": 20, "test": 20}[split]
        self.x, self.y = torch.rand(n, 3, 16, 16, generator=generator), torch.randint(0, 5, (n,), generator=generator)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, index):
        return self.x[index], self.y[index]


class SwinTransformer(pl.LightningModule):
    def __init__(self, num_classes: int = 10, learning_rate: float = 1e-3):
        super().__init__()
        model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        model.head = nn.Linear(4, num_classes)  # the project replaces the pretrained model's head so
        self.model = model
        self.example_input_array = torch.Tensor(1, 3, 16, 16)
        self.learning_rate = learning_rate
        self.save_hyperparameters()
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
        self.test_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)

    def forward(self, *args: typing.Any, **kwargs: typing.Any) -> typing.Any:
        return self.model(*args, **kwargs)

    def training_step(self, batch, batch_idx):
        tensors, targets = batch
        outputs = self.model(tensors)
        loss = nn.functional.cross_entropy(outputs, targets)
        self.train_acc(outputs, targets)
        self.log("train/loss", loss, prog_bar=True, logger=True)
        self.log("train/acc", self.train_acc, on_epoch=True, on_step=True, logger=True)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        tensors, targets = batch
        outputs = self.model(tensors)
        val_loss = nn.functional.cross_entropy(outputs, targets)
        self.val_acc(outputs, targets)
        self.log("val/loss", val_loss, logger=True)
        self.log("val/acc", self.val_acc, on_epoch=True, on_step=True, prog_bar=True, logger=True)
        return {"loss", val_loss}  # a set, as the project has it: nothing reads it

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.model.parameters(), lr=self.learning_rate)
        lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return [optimizer], [lr_scheduler]


class Flowers102DataModule(pl.LightningDataModule):
    def __init__(self, data_dir: str, batch_size: int = 8, num_workers: int = 4):
        super().__init__()
        self.data_dir, self.batch_size, self.num_workers = data_dir, batch_size, num_workers

    def setup(self, stage: str):
        if stage == "fit":
            self.flowers_train = Flowers102(root=self.data_dir, split="train")
            self.flowers_val = Flowers102(root=self.data_dir, split="val")

    def train_dataloader(self):
        return DataLoader(self.flowers_train, batch_size=self.batch_size, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.flowers_val, batch_size=self.batch_size, num_workers=self.num_workers)


def main():
    args = parse_args(__doc__)
    path = os.path.join(args.root, "config.yaml")
    with open(path, "w") as handle:
        handle.write(CONFIG.replace("ROOT", args.root))
    devices = ["--trainer.accelerator", args.accelerator, "--trainer.devices", str(args.devices),
               "--trainer.strategy", args.strategy]
    cli = LightningCLI(
        pl.LightningModule,
        pl.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        trainer_defaults={
            "max_epochs": 3,
            "log_every_n_steps": 5,
            "enable_model_summary": False,
        },
        args=["fit", "--config", path, *devices],
    )
    trainer = cli.trainer
    expect(type(cli.model).__name__ == "SwinTransformer" and type(cli.datamodule).__name__ == "Flowers102DataModule",
           f"built {type(cli.model)} and {type(cli.datamodule)}")
    expect(trainer.current_epoch == 3 and trainer.global_step == 12, f"{trainer.current_epoch} {trainer.global_step}")
    folder = os.path.join(args.root, "runs", "version_0")
    expect(trainer.log_dir == folder, f"the logger's folder is {trainer.log_dir}, not {folder}")
    found = sorted(os.listdir(os.path.join(folder, "checkpoints")))
    expect(found == ["best.ckpt", "last.ckpt"], f"checkpoints: {found}")
    logged = {"val/acc", "val/acc_epoch", "train/acc_step", "train/acc_epoch", "val/loss"}
    expect(logged <= set(trainer.callback_metrics), f"callback_metrics: {sorted(trainer.callback_metrics)}")
    expect(cli.model.hparams.num_classes == 5, f"hparams: {dict(cli.model.hparams)}")
    expect(os.path.isfile(os.path.join(folder, "config.yaml")), "the CLI saved no config.yaml")

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(folder)
    events.Reload()
    rates = [(e.step, round(e.value, 8)) for e in events.Scalars("lr-Adam")]
    # StepLR(step_size=1, gamma=0.1) steps every epoch; logged every 5 steps of 4 a epoch: steps 4 and 9
    expect(rates == [(4, 1e-4), (9, 1e-5)], f"lr-Adam in TensorBoard: {rates}")
    expect("hp_metric" not in events.Tags()["scalars"], "default_hp_metric: false still wrote hp_metric")
    ok("user_cli_subclass_mode")


if __name__ == "__main__":
    main()
