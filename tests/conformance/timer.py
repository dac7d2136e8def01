"""(n) ``Timer(duration=...)`` ends training after the batch at which the training time reaches the duration,
and reports the time of each stage (``time_elapsed("train")``, ``("validate")``, ``time_remaining()``).

Each training step sleeps a little, so the duration is reached after some tens of steps. What is checked is the
step count, against the Timer's own readings (never a wall-clock threshold, which breaks under load): a callback
before the Timer reads the elapsed time just before the Timer decides at each batch end, one after it reads it
just after. At the step where training stopped the time had reached the duration, and at the step before it had
not. In a distributed run the global-zero process decides and every rank stops at the same step. Written as a
Lightning user writes it; only the imports point at accelkit.
"""

import time

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
from accelkit.callbacks import Timer  # was: from lightning.pytorch.callbacks import Timer

DURATION_S, STEP_S, SAMPLES, MAX_EPOCHS, VAL_EVERY = 1, 0.04, 64, 10, 8


class SlowModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(STEP_S)
        x, y = batch
        return F.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        time.sleep(STEP_S)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class ReadTimer(Callback):
    """Reads the Timer's elapsed training time at every training batch end."""

    def __init__(self, root, timer, tag):
        self.root, self.timer, self.tag = root, timer, tag
        self.readings = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.readings.append([trainer.global_step, self.timer.time_elapsed("train"), trainer.should_stop])

    def on_fit_end(self, trainer, pl_module):
        write(self.root, self.tag, trainer.global_rank, {
            "readings": self.readings, "global_step": trainer.global_step,
            "validate": self.timer.time_elapsed("validate"), "remaining": self.timer.time_remaining()})


def main():
    args = parse_args(__doc__)
    data = TensorDataset(torch.randn(SAMPLES, 2, generator=torch.Generator().manual_seed(0)), torch.zeros(SAMPLES, 1))
    timer = Timer(duration=dict(seconds=DURATION_S))  # "00:00:00:01" or timedelta(seconds=1) mean the same
    before, after = ReadTimer(args.root, timer, "before"), ReadTimer(args.root, timer, "after")
    trainer = L.Trainer(max_epochs=MAX_EPOCHS, callbacks=[before, timer, after], val_check_interval=VAL_EVERY,
                        limit_val_batches=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        **trainer_kwargs(args))
    trainer.fit(SlowModel(), DataLoader(data, batch_size=1), DataLoader(data, batch_size=1))

    runs_before, runs_after = read(args.root, "before"), read(args.root, "after")
    expect(sorted(runs_after) == list(range(args.devices)), f"records from ranks {sorted(runs_after)}")
    steps = {rank: run["global_step"] for rank, run in runs_after.items()}
    expect(len(set(steps.values())) == 1, f"the ranks stopped at different steps: {steps}")
    stopped = steps[0]
    possible = MAX_EPOCHS * SAMPLES // args.devices
    expect(0 < stopped < possible, f"training ran {stopped} of {possible} steps: the Timer did not stop it")

    # global zero decides: its readings show the limit reached at the last step and not at the one before
    after0, before0 = runs_after[0]["readings"], runs_before[0]["readings"]
    expect(after0[-1][0] == stopped and after0[-1][2], f"the last batch end did not request the stop: {after0[-1]}")
    expect(after0[-1][1] >= DURATION_S, f"stopped at step {stopped} after only {after0[-1][1]:.3f} s")
    if stopped > 1:
        step, elapsed, _ = before0[-2]
        expect(step == stopped - 1 and elapsed < DURATION_S,
               f"the duration was already reached at step {step} ({elapsed:.3f} s) yet training went on")
    expect(not any(flag for _, _, flag in after0[:-1]), "a stop was requested before the last step")
    expect(runs_after[0]["remaining"] <= 0, f"time_remaining() is {runs_after[0]['remaining']} after the stop")
    if stopped >= VAL_EVERY:  # validation ran
        expect(runs_after[0]["validate"] > 0, "time_elapsed('validate') is 0 although validation ran")
    ok("timer")


if __name__ == "__main__":
    main()
