"""(a) The minimal "boring" module: fit, then validate / test / predict on the same Trainer.

Written as a Lightning user writes it; only the imports point at accelkit.
"""

import math
import os

import torch
from _cli import expect, ok, parse_args, read, trainer_kwargs, write
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import accelkit as L  # was: import lightning as L

FEATURES, SAMPLES, BATCH, EPOCHS = 32, 64, 8, 3


class RandomDataset(Dataset):
    """Random inputs with a fixed linear target, the same on every process."""

    def __init__(self, size: int, length: int, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(length, size, generator=generator)
        weight = torch.randn(size, 2, generator=torch.Generator().manual_seed(1))
        self.y = self.x @ weight

    def __getitem__(self, index):
        return self.x[index], self.y[index]

    def __len__(self):
        return len(self.x)


class BoringModel(L.LightningModule):
    def __init__(self, root: str):
        super().__init__()
        self.layer = nn.Linear(FEATURES, 2)
        self.root = root
        self.training_steps = 0

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.training_steps += 1
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y), sync_dist=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y), sync_dist=True)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        x, _ = batch
        return self(x)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_end(self):
        write(self.root, "train_end", self.global_rank, {
            "training_steps": self.training_steps, "global_step": self.trainer.global_step,
            "current_epoch": self.trainer.current_epoch, "world_size": self.trainer.world_size,
            "device": str(self.device)})


def main():
    args = parse_args(__doc__)
    L.seed_everything(42)
    loader = DataLoader(RandomDataset(FEATURES, SAMPLES), batch_size=BATCH)
    model = BoringModel(args.root)
    trainer = L.Trainer(max_epochs=EPOCHS, enable_progress_bar=False, **trainer_kwargs(args))

    before = trainer.validate(model, dataloaders=loader)
    trainer.fit(model, train_dataloaders=loader, val_dataloaders=loader)
    for name in ("train_loss", "val_loss"):  # the last step's train_loss, the last validation's val_loss
        expect(name in trainer.callback_metrics, f"{name} missing from callback_metrics {trainer.callback_metrics}")
        expect(isinstance(trainer.callback_metrics[name], torch.Tensor), f"callback_metrics[{name!r}] not a tensor")
    after = trainer.validate(model, dataloaders=loader)
    tested = trainer.test(model, dataloaders=loader)
    # callback_metrics hold the last run's metrics (Lightning resets them when each run starts: after predict()
    # they are empty again)
    expect(isinstance(trainer.callback_metrics.get("test_loss"), torch.Tensor), "test_loss not in callback_metrics")
    predictions = trainer.predict(model, dataloaders=loader)
    expect(trainer.callback_metrics == {}, f"predict() kept metrics of earlier runs: {trainer.callback_metrics}")

    expect(isinstance(before, list) and len(before) == 1 and "val_loss" in before[0], f"validate returned {before}")
    expect(after[0]["val_loss"] < 0.5 * before[0]["val_loss"], f"val loss did not fall: {before} -> {after}")
    expect(abs(tested[0]["test_loss"] - after[0]["val_loss"]) < 1e-4, f"test {tested} != validate {after}")

    ends = read(args.root, "train_end")
    world = args.devices
    expect(sorted(ends) == list(range(world)), f"on_train_end ran on ranks {sorted(ends)}, expected {world}")
    steps = EPOCHS * math.ceil(SAMPLES / world / BATCH)
    for rank, end in ends.items():
        expect(end["world_size"] == world, f"rank {rank}: world_size {end['world_size']}")
        expect(end["training_steps"] == steps, f"rank {rank}: {end['training_steps']} training steps, not {steps}")
        expect(end["global_step"] == steps, f"rank {rank}: global_step {end['global_step']}, not {steps}")
        expect(end["current_epoch"] == EPOCHS, f"rank {rank}: current_epoch {end['current_epoch']} at train end")

    rows = torch.cat(predictions)
    expect(rows.shape == (SAMPLES // world, 2), f"predictions of shape {tuple(rows.shape)}")
    best = trainer.checkpoint_callback.best_model_path
    expect(bool(best) and os.path.isfile(best), f"default checkpoint missing: {best!r}")
    ok("boring")


if __name__ == "__main__":
    main()
