"""(y) A user project's segmentation set-up (eMapR/sundial, Apache-2.0: ``sundial/models/base.py``,
``sundial/callbacks.py``, ``src/writers.py``), rewritten small with random chips: dict batches carrying a non-tensor
``meta`` entry, a ``transfer_batch_to_device`` that moves every entry but ``meta``, ``training_step``,
``validation_step`` and ``predict_step`` that take the batch alone and return dicts, Callbacks that log from those
outputs (``sync_dist=True``) and set ``strict_loading`` in ``setup``, a ``ModelCheckpoint`` subclass that starts
after an epoch, and a ``BasePredictionWriter`` saving each prediction under the name in ``meta``; then a reload with
``load_from_checkpoint(strict=False, map_location="cpu")``. Only the imports point at accelkit.
"""

import os

import torch
from _cli import expect, ok, parse_args, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, Dataset

import accelkit as L  # was: import lightning as L
from accelkit.callbacks import BasePredictionWriter  # was: from lightning.pytorch.callbacks import ...


class Tiles(Dataset):
    def __init__(self, count, seed):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(count, 3, 8, 8, generator=generator)
        self.masks = (self.images.mean(1, keepdim=True) > 0).float()

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return {"chip": self.images[i], "anno": self.masks[i], "meta": {"name": f"tile{i:02d}"}}


class SegmentationBase(L.LightningModule):
    def __init__(self, criterion, activation):
        super().__init__()
        self.criterion, self.activation = criterion, activation

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return {k: v if k == "meta" else v.to(device) for k, v in batch.items()}

    def training_step(self, batch):
        return {"loss": self.criterion(self(batch), batch["anno"])}

    def validation_step(self, batch):
        logits = self(batch)
        return {"loss": self.criterion(logits, batch["anno"]), "output": self.activation(logits)}

    def predict_step(self, batch):
        return {"output": self.activation(self(batch))}


class TinySegmenter(SegmentationBase):
    def __init__(self):
        super().__init__(nn.BCEWithLogitsLoss(), nn.Sigmoid())
        self.conv = nn.Conv2d(3, 1, 3, padding=1)

    def forward(self, batch):
        return self.conv(batch["chip"])

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.05)


class LenientLoading(L.Callback):
    def setup(self, trainer, pl_module, stage):
        pl_module.strict_loading = False


class LogFromOutputs(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        pl_module.log("train_loss", outputs["loss"], prog_bar=True)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        hits = ((outputs["output"] > 0.5).float() == batch["anno"]).float().mean()
        pl_module.log_dict({"val_loss": outputs["loss"], "pixel_accuracy": hits}, sync_dist=True)


class CheckpointAfter(L.pytorch.callbacks.ModelCheckpoint):
    def __init__(self, start_after_epoch=0, **kwargs):
        super().__init__(**kwargs)
        self.start_after_epoch = start_after_epoch

    def on_validation_end(self, trainer, pl_module):
        if trainer.current_epoch >= self.start_after_epoch:
            super().on_validation_end(trainer, pl_module)


class SaveByName(BasePredictionWriter):
    def __init__(self, folder):
        super().__init__("batch")
        self.folder = folder

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        os.makedirs(self.folder, exist_ok=True)
        for name, mask in zip(batch["meta"]["name"], prediction["output"], strict=True):
            torch.save(mask, os.path.join(self.folder, f"{name}.pt"))


def main():
    args = parse_args(__doc__)
    L.seed_everything(0)
    checkpoint = CheckpointAfter(start_after_epoch=2, monitor="val_loss", dirpath=os.path.join(args.root, "best"))
    written = os.path.join(args.root, "predictions")
    trainer = L.Trainer(max_epochs=4, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[LenientLoading(), LogFromOutputs(), checkpoint, SaveByName(written)],
                        **trainer_kwargs(args))
    model = TinySegmenter()
    trainer.fit(model, DataLoader(Tiles(16, 0), batch_size=4, shuffle=True), DataLoader(Tiles(8, 1), batch_size=4))
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    print(metrics)
    expect({"train_loss", "val_loss", "pixel_accuracy"} <= set(metrics), f"callback_metrics: {sorted(metrics)}")
    expect(os.path.basename(checkpoint.best_model_path).startswith(("epoch=2", "epoch=3")),
           f"the first checkpoint comes after epoch 2: {checkpoint.best_model_path}")
    expect(model.strict_loading is False, "the Callback's setup set strict_loading")
    trainer.predict(model, DataLoader(Tiles(6, 2), batch_size=4), return_predictions=False)
    if trainer.is_global_zero:
        names = sorted(os.listdir(written))
        expect(names == [f"tile{i:02d}.pt" for i in range(6)], f"predictions written: {names}")
        reloaded = TinySegmenter.load_from_checkpoint(checkpoint.best_model_path, strict=False, map_location="cpu")
        expect(reloaded.device.type == "cpu", f"reloaded on {reloaded.device}")
    ok("user_dict_batch_writer")


if __name__ == "__main__":
    main()
