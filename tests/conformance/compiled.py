"""(u) A ``torch.compile``d LightningModule in every stage, with the DataModule as the second positional argument:
``trainer.fit(torch.compile(model), dm)``, then ``validate``/``test``/``predict`` on the compiled module.

As Lightning's "compile your model" guide writes it; only the imports point at accelkit. The script checks that
the forward really ran compiled in every process that did the work (spawned workers compile it again), that the
module inside the compiled wrapper was trained, and that the wrapper sees the trained weights.
"""

import torch
from _cli import expect, ok, parse_args, read, trainer_kwargs, write
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import (
    LightningDataModule,  # was: from lightning.pytorch import LightningDataModule
    LightningModule,  # was: from lightning.pytorch import LightningModule
)

FEATURES, SAMPLES, BATCH = 8, 128, 8


def compiled_graphs() -> int:
    """How many graphs torch.compile built in this process (the script's instrument, not Lightning code)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class RegressionData(LightningDataModule):
    def setup(self, stage):
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(SAMPLES, FEATURES, generator=generator)
        self.dataset = TensorDataset(x, x.sum(dim=1, keepdim=True))

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=BATCH, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.dataset, batch_size=BATCH)

    def test_dataloader(self):
        return DataLoader(self.dataset, batch_size=BATCH)

    def predict_dataloader(self):
        return DataLoader(self.dataset, batch_size=BATCH)


class LitModel(LightningModule):
    def __init__(self, root):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, 1))
        self.root = root

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y), sync_dist=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y), sync_dist=True)

    def predict_step(self, batch, batch_idx):
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.03)

    def on_train_end(self):
        write(self.root, "fit", self.global_rank, {"graphs": compiled_graphs(), "class": type(self).__name__})

    def on_test_end(self):
        write(self.root, "test", self.global_rank, {"graphs": compiled_graphs()})


def main():
    args = parse_args(__doc__)
    L.seed_everything(7)
    model = LitModel(args.root)
    # as in Lightning's guide: the compiled module goes to the Trainer. (Scaffolding: with several processes the
    # script picks the backend that skips inductor's C++ build, which every spawned worker would redo per stage.)
    compiled = torch.compile(model) if args.devices == 1 else torch.compile(model, backend="aot_eager")
    dm = RegressionData()
    trainer = L.Trainer(max_epochs=3, enable_progress_bar=False, enable_checkpointing=False, logger=False,
                        **trainer_kwargs(args))

    before = trainer.validate(compiled, dm)[0]["val_loss"]
    trainer.fit(compiled, dm)
    after = trainer.validate(compiled, dm)[0]["val_loss"]
    tested = trainer.test(compiled, dm)[0]["test_loss"]
    predictions = trainer.predict(compiled, dm)

    world = args.devices
    fits, tests = read(args.root, "fit"), read(args.root, "test")
    expect(sorted(fits) == list(range(world)) and sorted(tests) == list(range(world)),
           f"ranks that fit {sorted(fits)} / tested {sorted(tests)}, expected {world}")
    for rank in range(world):  # every process that did the work ran the forward compiled
        expect(fits[rank]["graphs"] >= 1, f"rank {rank}: no compiled graph during fit ({fits[rank]})")
        expect(tests[rank]["graphs"] >= 1, f"rank {rank}: no compiled graph during test ({tests[rank]})")
        expect(fits[rank]["class"] == "LitModel", f"rank {rank}: the hooks ran on {fits[rank]['class']}")
    expect(after < 0.5 * before, f"val_loss did not fall by half: {before} -> {after}")
    expect(abs(tested - after) < 1e-4, f"test_loss {tested} != val_loss {after} on the same data")
    expect(trainer.lightning_module is model, "the Trainer did not run the module inside the compiled wrapper")
    rows = torch.cat(predictions)
    expect(rows.shape == (SAMPLES // world, 1), f"predictions of shape {tuple(rows.shape)}")
    x = torch.randn(4, FEATURES, device=model.device)
    with torch.no_grad():
        expect(torch.allclose(compiled(x), model(x), atol=1e-5), "the wrapper does not see the trained weights")
    ok("compiled")


if __name__ == "__main__":
    main()
