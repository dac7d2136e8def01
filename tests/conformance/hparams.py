"""(e) ``save_hyperparameters()`` and ``Model.load_from_checkpoint``.

The module stores its ``__init__`` arguments (minus an ignored ``nn.Module`` argument), reads them back
through ``self.hparams.<name>``, and is rebuilt from the checkpoint with the same hyperparameters and weights,
and with an overridden one. Written as a Lightning user writes it; only the imports point at accelkit.
"""

import os
from pathlib import Path

import torch
from _cli import expect, ok, parse_args, read, trainer_kwargs, write
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule


class LitRegressor(LightningModule):
    def __init__(self, in_features: int = 6, hidden: int = 12, lr: float = 0.05, optimizer: str = "sgd",
                 loss_fn: nn.Module = None, tags=("conformance",)):
        super().__init__()
        self.save_hyperparameters(ignore=["loss_fn"])
        self.loss_fn = loss_fn if loss_fn is not None else nn.MSELoss()
        self.net = nn.Sequential(nn.Linear(self.hparams.in_features, self.hparams.hidden), nn.Tanh(),
                                 nn.Linear(self.hparams.hidden, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.loss_fn(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        if self.hparams.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    def on_fit_start(self):
        write(self.trainer.default_root_dir, "fit_start", self.global_rank,
              {"hparams": dict(self.hparams), "lr": self.optimizers().param_groups[0]["lr"]})


def main():
    args = parse_args(__doc__)
    L.seed_everything(11)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 6, generator=generator)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    loader = DataLoader(TensorDataset(x, y), batch_size=16)

    model = LitRegressor(hidden=10, lr=0.1, loss_fn=nn.SmoothL1Loss())
    expected = {"in_features": 6, "hidden": 10, "lr": 0.1, "optimizer": "sgd", "tags": ["conformance"]}
    found = {**model.hparams, "tags": list(model.hparams.get("tags", ()))}
    expect(found == expected, f"hparams {dict(model.hparams)} != {expected}")
    expect(model.hparams.hidden == 10 and model.hparams["lr"] == 0.1, "attribute and key access to hparams")
    expect("loss_fn" not in model.hparams, "ignore=['loss_fn'] was not honoured")

    trainer = L.Trainer(max_epochs=2, enable_progress_bar=False, **trainer_kwargs(args))
    trainer.fit(model, loader)
    starts = read(args.root, "fit_start")
    expect(sorted(starts) == list(range(args.devices)), f"on_fit_start ran on ranks {sorted(starts)}")
    for rank, start in starts.items():
        expect(start["hparams"]["hidden"] == 10 and start["lr"] == 0.1, f"rank {rank} saw {start}")

    path = trainer.checkpoint_callback.best_model_path
    expect(bool(path) and os.path.isfile(path), f"no checkpoint written: {path!r}")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)  # hparams are plain data
    stored = dict(checkpoint["hyper_parameters"])
    expect({k: stored[k] for k in ("in_features", "hidden", "lr", "optimizer")} ==
           {"in_features": 6, "hidden": 10, "lr": 0.1, "optimizer": "sgd"}, f"checkpoint hyper_parameters {stored}")
    expect(list(stored["tags"]) == ["conformance"], f"tags stored as {stored['tags']!r}")
    expect("loss_fn" not in stored, "an ignored argument reached the checkpoint")

    restored = LitRegressor.load_from_checkpoint(path, map_location="cpu", loss_fn=nn.SmoothL1Loss())
    expect(isinstance(restored, LitRegressor), f"load_from_checkpoint returned {type(restored)}")
    expect(restored.hparams.hidden == 10 and restored.hparams.lr == 0.1, f"restored hparams {restored.hparams}")
    expect(isinstance(restored.loss_fn, nn.SmoothL1Loss), "an override for an ignored argument was dropped")
    state, trained = restored.state_dict(), model.state_dict()
    for name, value in checkpoint["state_dict"].items():
        expect(torch.equal(state[name], value.cpu()), f"weight {name} not restored")
        expect(torch.allclose(trained[name].cpu(), value.cpu()), f"caller's model differs from the checkpoint: {name}")
    with torch.no_grad():
        expect(torch.allclose(restored(x), model.cpu()(x)), "restored model predicts differently")

    overridden = LitRegressor.load_from_checkpoint(path, lr=0.5)
    expect(overridden.hparams.lr == 0.5 and overridden.hparams.hidden == 10, f"override: {overridden.hparams}")

    hparams_files = list(Path(args.root).rglob("hparams.yaml"))
    expect(len(hparams_files) == 1 and "hidden: 10" in hparams_files[0].read_text(),
           f"the logger did not record the hyperparameters: {hparams_files}")
    ok("hparams")


if __name__ == "__main__":
    main()
