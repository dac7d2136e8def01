"""(z6) The Transformer notebook of a university deep-learning course (phlippe/uvadlc_notebooks, MIT licence:
``docs/tutorial_notebooks/tutorial6/Transformers_and_MHAttention.ipynb``, its sequence-reversal task), re-written in
our own words with the features it uses: a learning-rate schedule written by the user as a subclass of torch's
``_LRScheduler`` (cosine with warm-up, ``get_lr`` overridden) returned as ``[optimizer], [{"scheduler": ...,
"interval": "step"}]`` and sized by ``max_iters = trainer.max_epochs * len(train_loader)`` computed before the
module exists; ``save_hyperparameters()``; a subclass adding ``_calculate_loss(batch, mode)`` logging
``{mode}_loss``/``{mode}_acc``; ``gradient_clip_val=5``; ``ModelCheckpoint(save_weights_only=True, mode="max",
monitor="val_acc")``; the logger's ``_default_hp_metric = None``; ``load_from_checkpoint`` of the best and
``trainer.test`` on the validation and the test loaders.

Stand-ins: a one-layer ``nn.TransformerEncoder`` for the notebook's own attention blocks, sequences of 8 numbers of 5
classes, 4 epochs. Only the imports point at accelkit.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F
from _cli import expect, ok, parse_args, report, trainer_kwargs
from torch import nn, optim
from torch.utils import data

import accelkit as L  # was: import lightning as L
from accelkit.callbacks import ModelCheckpoint  # was: from lightning.pytorch.callbacks import ModelCheckpoint


class ReverseDataset(data.Dataset):
    def __init__(self, num_categories, seq_len, size, seed):
        super().__init__()
        self.data = torch.randint(num_categories, size=(size, seq_len),
                                  generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return self.data.size(0)

    def __getitem__(self, idx):
        return self.data[idx], torch.flip(self.data[idx], dims=(0,))


class CosineWarmupScheduler(optim.lr_scheduler._LRScheduler):
    def __init__(self, optimizer, warmup, max_iters):
        self.warmup = warmup
        self.max_num_iters = max_iters
        super().__init__(optimizer)

    def get_lr(self):
        factor = self.get_lr_factor(epoch=self.last_epoch)
        return [base_lr * factor for base_lr in self.base_lrs]

    def get_lr_factor(self, epoch):
        factor = 0.5 * (1 + np.cos(np.pi * epoch / self.max_num_iters))
        if epoch <= self.warmup:
            factor *= epoch * 1.0 / self.warmup
        return factor


class TransformerPredictor(L.LightningModule):
    def __init__(self, input_dim, model_dim, num_classes, num_heads, num_layers, lr, warmup, max_iters, dropout=0.0):
        super().__init__()
        self.save_hyperparameters()
        self.input_net = nn.Linear(input_dim, model_dim)
        self.positions = nn.Parameter(torch.randn(1, 16, model_dim) / math.sqrt(model_dim))
        layer = nn.TransformerEncoderLayer(model_dim, num_heads, 2 * model_dim, dropout, batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.output_net = nn.Linear(model_dim, num_classes)

    def forward(self, x):
        x = self.input_net(x) + self.positions[:, : x.size(1)]
        return self.output_net(self.transformer(x))

    def configure_optimizers(self):
        optimizer = optim.Adam(self.parameters(), lr=self.hparams.lr)
        self.lr_scheduler = CosineWarmupScheduler(optimizer, warmup=self.hparams.warmup,
                                                  max_iters=self.hparams.max_iters)
        return [optimizer], [{"scheduler": self.lr_scheduler, "interval": "step"}]


class ReversePredictor(TransformerPredictor):
    def _calculate_loss(self, batch, mode="train"):
        inp_data, labels = batch
        inp_data = F.one_hot(inp_data, num_classes=self.hparams.num_classes).float()
        preds = self.forward(inp_data)
        loss = F.cross_entropy(preds.view(-1, preds.size(-1)), labels.view(-1))
        acc = (preds.argmax(dim=-1) == labels).float().mean()
        self.log(f"{mode}_loss", loss)
        self.log(f"{mode}_acc", acc)
        return loss, acc

    def training_step(self, batch, batch_idx):
        loss, _ = self._calculate_loss(batch, mode="train")
        return loss

    def validation_step(self, batch, batch_idx):
        self._calculate_loss(batch, mode="val")

    def test_step(self, batch, batch_idx):
        self._calculate_loss(batch, mode="test")


def main():
    args = parse_args(__doc__)
    L.seed_everything(42)
    train_loader = data.DataLoader(ReverseDataset(5, 8, 1024, 0), batch_size=64, shuffle=True, drop_last=True)
    val_loader = data.DataLoader(ReverseDataset(5, 8, 128, 1), batch_size=64)
    test_loader = data.DataLoader(ReverseDataset(5, 8, 128, 2), batch_size=64)
    trainer = L.Trainer(callbacks=[ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc")],
                        max_epochs=4, gradient_clip_val=5, enable_progress_bar=False, **trainer_kwargs(args))
    trainer.logger._default_hp_metric = None
    model = ReversePredictor(input_dim=5, model_dim=32, num_heads=2, num_classes=5, num_layers=1, dropout=0.0,
                             lr=5e-3, warmup=8, max_iters=trainer.max_epochs * len(train_loader))
    trainer.fit(model, train_loader, val_loader)
    steps = trainer.global_step
    rate = trainer.optimizers[0].param_groups[0]["lr"]
    expected = 5e-3 * model.lr_scheduler.get_lr_factor(steps)
    expect(math.isclose(rate, expected, rel_tol=1e-6), f"lr after {steps} steps: {rate}, the schedule says {expected}")
    expect(model.lr_scheduler.last_epoch == steps, f"scheduler stepped {model.lr_scheduler.last_epoch}, {steps} steps")
    model = ReversePredictor.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    val_result = trainer.test(model, dataloaders=val_loader, verbose=False)
    test_result = trainer.test(model, dataloaders=test_loader, verbose=False)
    result = {"test_acc": test_result[0]["test_acc"], "val_acc": val_result[0]["test_acc"]}
    report(result=result, test=test_result, steps=steps, lr=rate,
           best=trainer.checkpoint_callback.best_model_path.split("/")[-1])
    expect(result["val_acc"] > 0.35 and result["test_acc"] > 0.35, f"no better than chance (0.2): {result}")
    expect(set(test_result[0]) == {"test_loss", "test_acc"}, f"test results: {test_result}")
    ok("user_uvadlc_transformer")


if __name__ == "__main__":
    main()
