"""(z8) The data modules and classification task of a geospatial library (microsoft/torchgeo, MIT licence:
``torchgeo/datamodules/geo.py`` and ``torchgeo/trainers/classification.py``), re-written in our own words with the
features they use: samples as dicts carrying non-tensor members (a CRS string, a bounding box object) gathered by a
``collate_fn`` of the user's; a DataModule's ``transfer_batch_to_device`` that drops those members before calling
``super().transfer_batch_to_device``; its ``on_after_batch_transfer`` choosing an augmentation by
``self.trainer.training``/``validating``/``sanity_checking``/``testing``/``predicting``; ``setup(stage)`` building only
the splits the stage needs; a task logging a torchmetrics ``MetricCollection`` with ``self.log_dict`` and a
``predict_step`` returning the class probabilities collected by ``trainer.predict``.

Stand-ins: the imagery becomes random 4-band 8x8 tiles whose class is the brightest band, the augmentations kornia's
replaced by modules marking the tiles (so each stage's choice shows), 4 epochs. Only the imports point at accelkit.
"""

from collections import namedtuple

import torch
from _cli import expect, ok, parse_args, report, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

import accelkit as L  # was: import lightning as L

BoundingBox = namedtuple("BoundingBox", "minx maxx miny maxy")
MARKS = {"train": 1.0, "val": 2.0, "test": 3.0, "predict": 4.0}


class TileDataset(Dataset):
    def __init__(self, split, size=128):
        seed = {"train": 0, "val": 1, "test": 2, "predict": 3}[split]
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.rand(size, 4, 8, 8, generator=generator)
        self.labels = torch.randint(0, 4, (size,), generator=generator)
        self.images[torch.arange(size), self.labels] += 0.5

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return {"image": self.images[index], "label": self.labels[index], "crs": "EPSG:32618",
                "bbox": BoundingBox(index, index + 8, 0, 8)}


def stack_samples(samples):
    return {key: torch.stack([s[key] for s in samples]) if torch.is_tensor(samples[0][key])
            else [s[key] for s in samples] for key in samples[0]}


class Mark(nn.Module):
    """The stand-in augmentation (a module, as kornia's): adds a band holding the stage's mark."""

    def __init__(self, stage):
        super().__init__()
        self.value = MARKS[stage]

    def forward(self, batch):
        batch["image"] = torch.cat([batch["image"], torch.full_like(batch["image"][:, :1], self.value)], dim=1)
        return batch


class TileDataModule(L.LightningDataModule):
    def __init__(self, batch_size=32):
        super().__init__()
        self.batch_size = batch_size
        self.train_aug, self.val_aug, self.test_aug, self.predict_aug = (Mark(s) for s in MARKS)
        self.built = []

    def setup(self, stage):
        if stage == "fit":
            self.train_dataset = TileDataset("train", size=512)
        if stage in ("fit", "validate"):
            self.val_dataset = TileDataset("val")
        if stage == "test":
            self.test_dataset = TileDataset("test")
        if stage == "predict":
            self.predict_dataset = TileDataset("predict", size=40)
        self.built.append(stage)

    def _loader(self, dataset, shuffle=False):
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, collate_fn=stack_samples)

    def train_dataloader(self):
        return self._loader(self.train_dataset, shuffle=True)

    def val_dataloader(self):
        return self._loader(self.val_dataset)

    def test_dataloader(self):
        return self._loader(self.test_dataset)

    def predict_dataloader(self):
        return self._loader(self.predict_dataset)

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        if isinstance(batch, dict):
            # non-tensor values cannot be moved to a device
            del batch["crs"]
            del batch["bbox"]
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        if self.trainer:
            if self.trainer.training:
                aug = self.train_aug
            elif self.trainer.validating or self.trainer.sanity_checking:
                aug = self.val_aug
            elif self.trainer.testing:
                aug = self.test_aug
            elif self.trainer.predicting:
                aug = self.predict_aug
            batch = aug(batch)
        return batch


class ClassificationTask(L.LightningModule):
    def __init__(self, num_classes=4, lr=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                   nn.Linear(8, num_classes))
        metrics = MetricCollection({"OverallAccuracy": MulticlassAccuracy(num_classes, average="micro"),
                                    "F1Score": MulticlassF1Score(num_classes, average="macro")})
        self.train_metrics = metrics.clone(prefix="train_")
        self.val_metrics = metrics.clone(prefix="val_")
        self.test_metrics = metrics.clone(prefix="test_")
        self.marks = set()

    def forward(self, image):
        self.marks.update(image[:, -1].unique().tolist())
        expect(image.size(1) == 5, f"the augmentation's band is missing: {tuple(image.shape)}")
        return self.model(image[:, :4])

    def _step(self, batch, metrics, name):
        expect(set(batch) == {"image", "label"}, f"transfer_batch_to_device kept {sorted(batch)}")
        y_hat = self(batch["image"])
        loss = nn.functional.cross_entropy(y_hat, batch["label"])
        self.log(name, loss)
        metrics(y_hat.argmax(dim=1), batch["label"])
        self.log_dict(metrics)
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, self.train_metrics, "train_loss")

    def validation_step(self, batch, batch_idx):
        self._step(batch, self.val_metrics, "val_loss")

    def test_step(self, batch, batch_idx):
        self._step(batch, self.test_metrics, "test_loss")

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch["image"]).softmax(dim=-1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def main():
    args = parse_args(__doc__)
    L.seed_everything(0)
    datamodule, task = TileDataModule(), ClassificationTask()
    trainer = L.Trainer(max_epochs=4, enable_progress_bar=False, logger=False, enable_checkpointing=False,
                        **trainer_kwargs(args))
    trainer.fit(task, datamodule=datamodule)
    expect(task.marks == {MARKS["train"], MARKS["val"]}, f"augmentations seen in fit: {task.marks}")
    fitted = {k: float(v) for k, v in trainer.callback_metrics.items()}
    task.marks.clear()
    results = trainer.test(task, datamodule=datamodule)
    expect(task.marks == {MARKS["test"]}, f"augmentations seen in test: {task.marks}")
    task.marks.clear()
    predictions = trainer.predict(task, datamodule=datamodule)
    expect(task.marks == {MARKS["predict"]}, f"augmentations seen in predict: {task.marks}")
    report(fitted=fitted, results=results, steps=trainer.global_step, predictions=[p.sum(0) for p in predictions])
    wanted = {"train_loss", "train_OverallAccuracy", "train_F1Score", "val_loss", "val_OverallAccuracy", "val_F1Score"}
    expect(wanted <= set(fitted), f"callback_metrics: {sorted(fitted)}")
    expect(set(results[0]) == {"test_loss", "test_OverallAccuracy", "test_F1Score"}, f"test results: {results}")
    expect(results[0]["test_OverallAccuracy"] > 0.6, f"the tiles were not learnt: {results}")
    expect(datamodule.built == ["fit", "test", "predict"], f"setup stages: {datamodule.built}")
    rows = torch.cat(predictions)
    expect(rows.shape == (40 // trainer.world_size, 4) and torch.allclose(rows.sum(-1), torch.ones(len(rows))),
           f"predictions: {rows.shape}")
    ok("user_torchgeo_datamodule")


if __name__ == "__main__":
    main()
