"""(f) Learning-rate schedulers in the ``configure_optimizers`` dict form: ``ReduceLROnPlateau`` with a
``"monitor"``, and a per-step scheduler (``"interval": "step"``).

Written as a Lightning user writes it; only the imports point at accelkit.
"""

import math

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs, write
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule

SAMPLES, BATCH, BASE_LR = 64, 8, 0.1


def dataset(seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, 3, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class Base(LightningModule):
    def __init__(self, root: str):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.root = root

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        append(self.root, self.tag, self.global_rank,
               {"step": self.global_step, "lr": self.optimizers().param_groups[0]["lr"]})
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y), sync_dist=True)

    def on_train_end(self):
        configs = self.trainer.lr_scheduler_configs
        write(self.root, self.tag + "_end", self.global_rank, {
            "lr": self.optimizers().param_groups[0]["lr"],
            "configs": [{"interval": c.interval, "frequency": c.frequency, "monitor": c.monitor} for c in configs],
            "scheduler_type": type(self.lr_schedulers()).__name__})


class PlateauModel(Base):
    tag = "plateau"

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=BASE_LR)
        # threshold so large that no epoch counts as an improvement: the LR halves after every epoch but the
        # first, which proves the scheduler receives the monitored value each epoch
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0,
                                                             threshold=1e9, threshold_mode="abs")
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss", "interval": "epoch", "frequency": 1}}


class WarmStepModel(Base):
    tag = "per_step"

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=BASE_LR)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1.0 + step))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main():
    args = parse_args(__doc__)
    L.seed_everything(5)
    train = DataLoader(dataset(0), batch_size=BATCH, shuffle=True)
    val = DataLoader(dataset(1), batch_size=BATCH)
    epochs, world = 3, args.devices
    steps_per_epoch = math.ceil(SAMPLES / world / BATCH)

    trainer = L.Trainer(max_epochs=epochs, enable_progress_bar=False, enable_checkpointing=False,
                        **trainer_kwargs(args))
    trainer.fit(PlateauModel(args.root), train, val)
    ends = read(args.root, "plateau_end")
    expect(sorted(ends) == list(range(world)), f"on_train_end ran on ranks {sorted(ends)}")
    for rank, end in ends.items():
        expect(end["configs"] == [{"interval": "epoch", "frequency": 1, "monitor": "val_loss"}], f"{end}")
        expect(end["scheduler_type"] == "ReduceLROnPlateau", f"lr_schedulers() gave {end['scheduler_type']}")
        expect(abs(end["lr"] - BASE_LR * 0.5 ** (epochs - 1)) < 1e-12, f"rank {rank}: final lr {end['lr']}")
    per_epoch = [sorted({round(s["lr"], 12) for s in read(args.root, "plateau")[0]
                         if s["step"] // steps_per_epoch == e}) for e in range(epochs)]
    expect(per_epoch == [[BASE_LR * 0.5 ** max(0, e - 1)] for e in range(epochs)], f"lr by epoch {per_epoch}")

    trainer = L.Trainer(max_epochs=2, enable_progress_bar=False, enable_checkpointing=False, **trainer_kwargs(args))
    trainer.fit(WarmStepModel(args.root), train, val)
    for rank, steps in read(args.root, "per_step").items():
        expect(len(steps) == 2 * steps_per_epoch, f"rank {rank}: {len(steps)} training steps")
        for seen in steps:
            want = BASE_LR / (1 + seen["step"])
            expect(abs(seen["lr"] - want) < 1e-9, f"rank {rank}: lr {seen['lr']} at step {seen['step']}, want {want}")
    for end in read(args.root, "per_step_end").values():
        expect(end["configs"] == [{"interval": "step", "frequency": 1, "monitor": None}], f"{end}")
    ok("schedulers")


if __name__ == "__main__":
    main()
