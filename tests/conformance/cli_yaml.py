"""(u) A LightningCLI program and its YAML file as a Lightning user keeps them: class paths left commented out
(``# class_path: lightning.pytorch.loggers.wandb.WandbLogger``), ``lightning.pytorch`` in comments and strings, the
``ModelSummary`` callback by Lightning's class path, and the model summary imported from
``lightning.pytorch.utilities.model_summary`` (Lightning's docs do). ``fit`` runs from the file, and the saved
``config.yaml`` runs ``validate``.

Written as a Lightning user writes it; only the imports point at accelkit (the YAML file is unchanged).
"""

import os
import textwrap

import torch
from _cli import expect, ok, parse_args
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelkit import (
    LightningDataModule,  # was: from lightning.pytorch import LightningDataModule
    LightningModule,  # was: from lightning.pytorch import LightningModule
)
from accelkit.cli import LightningCLI  # was: from lightning.pytorch.cli import LightningCLI
from accelkit.utilities.model_summary import ModelSummary  # was: from lightning.pytorch.utilities.model_summary ...

CONFIG = textwrap.dedent("""
    # trained with lightning.pytorch 2.6; the W&B logger is off for now
    seed_everything: 7
    trainer:
      max_epochs: 2
      enable_progress_bar: false
      # logger:
      #   class_path: lightning.pytorch.loggers.wandb.WandbLogger
      #   init_args: {project: demo}
      logger:
        class_path: lightning.pytorch.loggers.CSVLogger   # was TensorBoardLogger
        init_args: {save_dir: ROOT}
      callbacks:
        - class_path: lightning.pytorch.callbacks.ModelSummary
          init_args: {max_depth: 2}
        # - class_path: lightning.pytorch.callbacks.EMAWeightAveraging
    model:
      hidden: 16
      note: "see lightning.pytorch.loggers.WandbLogger for the online runs"
    data:
      batch_size: 8
""")


class Blobs(LightningDataModule):
    def __init__(self, batch_size: int = 4):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage):
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(64, 4, generator=generator)
        self.data = TensorDataset(x, (x.sum(1) > 0).long())

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.data, batch_size=self.batch_size)


class Classifier(LightningModule):
    def __init__(self, hidden: int = 8, note: str = ""):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    args = parse_args(__doc__)
    path = os.path.join(args.root, "config.yaml")
    with open(path, "w") as handle:
        handle.write(CONFIG.replace("ROOT", args.root))
    devices = ["--trainer.accelerator", args.accelerator, "--trainer.devices", str(args.devices),
               "--trainer.strategy", args.strategy]
    cli = LightningCLI(Classifier, Blobs, args=["fit", "--config", path, *devices])
    expect(cli.model.hparams.note == "see lightning.pytorch.loggers.WandbLogger for the online runs",
           f"a string was rewritten: {cli.model.hparams.note!r}")
    names = [type(c).__name__ for c in cli.trainer.callbacks]
    expect("ModelSummary" in names, f"the ModelSummary callback is missing: {names}")
    expect(cli.trainer.current_epoch == 2, f"trained {cli.trainer.current_epoch} epochs")
    summary = ModelSummary(cli.model, max_depth=1)
    expect(summary.total_parameters == sum(p.numel() for p in cli.model.parameters()), str(summary))

    saved = os.path.join(cli.trainer.log_dir, "config.yaml")
    expect(os.path.isfile(saved), f"no saved configuration at {saved}")
    again = LightningCLI(Classifier, Blobs, args=["validate", "--config", saved, *devices],
                         save_config_callback=None)
    expect(again.model.hparams.hidden == 16, f"the saved configuration gave hidden={again.model.hparams.hidden}")
    ok("cli_yaml")


if __name__ == "__main__":
    main()
