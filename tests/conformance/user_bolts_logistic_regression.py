"""(z3) The logistic regression of Lightning's model zoo (Lightning-Universe/lightning-bolts, Apache-2.0:
``src/pl_bolts/models/regression/logistic_regression.py`` and its ``SklearnDataModule``), re-written in our own words
with the features it uses: ``save_hyperparameters()`` with the optimizer *class* among the arguments (kept on the
module and used by ``configure_optimizers``), L1 and L2 penalties added to a summed cross-entropy, torchmetrics'
functional ``accuracy``, validation and test outputs gathered by the steps and reduced in
``on_validation_epoch_end``/``on_test_epoch_end`` into ``self.log_dict``, a DataModule built from NumPy arrays
(scikit-learn's iris), ``trainer.test`` returning the logged values.

Stand-ins: iris is scikit-learn's bundled copy (no download), 30 epochs. Only the imports point at accelkit.
"""

import numpy as np
import torch
from _cli import expect, ok, parse_args, report, trainer_kwargs
from sklearn.datasets import load_iris
from torch import nn
from torch.nn import functional as F
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.functional import accuracy

import accelkit as L  # was: import lightning as L


class LogisticRegression(L.LightningModule):
    def __init__(self, input_dim, num_classes, bias=True, learning_rate=1e-4, optimizer=Adam, l1_strength=0.0,
                 l2_strength=0.0):
        super().__init__()
        self.save_hyperparameters()
        self.optimizer = optimizer
        self.linear = nn.Linear(self.hparams.input_dim, self.hparams.num_classes, bias=bias)
        self.val_outputs, self.test_outputs = [], []

    def forward(self, x):
        return F.softmax(self.linear(x), dim=-1)

    def _loss(self, batch):
        x, y = batch
        x = x.view(x.size(0), -1)
        logits = self.linear(x)
        loss = F.cross_entropy(logits, y, reduction="sum")
        if self.hparams.l1_strength > 0:
            loss = loss + self.hparams.l1_strength * self.linear.weight.abs().sum()
        if self.hparams.l2_strength > 0:
            loss = loss + self.hparams.l2_strength * self.linear.weight.pow(2).sum()
        acc = accuracy(logits.argmax(-1), y, task="multiclass", num_classes=self.hparams.num_classes)
        return loss / x.size(0), acc

    def training_step(self, batch, batch_idx):
        loss, acc = self._loss(batch)
        self.log_dict({"train_ce_loss": loss, "train_acc": acc})
        return loss

    def validation_step(self, batch, batch_idx):
        self.val_outputs.append(self._loss(batch))

    def on_validation_epoch_end(self):
        losses, accs = zip(*self.val_outputs, strict=True)
        self.log_dict({"val_loss": torch.stack(losses).mean(), "val_acc": torch.stack(accs).mean()}, prog_bar=True)
        self.val_outputs.clear()

    def test_step(self, batch, batch_idx):
        self.test_outputs.append(self._loss(batch))

    def on_test_epoch_end(self):
        losses, accs = zip(*self.test_outputs, strict=True)
        self.log_dict({"test_ce_loss": torch.stack(losses).mean(), "test_acc": torch.stack(accs).mean()})
        self.test_outputs.clear()

    def configure_optimizers(self):
        return self.optimizer(self.parameters(), lr=self.hparams.learning_rate)


class SklearnDataModule(L.LightningDataModule):
    def __init__(self, X, y, val_split=0.2, test_split=0.1, batch_size=16, random_state=1234):
        super().__init__()
        rng = np.random.RandomState(random_state)
        order = rng.permutation(len(X))
        X, y = X[order], y[order]
        n_val, n_test = int(len(X) * val_split), int(len(X) * test_split)
        parts = np.split(np.arange(len(X)), [len(X) - n_val - n_test, len(X) - n_test])
        self.train, self.val, self.test = (TensorDataset(torch.tensor(X[p], dtype=torch.float32),
                                                         torch.tensor(y[p])) for p in parts)
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test, batch_size=self.batch_size)


def main():
    args = parse_args(__doc__)
    L.seed_everything(1234)
    X, y = load_iris(return_X_y=True)
    datamodule = SklearnDataModule(X, y)
    model = LogisticRegression(input_dim=4, num_classes=3, learning_rate=0.05, l1_strength=1e-3, l2_strength=1e-3)
    trainer = L.Trainer(max_epochs=30, enable_progress_bar=False, logger=False, enable_checkpointing=False,
                        **trainer_kwargs(args))
    trainer.fit(model, datamodule=datamodule)
    fitted = {k: float(v) for k, v in trainer.callback_metrics.items()}
    results = trainer.test(model, datamodule=datamodule)
    report(fitted=fitted, results=results, steps=trainer.global_step, epoch=trainer.current_epoch)
    expect({"train_ce_loss", "train_acc", "val_loss", "val_acc"} <= set(fitted), f"callback_metrics: {fitted}")
    expect(fitted["val_acc"] > 0.8, f"iris was not learnt: {fitted}")
    expect(len(results) == 1 and set(results[0]) == {"test_ce_loss", "test_acc"}, f"test results: {results}")
    expect(model.hparams.optimizer is Adam and model.hparams.learning_rate == 0.05, f"hparams: {dict(model.hparams)}")
    expect(isinstance(trainer.optimizers[0], Adam), f"optimizers: {trainer.optimizers}")
    ok("user_bolts_logistic_regression")


if __name__ == "__main__":
    main()
