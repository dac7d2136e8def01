"""(p) An optuna study of two trials with optuna-integration's ``PyTorchLightningPruningCallback``, as optuna's
``pytorch_lightning_simple.py`` example uses it (issue 22, item 3).

The callback is the library's, unchanged: it derives from ``lightning.pytorch.Callback``, so this script needs
``lightning``, ``optuna`` and ``optuna-integration`` installed (it says so and stops otherwise). The first trial
(learning rate 0.1) reports ``val_loss`` after each of its 3 epochs and completes; the second (learning rate 0)
reports a worse loss after epoch 0 and the median pruner prunes it. The study lives in an SQLite file: optuna
requires a database storage when the trials run under DDP, where the callback's ``check_pruned()`` after ``fit``
raises ``TrialPruned`` in the launching process. Only the imports of Lightning's names point at accelkit.
"""

import sys
from pathlib import Path

import torch
from _cli import expect, ok, parse_args, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule

try:
    import optuna
    from optuna_integration import PyTorchLightningPruningCallback
except ImportError as exc:  # the library is what this script is about
    sys.exit(f"this script needs optuna and optuna-integration (and lightning): {exc}")

EPOCHS = 3


def make_data(seed: int, n: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))


class Regressor(LightningModule):
    def __init__(self, lr):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.lr = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def objective(trial, args):
    lr = trial.suggest_float("lr", 0.0, 0.1)
    callback = PyTorchLightningPruningCallback(trial, monitor="val_loss")
    trainer = L.Trainer(max_epochs=EPOCHS, callbacks=[callback], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        **trainer_kwargs(args))
    trainer.fit(Regressor(lr), DataLoader(make_data(0), batch_size=16), DataLoader(make_data(1), batch_size=16))
    callback.check_pruned()
    return trainer.callback_metrics["val_loss"].item()


def main():
    args = parse_args(__doc__)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{Path(args.root) / 'study.db'}"
    study = optuna.create_study(storage=storage, pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    study.enqueue_trial({"lr": 0.1})
    study.enqueue_trial({"lr": 0.0})
    study.optimize(lambda trial: objective(trial, args), n_trials=2)

    first, second = study.trials
    expect(first.state == optuna.trial.TrialState.COMPLETE, f"first trial: {first.state}")
    expect(sorted(first.intermediate_values) == list(range(EPOCHS)), f"reported {first.intermediate_values}")
    values = [first.intermediate_values[e] for e in range(EPOCHS)]
    expect(values == sorted(values, reverse=True), f"val_loss did not fall: {values}")
    expect(abs(first.value - values[-1]) < 1e-6, f"objective {first.value} is not the last report {values[-1]}")
    expect(second.state == optuna.trial.TrialState.PRUNED, f"second trial: {second.state}")
    expect(sorted(second.intermediate_values) == [0], f"pruned trial reported {second.intermediate_values}")
    ok("optuna_pruning")


if __name__ == "__main__":
    main()
