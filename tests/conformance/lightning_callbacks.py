"""(q) Callbacks written for Lightning, used as a library's (issue 22, item 3): Lightning's own ``EarlyStopping`` and
``BackboneFinetuning`` classes stand here for the callbacks libraries ship (they derive from
``lightning.pytorch.Callback`` and read only the Trainer's and Module's public attributes).

* ``EarlyStopping(monitor="val_loss", patience=2)`` stops a fit whose ``val_loss`` never improves (a learning rate
  of 0) after epoch 2, on every rank (it agrees across processes through ``strategy.reduce_boolean_decision``).
* ``BackboneFinetuning(unfreeze_backbone_at_epoch=2)`` keeps ``backbone`` frozen for two epochs, then adds it to
  the optimizer as a second parameter group, whose learning rate it sets.

The library's classes are imported as they are (this script needs ``lightning`` installed); only the imports of
the names a Lightning user writes point at accelkit.
"""

import sys

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import (
    Callback,  # was: from lightning.pytorch import Callback
    LightningModule,  # was: from lightning.pytorch import LightningModule
)

try:
    from lightning.pytorch.callbacks import BackboneFinetuning, EarlyStopping  # the library's callbacks
except ImportError as exc:
    sys.exit(f"this script needs lightning installed (its callbacks are the library under test): {exc}")


def make_data(seed, n=64):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))


class WithBackbone(LightningModule):
    def __init__(self, lr):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 1)
        self.lr = lr

    def forward(self, x):
        return self.head(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=self.lr)


class Watch(Callback):
    """Records, at each training epoch's start, whether the backbone is frozen and how many parameter groups the
    optimizer has (and the epoch where each rank's fit ended)."""

    def __init__(self, root, tag):
        self.root, self.tag = root, tag

    def on_train_epoch_start(self, trainer, pl_module):
        frozen = not any(p.requires_grad for p in pl_module.backbone.parameters())
        groups = len(trainer.optimizers[0].param_groups)
        append(self.root, self.tag, trainer.global_rank, [trainer.current_epoch, frozen, groups])


def fit(args, lr, epochs, callback, tag):
    trainer = L.Trainer(max_epochs=epochs, callbacks=[callback, Watch(args.root, tag)], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, **trainer_kwargs(args))
    trainer.fit(WithBackbone(lr), DataLoader(make_data(0), batch_size=8), DataLoader(make_data(1), batch_size=8))
    return trainer


def main():
    args = parse_args(__doc__)
    stopped = fit(args, 0.0, 10, EarlyStopping(monitor="val_loss", patience=2), "stop")
    expect(stopped.current_epoch == 3, f"EarlyStopping ended the fit at epoch {stopped.current_epoch}, not 3")
    epochs = read(args.root, "stop")
    expect(sorted(epochs) == list(range(args.devices)), f"ranks that trained: {sorted(epochs)}")
    expect(all([e for e, _, _ in seen] == [0, 1, 2] for seen in epochs.values()), f"epochs per rank: {epochs}")

    fit(args, 0.05, 4, BackboneFinetuning(unfreeze_backbone_at_epoch=2), "finetune")
    for rank, seen in read(args.root, "finetune").items():
        expect([frozen for _, frozen, _ in seen] == [True, True, False, False], f"rank {rank} frozen: {seen}")
        expect([groups for _, _, groups in seen] == [1, 1, 2, 2], f"rank {rank} parameter groups: {seen}")
    ok("lightning_callbacks")


if __name__ == "__main__":
    main()
