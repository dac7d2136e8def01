"""(h) A learning-rate warm-up written in an ``optimizer_step`` override (and an ``optimizer_zero_grad``
override), the recipe of Lightning's optimization docs.

The override must be the one that steps: the closure it receives runs ``training_step`` and the backward
pass, the learning rate it sets is the one used, and the loss falls. Written as a Lightning user writes it;
only the imports point at accelkit.
"""

import math

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule

SAMPLES, BATCH, EPOCHS, WARMUP, LR = 96, 8, 3, 10, 0.05


class WarmupModel(LightningModule):
    def __init__(self, root: str, learning_rate: float = LR, warmup_steps: int = WARMUP):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.root, self.learning_rate, self.warmup_steps = root, learning_rate, warmup_steps
        self.calls = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        self.calls.append("training_step")
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.learning_rate)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        # linear warm-up over the first steps
        scale = min(1.0, float(self.trainer.global_step + 1) / self.warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = scale * self.learning_rate
        self.calls.append("optimizer_step")
        optimizer.step(closure=optimizer_closure)
        append(self.root, "steps", self.global_rank, {"epoch": epoch, "batch_idx": batch_idx,
                                                      "global_step": self.trainer.global_step,
                                                      "lr": optimizer.param_groups[0]["lr"]})

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.calls.append("optimizer_zero_grad")
        optimizer.zero_grad(set_to_none=True)

    def on_train_epoch_end(self):
        append(self.root, "epoch_loss", self.global_rank,
               float(self.trainer.callback_metrics["train_loss"]))

    def on_train_end(self):
        append(self.root, "calls", self.global_rank, self.calls)


def main():
    args = parse_args(__doc__)
    L.seed_everything(9)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 4, generator=generator)
    y = x @ torch.tensor([[2.0], [-1.0], [0.5], [1.5]])
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH)
    trainer = L.Trainer(max_epochs=EPOCHS, enable_progress_bar=False, enable_checkpointing=False,
                        **trainer_kwargs(args))
    trainer.fit(WarmupModel(args.root), loader)

    world = args.devices
    per_epoch = math.ceil(SAMPLES / world / BATCH)
    steps, calls, losses = read(args.root, "steps"), read(args.root, "calls"), read(args.root, "epoch_loss")
    expect(sorted(steps) == list(range(world)), f"optimizer_step override ran on ranks {sorted(steps)}")
    for rank in range(world):
        expect(len(steps[rank]) == EPOCHS * per_epoch, f"rank {rank}: {len(steps[rank])} optimizer_step calls")
        for n, step in enumerate(steps[rank]):
            want = min(1.0, (n + 1) / WARMUP) * LR
            expect(abs(step["lr"] - want) < 1e-12, f"rank {rank}: lr {step['lr']} at step {n}, want {want}")
            expect((step["epoch"], step["batch_idx"]) == divmod(n, per_epoch), f"rank {rank}: step {n} is {step}")
            # Lightning counts the step once optimizer_step returns: inside the hook it is still n
            expect(step["global_step"] == n, f"rank {rank}: global_step {step['global_step']} in step {n}")
        # the closure runs training_step inside optimizer_step; zero_grad comes from the override
        order = calls[rank][0]
        expect(order[:3] == ["optimizer_step", "training_step", "optimizer_zero_grad"] or
               order[:3] == ["optimizer_step", "optimizer_zero_grad", "training_step"],
               f"rank {rank}: call order {order[:6]}")
        expect(order.count("training_step") == EPOCHS * per_epoch, f"rank {rank}: training_step count")
        expect(order.count("optimizer_zero_grad") == EPOCHS * per_epoch, f"rank {rank}: zero_grad count")
        expect(losses[rank][-1] < 0.5 * losses[rank][0], f"rank {rank}: loss did not fall: {losses[rank]}")
    ok("warmup")


if __name__ == "__main__":
    main()
