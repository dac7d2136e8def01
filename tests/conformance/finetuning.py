"""Finetuning callbacks, as Lightning's docs write them: ``BackboneFinetuning(unfreeze_backbone_at_epoch,
lambda_func)`` on a module with a ``backbone``, and the docs' own ``BaseFinetuning`` subclass
(``FeatureExtractorFreezeUnfreeze``: ``freeze`` in ``freeze_before_training``, ``unfreeze_and_add_param_group``
in ``finetune_function``); the optimizer is built over ``filter(lambda p: p.requires_grad, ...)``.

What the docs promise, checked: the optimizer gains a parameter group at the milestone (and not before), the
backbone's learning rate starts at a tenth of the model's and grows by ``lambda_func`` each epoch, the frozen
backbone does not move before the milestone and trains after it, and a fit resumed from the checkpoint of an
epoch after the milestone continues with the grown groups: it ends with the weights of the uninterrupted run.
On ``ddp_spawn`` every process also ends with the same weights (the unfrozen backbone's gradients are averaged
over the processes). Only the imports point at accelkit.
"""

from pathlib import Path

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
from accelkit.callbacks import BackboneFinetuning, BaseFinetuning, ModelCheckpoint  # was: lightning.pytorch.callbacks

EPOCHS, MILESTONE, LR = 4, 1, 0.1


def make_data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 6, generator=generator)
    return TensorDataset(x, torch.tanh(x @ torch.randn(6, 1, generator=generator)))


class TransferModel(LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(7)  # both fits start from the same weights
        self.backbone = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU())
        self.classifier = nn.Linear(8, 1)

    def forward(self, x):
        return self.classifier(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        # Make sure to filter the parameters based on `requires_grad`
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=LR, momentum=0.9)


class FeatureExtractorFreezeUnfreeze(BaseFinetuning):
    def __init__(self, unfreeze_at_epoch=10):
        super().__init__()
        self._unfreeze_at_epoch = unfreeze_at_epoch

    def freeze_before_training(self, pl_module):
        # freeze any module you want
        # Here, we are freezing `backbone`
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module, current_epoch, optimizer):
        # When `current_epoch` is `unfreeze_at_epoch`, the backbone starts training.
        if current_epoch == self._unfreeze_at_epoch:
            self.unfreeze_and_add_param_group(
                modules=pl_module.backbone,
                optimizer=optimizer,
                train_bn=True,
            )


class Record(Callback):
    """Leaves, from inside each process, the optimizer's groups and the weights."""

    def __init__(self, root, tag):
        self.root, self.tag = root, tag
        self.epochs = []

    def on_train_start(self, trainer, pl_module):
        write(self.root, f"{self.tag}-start", trainer.global_rank,
              {"groups": len(trainer.optimizers[0].param_groups), "epoch": trainer.current_epoch,
               "trainable": all(p.requires_grad for p in pl_module.backbone.parameters())})

    def on_train_epoch_end(self, trainer, pl_module):
        groups = trainer.optimizers[0].param_groups
        self.epochs.append({"groups": len(groups), "lrs": [g["lr"] for g in groups],
                            "first_layer": pl_module.backbone[0].weight.detach().flatten().tolist()})

    def on_train_end(self, trainer, pl_module):
        weights = torch.cat([p.detach().flatten() for p in pl_module.parameters()]).tolist()
        write(self.root, self.tag, trainer.global_rank, {"epochs": self.epochs, "weights": weights})


def multiplicative(epoch):
    return 1.5


def close(a, b, tol=1e-5):
    return len(a) == len(b) and all(abs(x - y) <= tol * (1 + abs(y)) for x, y in zip(a, b, strict=True))


def fit(args, tag, callbacks, **fit_kwargs):
    model = TransferModel()
    trainer = L.Trainer(max_epochs=EPOCHS, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=callbacks + [Record(args.root, tag)], **trainer_kwargs(args))
    trainer.fit(model, DataLoader(make_data(), batch_size=8), **fit_kwargs)
    records = read(args.root, tag)
    expect(sorted(records) == list(range(args.devices)), f"{tag}: on_train_end ran on ranks {sorted(records)}")
    for rank, record in records.items():  # every process trained the same weights
        expect(close(record["weights"], records[0]["weights"]), f"{tag}: rank {rank}'s weights differ from rank 0's")
    return model, records[0]


def main():
    args = parse_args(__doc__)
    L.seed_everything(1)

    # BackboneFinetuning, as in its docstring (multiplicative = lambda epoch: 1.5, a def so spawn can pickle it)
    every_epoch = ModelCheckpoint(dirpath=Path(args.root) / "ckpts", filename="{epoch}", save_top_k=-1)
    full, run = fit(args, "backbone", [BackboneFinetuning(MILESTONE, multiplicative), every_epoch])
    groups = [epoch["groups"] for epoch in run["epochs"]]
    expect(groups == [1] * MILESTONE + [2] * (EPOCHS - MILESTONE), f"param groups per epoch {groups}")
    backbone_lrs = [epoch["lrs"][1] for epoch in run["epochs"][MILESTONE:]]
    wanted = [LR * 0.1 * 1.5 ** i for i in range(EPOCHS - MILESTONE)]
    expect(close(backbone_lrs, wanted, 1e-9), f"backbone lrs {backbone_lrs}, expected {wanted}")
    first = [epoch["first_layer"] for epoch in run["epochs"]]
    start = TransferModel().backbone[0].weight.detach().flatten().tolist()
    expect(close(first[MILESTONE - 1], start, 0), "the frozen backbone moved before the milestone")
    expect(not close(first[-1], first[MILESTONE]), "the backbone did not train after the milestone")

    # resume from the checkpoint of epoch 2 (after the milestone): the groups are back before the optimizer's
    # state is loaded, the backbone trains on, and the run ends where the uninterrupted one did
    ckpt = Path(args.root) / "ckpts" / "epoch=2.ckpt"
    expect(ckpt.is_file(), f"no checkpoint {ckpt}")
    resumed, again = fit(args, "resumed", [BackboneFinetuning(MILESTONE, multiplicative)], ckpt_path=ckpt)
    starts = read(args.root, "resumed-start")
    expect(all(s == {"groups": 2, "epoch": 3, "trainable": True} for s in starts.values()), f"resumed: {starts}")
    expect([e["groups"] for e in again["epochs"]] == [2], f"resumed groups {again['epochs']}")
    expect(close(again["epochs"][0]["lrs"], run["epochs"][-1]["lrs"], 1e-9), "resumed lrs differ")
    for name, value in full.state_dict().items():
        expect(torch.allclose(resumed.state_dict()[name].float(), value.float(), atol=1e-5),
               f"{name}: the resumed fit ended elsewhere than the uninterrupted one")

    # the docs' own BaseFinetuning subclass: the new group's lr is the model's / initial_denom_lr (10)
    _, custom = fit(args, "custom", [FeatureExtractorFreezeUnfreeze(unfreeze_at_epoch=2)])
    expect([e["groups"] for e in custom["epochs"]] == [1, 1, 2, 2], f"custom groups {custom['epochs']}")
    expect(close(custom["epochs"][-1]["lrs"], [LR, LR / 10], 1e-9), f"custom lrs {custom['epochs'][-1]['lrs']}")
    ok("finetuning")


if __name__ == "__main__":
    main()
