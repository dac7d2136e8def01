"""(d) The built-in callbacks: ``ModelCheckpoint(monitor="val_loss", save_top_k=2)``, ``EarlyStopping`` and
``LearningRateMonitor``, then ``trainer.test(ckpt_path="best")``.

The learning rate shrinks tenfold each epoch (``StepLR``), so the validation loss stops improving by more
than ``min_delta`` after a few epochs and early stopping ends the run well before ``max_epochs``. Written as
a Lightning user writes it; only the imports point at accelkit.
"""

import csv
import re
from pathlib import Path

import torch
from _cli import expect, ok, parse_args, read, trainer_kwargs, write
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import (
    Callback,  # was: from lightning.pytorch import Callback
    LightningModule,  # was: from lightning.pytorch import LightningModule
)
from accelkit.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint  # was: lightning.pytorch.callbacks
from accelkit.loggers import CSVLogger  # was: from lightning.pytorch.loggers import CSVLogger

MAX_EPOCHS = 20


def make_data(seed: int, n: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.3 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class Regressor(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y), sync_dist=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y), sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)]


class RecordOutcome(Callback):
    """Leaves, from inside the run, what the built-in callbacks decided."""

    def __init__(self, root: str):
        self.root = root
        self.val_losses = []

    def on_validation_epoch_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.val_losses.append(float(trainer.callback_metrics["val_loss"]))

    def on_train_end(self, trainer, pl_module):
        checkpoint, stopping = trainer.checkpoint_callback, trainer.early_stopping_callback
        write(self.root, "outcome", trainer.global_rank, {
            "current_epoch": trainer.current_epoch, "stopped_epoch": stopping.stopped_epoch,
            "best_model_path": checkpoint.best_model_path, "best_model_score": float(checkpoint.best_model_score),
            "best_k_models": {k: float(v) for k, v in checkpoint.best_k_models.items()},
            "val_losses": self.val_losses})


def main():
    args = parse_args(__doc__)
    L.seed_everything(3)
    train = DataLoader(make_data(0), batch_size=8, shuffle=True)
    val = DataLoader(make_data(1), batch_size=8)
    ckpt_dir = Path(args.root) / "ckpts"
    checkpoint = ModelCheckpoint(dirpath=ckpt_dir, filename="{epoch}-{val_loss:.4f}", monitor="val_loss",
                                 mode="min", save_top_k=2)
    stopping = EarlyStopping(monitor="val_loss", mode="min", patience=2, min_delta=1e-3)
    lr_monitor = LearningRateMonitor(logging_interval="epoch")
    trainer = L.Trainer(max_epochs=MAX_EPOCHS, enable_progress_bar=False, logger=CSVLogger(args.root),
                        callbacks=[checkpoint, stopping, lr_monitor, RecordOutcome(args.root)], **trainer_kwargs(args))
    trainer.fit(Regressor(), train, val)

    outcome = read(args.root, "outcome")
    expect(sorted(outcome) == list(range(args.devices)), f"on_train_end ran on ranks {sorted(outcome)}")
    run = outcome[0]
    for rank, other in outcome.items():  # ranks must agree on when to stop and what is best
        expect(other["current_epoch"] == run["current_epoch"], f"rank {rank} stopped at another epoch: {outcome}")
        expect(other["best_model_path"] == run["best_model_path"], f"rank {rank} disagrees on the best: {outcome}")
    losses = run["val_losses"]
    expect(2 < run["current_epoch"] < MAX_EPOCHS, f"early stopping did not end the run early: {run}")
    expect(run["stopped_epoch"] > 0, f"EarlyStopping.stopped_epoch not set: {run}")
    expect(len(losses) == run["current_epoch"], f"{len(losses)} validations for {run['current_epoch']} epochs")
    expect(abs(run["best_model_score"] - min(losses)) < 1e-6, f"best score {run['best_model_score']} != {min(losses)}")

    files = sorted(p.name for p in ckpt_dir.glob("*.ckpt"))
    expect(len(files) == 2, f"save_top_k=2 kept {files}")
    expect(all(re.fullmatch(r"epoch=\d+-val_loss=\d+\.\d{4}\.ckpt", f) for f in files), f"file names {files}")
    two_best = sorted(losses)[:2]
    kept = sorted(run["best_k_models"].values())
    expect(all(abs(a - b) < 1e-6 for a, b in zip(kept, two_best, strict=True)),
           f"best_k_models {kept} != two best {two_best}")
    expect(Path(run["best_model_path"]).name in files, f"best_model_path {run['best_model_path']} not kept")

    # the LearningRateMonitor's values reach the logger, one per epoch, shrinking with StepLR
    metrics_files = list(Path(args.root).rglob("metrics.csv"))
    expect(len(metrics_files) == 1, f"expected one metrics.csv, found {metrics_files}")
    with open(metrics_files[0]) as handle:
        lrs = [float(row["lr-SGD"]) for row in csv.DictReader(handle) if row.get("lr-SGD")]
    expect(len(lrs) == run["current_epoch"], f"lr-SGD logged {len(lrs)} times in {run['current_epoch']} epochs")
    expect(all(abs(b - a * 0.1) < 1e-9 for a, b in zip(lrs, lrs[1:], strict=False)) and abs(lrs[0] - 0.1) < 1e-9,
           f"lr {lrs}")

    # "best" is the checkpoint with the lowest val_loss: testing it on the validation data reproduces that score
    tested = trainer.test(dataloaders=val, ckpt_path="best")
    expect(abs(tested[0]["test_loss"] - run["best_model_score"]) < 1e-5,
           f"test(ckpt_path='best') gave {tested}, best val_loss {run['best_model_score']}")
    expect(Path(trainer.checkpoint_callback.best_model_path).name == Path(run["best_model_path"]).name,
           "the caller's ModelCheckpoint does not know the best path")
    ok("callbacks")


if __name__ == "__main__":
    main()
