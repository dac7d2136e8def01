"""(o) ``OnExceptionCheckpoint``, ``LambdaCallback`` and the ``ModelSummary`` callback, as Lightning's docs use
them.

* ``ModelSummary(max_depth=2)`` replaces the Trainer's default summary; a subclass overriding ``summarize``
  receives the layer table (down to the nested layers) on the global-zero process only.
* ``LambdaCallback(on_train_epoch_end=...)`` runs its function at every epoch end on every rank.
* ``OnExceptionCheckpoint(dirpath)``: a run that raises at step 5 leaves ``on_exception.ckpt`` holding step 5;
  fitting again from it continues at step 5, and the completed fit removes it. (Lightning 2.6.6 passes this
  script on one process; under ``ddp_spawn`` it writes the checkpoint from the launching process, which holds
  step 0, so the check of the saved step fails there. accelkit writes it from the workers, where the state is.)

Written as a Lightning user writes it; only the imports point at accelkit.
"""

from pathlib import Path

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule
from accelkit.callbacks import LambdaCallback, ModelSummary, OnExceptionCheckpoint  # was: lightning.pytorch.callbacks

FAIL_AT, MAX_STEPS = 5, 8


class Net(LightningModule):
    def __init__(self, fail_at=None):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.head = nn.Linear(4, 1)
        self.fail_at = fail_at

    def training_step(self, batch, batch_idx):
        if self.global_step == self.fail_at:
            raise RuntimeError(f"deliberate failure at step {self.global_step}")
        x, y = batch
        return F.mse_loss(self.head(self.encoder(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class RecordingSummary(ModelSummary):
    """Keeps the table instead of printing it (overriding ``summarize``, the presentation hook)."""

    def __init__(self, root, **kwargs):
        super().__init__(**kwargs)
        self.root, self.rank = root, None

    def on_fit_start(self, trainer, pl_module):
        self.rank = trainer.global_rank
        super().on_fit_start(trainer, pl_module)

    def summarize(self, summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                  **summarize_kwargs):
        append(self.root, "summary", self.rank, {"names": dict(summary_data)["Name"], "total": total_parameters})


class EpochEnds:
    """A picklable function object (spawned workers get a copy): records each training epoch end."""

    def __init__(self, root):
        self.root = root

    def __call__(self, trainer, pl_module):
        append(self.root, "lambda", trainer.global_rank, trainer.current_epoch)


def main():
    args = parse_args(__doc__)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8, 3, generator=generator), torch.randn(8, 1, generator=generator))
    loader = DataLoader(data, batch_size=2)  # 4 batches per epoch on one device, 2 per rank on two
    crash_dir = Path(args.root) / "crash"
    summary = RecordingSummary(args.root, max_depth=2)
    on_exception = OnExceptionCheckpoint(dirpath=crash_dir)
    lambda_cb = LambdaCallback(on_train_epoch_end=EpochEnds(args.root))
    trainer = L.Trainer(max_steps=MAX_STEPS, callbacks=[summary, on_exception, lambda_cb], logger=False,
                        enable_progress_bar=False, **trainer_kwargs(args))
    expect([c for c in trainer.callbacks if isinstance(c, ModelSummary)] == [summary],
           "the ModelSummary callback did not replace the default one")
    try:
        trainer.fit(Net(fail_at=FAIL_AT), loader)
    except Exception as exc:  # the workers' error reaches the caller (wrapped when the workers are spawned)
        expect("deliberate failure at step 5" in str(exc), f"unexpected error: {exc!r}")
    else:
        raise AssertionError("the failing fit did not raise")
    saved = torch.load(on_exception.ckpt_path, weights_only=True)
    expect(saved["global_step"] == FAIL_AT, f"on_exception.ckpt holds step {saved['global_step']}, not {FAIL_AT}")

    summaries = read(args.root, "summary")
    expect(list(summaries) == [0] and len(summaries[0]) == 1, f"summaries printed by ranks {summaries}")
    expect(summaries[0][0]["names"] == ["encoder", "encoder.0", "encoder.1", "head"], f"{summaries[0][0]}")
    expect(summaries[0][0]["total"] == 3 * 4 + 4 + 4 + 1, f"total params {summaries[0][0]['total']}")

    epochs_per_rank = read(args.root, "lambda")
    expect(sorted(epochs_per_rank) == list(range(args.devices)), f"lambda ran on ranks {sorted(epochs_per_rank)}")
    steps_per_epoch = 4 // args.devices
    expect(all(epochs == list(range(FAIL_AT // steps_per_epoch)) for epochs in epochs_per_rank.values()),
           f"epoch ends before the failure: {epochs_per_rank}")

    resumed = L.Trainer(max_steps=MAX_STEPS, callbacks=[OnExceptionCheckpoint(dirpath=crash_dir)], logger=False,
                        enable_progress_bar=False, enable_model_summary=False, **trainer_kwargs(args))
    resumed.fit(Net(), loader, ckpt_path=on_exception.ckpt_path)
    expect(resumed.global_step == MAX_STEPS, f"the resumed fit ended at step {resumed.global_step}")
    expect(not Path(on_exception.ckpt_path).exists(), "the completed fit left the stale on_exception.ckpt")
    ok("more_callbacks")


if __name__ == "__main__":
    main()
