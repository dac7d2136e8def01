"""(z5) The CIFAR10 classification notebook of a university deep-learning course (phlippe/uvadlc_notebooks, MIT
licence: ``docs/tutorial_notebooks/tutorial5/Inception_ResNet_DenseNet.ipynb``), re-written in our own words with the
features it uses: a module built from names (``model_name``, ``optimizer_name``) and nested dicts of
hyper-parameters, all saved by ``save_hyperparameters()``; ``example_input_array``; ``[optimizer], [MultiStepLR]``
returned; ``self.log("train_acc", acc, on_step=False, on_epoch=True)``; ``ModelCheckpoint(save_weights_only=True,
mode="max", monitor="val_acc")`` and ``LearningRateMonitor("epoch")``; the default logger's ``_log_graph = True`` and
``_default_hp_metric = None`` set by the notebook after the Trainer is made; ``load_from_checkpoint`` of
``trainer.checkpoint_callback.best_model_path`` and ``trainer.test(model, dataloaders=..., verbose=False)`` run on
the validation and the test loaders, their ``test_acc`` read from the returned lists.

Stand-ins: CIFAR10 becomes random 3x16x16 images (class: the brightest channel), the ResNet a two-block CNN, 3 epochs.
Only the imports point at accelkit.
"""

import os
from pathlib import Path

import torch
from _cli import expect, ok, parse_args, report, trainer_kwargs
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit.callbacks import (
    LearningRateMonitor,  # was: from lightning.pytorch.callbacks import LearningRateMonitor
    ModelCheckpoint,  # was: from lightning.pytorch.callbacks import ModelCheckpoint
)

act_fn_by_name = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


class SmallNet(nn.Module):
    def __init__(self, num_classes=3, c_hidden=(8, 16), act_fn_name="relu"):
        super().__init__()
        act = act_fn_by_name[act_fn_name]
        layers, c_in = [], 3
        for c in c_hidden:
            layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.BatchNorm2d(c), act()]
            c_in = c
        self.net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, num_classes))

    def forward(self, x):
        return self.net(x)


model_dict = {"SmallNet": SmallNet}


def create_model(model_name, model_hparams):
    if model_name not in model_dict:
        raise ValueError(f'Unknown model name "{model_name}". Available models are: {list(model_dict)}')
    return model_dict[model_name](**model_hparams)


class CIFARModule(L.LightningModule):
    def __init__(self, model_name, model_hparams, optimizer_name, optimizer_hparams):
        super().__init__()
        self.save_hyperparameters()
        self.model = create_model(model_name, model_hparams)
        self.loss_module = nn.CrossEntropyLoss()
        self.example_input_array = torch.zeros((1, 3, 16, 16), dtype=torch.float32)

    def forward(self, imgs):
        return self.model(imgs)

    def configure_optimizers(self):
        if self.hparams.optimizer_name == "Adam":
            optimizer = optim.AdamW(self.parameters(), **self.hparams.optimizer_hparams)
        elif self.hparams.optimizer_name == "SGD":
            optimizer = optim.SGD(self.parameters(), **self.hparams.optimizer_hparams)
        else:
            raise ValueError(f'Unknown optimizer: "{self.hparams.optimizer_name}"')
        scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.1)
        return [optimizer], [scheduler]

    def training_step(self, batch, batch_idx):
        imgs, labels = batch
        preds = self.model(imgs)
        loss = self.loss_module(preds, labels)
        acc = (preds.argmax(dim=-1) == labels).float().mean()
        self.log("train_acc", acc, on_step=False, on_epoch=True)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        imgs, labels = batch
        self.log("val_acc", (self.model(imgs).argmax(dim=-1) == labels).float().mean())

    def test_step(self, batch, batch_idx):
        imgs, labels = batch
        self.log("test_acc", (self.model(imgs).argmax(dim=-1) == labels).float().mean())


def make_loader(n, seed, **kwargs):
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 3, 16, 16, generator=generator)
    labels = torch.randint(0, 3, (n,), generator=generator)
    images[torch.arange(n), labels] += 0.5
    return DataLoader(TensorDataset(images, labels), batch_size=32, **kwargs)


def train_model(root, model_name, save_name=None, **kwargs):
    save_name = save_name or model_name
    trainer = L.Trainer(**{**kwargs.pop("trainer"), "default_root_dir": os.path.join(root, save_name)}, max_epochs=3,
                        callbacks=[ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc"),
                                   LearningRateMonitor("epoch")], enable_progress_bar=False)
    trainer.logger._log_graph = True
    trainer.logger._default_hp_metric = None
    L.seed_everything(42)
    model = CIFARModule(model_name=model_name, **kwargs)
    train_loader, val_loader, test_loader = make_loader(256, 0, shuffle=True), make_loader(64, 1), make_loader(64, 2)
    trainer.fit(model, train_loader, val_loader)
    model = CIFARModule.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    val_result = trainer.test(model, dataloaders=val_loader, verbose=False)
    test_result = trainer.test(model, dataloaders=test_loader, verbose=False)
    return model, trainer, {"test": test_result[0]["test_acc"], "val": val_result[0]["test_acc"]}


def main():
    args = parse_args(__doc__)
    model, trainer, result = train_model(args.root, model_name="SmallNet",
                                         model_hparams={"num_classes": 3, "c_hidden": [8, 16], "act_fn_name": "relu"},
                                         optimizer_name="SGD", optimizer_hparams={"lr": 0.1, "momentum": 0.9,
                                                                                  "weight_decay": 1e-4},
                                         trainer=trainer_kwargs(args))
    report(result=result, steps=trainer.global_step, best=Path(trainer.checkpoint_callback.best_model_path).name)
    expect(result["val"] > 0.6 and result["test"] > 0.6, f"the model did not learn: {result}")
    expect(model.hparams.model_hparams == {"num_classes": 3, "c_hidden": [8, 16], "act_fn_name": "relu"},
           f"nested hyper-parameters: {model.hparams.model_hparams}")
    best = torch.load(trainer.checkpoint_callback.best_model_path, map_location="cpu", weights_only=True)
    expect("optimizer_states" not in best and "state_dict" in best, f"a weights-only checkpoint: {sorted(best)}")
    if trainer.global_rank == 0:
        log_dir = Path(trainer.logger.log_dir)
        events = list(log_dir.glob("events.out.tfevents.*"))
        expect(events, f"no TensorBoard events in {log_dir}: {sorted(p.name for p in log_dir.iterdir())}")
        hparams_file = log_dir / "hparams.yaml"
        expect(hparams_file.exists() and "c_hidden" in hparams_file.read_text(), f"hparams.yaml in {log_dir}")
    ok("user_uvadlc_resnet")


if __name__ == "__main__":
    main()
