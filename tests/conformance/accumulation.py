"""``GradientAccumulationScheduler(scheduling={...})`` as Lightning's docs write it ("from epoch 5, it starts
accumulating every 2 batches; here we have 4 instead of 5 because epoch (key) should be zero-indexed"), with a
second change of factor later.

What the docs promise, checked: each epoch the optimizer steps once per ``factor`` batches (the last batch of an
epoch ends its window), counted in ``on_before_optimizer_step`` in every process; the weights equal those of a
plain torch loop that accumulates the same batches the same way (on ``ddp_spawn``: each process's share of
the data, gradients averaged over the processes); ``trainer.accumulate_grad_batches`` follows the schedule; and
the scheduler refuses ``Trainer(accumulate_grad_batches=...)`` beside it. Only the imports point at accelkit.
"""

import copy
import math

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
from accelkit.callbacks import GradientAccumulationScheduler  # was: from lightning.pytorch.callbacks import ...

SAMPLES, BATCH, EPOCHS, LR = 48, 4, 7, 0.05
SCHEDULE = {4: 2, 6: 3}  # epochs 0-3: every batch; 4-5: every 2 batches; 6: every 3


def make_data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 3, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True) ** 2)


class Regressor(LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR)


class CountSteps(Callback):
    def __init__(self, root):
        self.root = root
        self.steps = {}
        self.factors = {}

    def on_train_epoch_start(self, trainer, pl_module):
        self.factors[trainer.current_epoch] = trainer.accumulate_grad_batches

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.steps[trainer.current_epoch] = self.steps.get(trainer.current_epoch, 0) + 1

    def on_train_end(self, trainer, pl_module):
        write(self.root, "steps", trainer.global_rank,
              {"steps": self.steps, "factors": self.factors, "global_step": trainer.global_step})


def factor_at(epoch):
    return max([f for e, f in SCHEDULE.items() if e <= epoch], default=1)


def reference(model, world):
    """Plain torch: the batches each process sees (its share, in order), the loss of a window's batches summed
    as loss / factor, averaged over the processes, one SGD step per window."""
    x, y = make_data().tensors
    shards = [list(range(SAMPLES))[rank::world] for rank in range(world)]
    batches = [[shard[i:i + BATCH] for i in range(0, len(shard), BATCH)] for shard in shards]
    per_epoch = len(batches[0])
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(EPOCHS):
        factor = factor_at(epoch)
        for index in range(per_epoch):
            loss = sum(F.mse_loss(model(x[batches[r][index]]), y[batches[r][index]]) for r in range(world))
            (loss / (factor * world)).backward()
            if (index + 1) % factor == 0 or index == per_epoch - 1:
                optimizer.step()
                optimizer.zero_grad()
    return model


def main():
    args = parse_args(__doc__)
    L.seed_everything(0)
    model = Regressor()
    start = copy.deepcopy(model)

    # from epoch 5 (index 4) on, accumulate every 2 batches; from epoch 7 (index 6), every 3
    accumulator = GradientAccumulationScheduler(scheduling=SCHEDULE)
    trainer = L.Trainer(max_epochs=EPOCHS, callbacks=[accumulator, CountSteps(args.root)], enable_progress_bar=False,
                        enable_checkpointing=False, logger=False, **trainer_kwargs(args))
    trainer.fit(model, DataLoader(make_data(), batch_size=BATCH))

    per_epoch = math.ceil(SAMPLES / args.devices / BATCH)
    wanted = {str(e): math.ceil(per_epoch / factor_at(e)) for e in range(EPOCHS)}
    records = read(args.root, "steps")
    expect(sorted(records) == list(range(args.devices)), f"on_train_end ran on ranks {sorted(records)}")
    for rank, record in records.items():
        expect(record["steps"] == wanted, f"rank {rank}: optimizer steps per epoch {record['steps']}, not {wanted}")
        expect(record["factors"] == {str(e): factor_at(e) for e in range(EPOCHS)}, f"factors {record['factors']}")
        expect(record["global_step"] == sum(wanted.values()), f"rank {rank}: global_step {record['global_step']}")

    expected = reference(start, args.devices)
    for (name, got), want in zip(model.cpu().named_parameters(), expected.parameters(), strict=True):
        expect(torch.allclose(got, want, atol=1e-5), f"{name}: the accumulated weights differ from plain torch's")

    # Trainer(accumulate_grad_batches=...) and the scheduler together are refused, with a sentence
    both = L.Trainer(max_epochs=1, accumulate_grad_batches=2, callbacks=[GradientAccumulationScheduler({1: 2})],
                     enable_progress_bar=False, enable_checkpointing=False, logger=False, **trainer_kwargs(args))
    try:
        both.fit(Regressor(), DataLoader(make_data(), batch_size=BATCH))
    except Exception as exc:  # a ConfigurationError (in a spawned worker: a WorkerError carrying it)
        expect("both set the accumulation" in str(exc), f"unexpected refusal: {exc}")
    else:
        expect(False, "Trainer(accumulate_grad_batches=2) beside a GradientAccumulationScheduler was accepted")
    ok("accumulation")


if __name__ == "__main__":
    main()
