"""(j) Several validation (and test) dataloaders: ``validation_step(batch, batch_idx, dataloader_idx=0)``,
per-loader metric names ``<name>/dataloader_idx_<i>``, and one result dict per loader.

Loader 0 holds clean targets, loader 1 noisy ones (and is half as long), so their losses differ. Written as a
Lightning user writes it; only the imports point at accelkit.
"""

import math

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule

BATCH = 8
SIZES = (32, 16)


def regression(n: int, noise: float, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator)
    y = x @ torch.tensor([[1.0], [2.0], [-1.0]]) + noise * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class TwoLoaderModel(LightningModule):
    def __init__(self, root: str):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.root = root

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def val_dataloader(self):
        return [DataLoader(regression(SIZES[0], 0.0, 1), batch_size=BATCH),
                DataLoader(regression(SIZES[1], 3.0, 2), batch_size=BATCH)]

    def test_dataloader(self):
        return self.val_dataloader()

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        append(self.root, "val_batch_start", self.global_rank, [dataloader_idx, batch_idx])

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        append(self.root, "val_step", self.global_rank, [dataloader_idx, batch_idx, self.trainer.sanity_checking])
        self.log("val_loss", F.mse_loss(self(x), y), sync_dist=True)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    args = parse_args(__doc__)
    L.seed_everything(8)
    train = DataLoader(regression(64, 0.0, 0), batch_size=BATCH, shuffle=True)
    model = TwoLoaderModel(args.root)
    trainer = L.Trainer(max_epochs=2, num_sanity_val_steps=0, enable_progress_bar=False, enable_checkpointing=False,
                        **trainer_kwargs(args))
    trainer.fit(model, train)

    keys = ["val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"]
    for key in keys:
        expect(key in trainer.callback_metrics, f"{key} missing from callback_metrics {list(trainer.callback_metrics)}")
    expect(trainer.callback_metrics[keys[1]] > trainer.callback_metrics[keys[0]], "noisy loader not the worse")

    world = args.devices
    batches = [math.ceil(size / world / BATCH) for size in SIZES]
    expected = [[i, b] for _ in range(2) for i in range(2) for b in range(batches[i])]  # 2 epochs, loader by loader
    steps, starts = read(args.root, "val_step"), read(args.root, "val_batch_start")
    expect(sorted(steps) == list(range(world)), f"validation ran on ranks {sorted(steps)}")
    for rank in range(world):
        expect([s[:2] for s in steps[rank]] == expected, f"rank {rank}: (dataloader_idx, batch_idx) {steps[rank]}")
        expect(starts[rank] == expected, f"rank {rank}: on_validation_batch_start saw {starts[rank]}")

    validated = trainer.validate(model)
    expect(len(validated) == 2, f"validate returned {len(validated)} dicts for 2 loaders: {validated}")
    expect(list(validated[0]) == [keys[0]] and list(validated[1]) == [keys[1]], f"validate keys {validated}")
    tested = trainer.test(model)
    expect([list(t) for t in tested] == [["test_loss/dataloader_idx_0"], ["test_loss/dataloader_idx_1"]],
           f"test returned {tested}")
    expect(abs(tested[0]["test_loss/dataloader_idx_0"] - validated[0][keys[0]]) < 1e-6, "test/validate differ")
    ok("multi_val")


if __name__ == "__main__":
    main()
