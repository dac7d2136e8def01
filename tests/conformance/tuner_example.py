"""(tuner) ``Tuner.lr_find`` and ``Tuner.scale_batch_size`` as Lightning's documentation uses them.

The module keeps its batch size and learning rate as attributes and hyper-parameters and builds its loader from
them; the batch size search runs first, then the learning-rate finder, then the real fit with both values. The
device's memory is limited on purpose: past ``MEMORY_LIMIT`` samples a step asks the device's allocator for a
buffer no device has, which the allocator refuses with its own out-of-memory error. What the docs promise is
checked: the largest batch that fits is found (``power``: the largest power of two; ``binsearch``: the exact
limit less its 5% safety margin, as Lightning 2.6 does), the suggested learning rate lies where the loss curve
falls, the weights are the same after tuning, the attributes hold the tuned values and the fit uses them. Under a
multi-process strategy the tuner refuses, naming the strategy (accelkit refuses ``lr_find`` there too; Lightning
refuses only ``scale_batch_size``).
"""

from pathlib import Path

import torch
from _cli import expect, ok, parse_args, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule
from accelkit.tuner import Tuner  # was: from lightning.pytorch.tuner import Tuner

MEMORY_LIMIT = 48
BINSEARCH_RESULT = int(MEMORY_LIMIT * 0.95)  # 45


def dataset():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 10, generator=generator)
    return TensorDataset(x, x @ torch.linspace(-1, 1, 10).unsqueeze(1))


class LitModel(LightningModule):
    def __init__(self, learning_rate=1e-3, batch_size=32):
        super().__init__()
        self.save_hyperparameters()
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
        self.fit_started_with = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        if x.shape[0] > MEMORY_LIMIT:  # the synthetic memory limit
            torch.empty(1 << 50, dtype=torch.uint8, device=self.device)
        loss = nn.functional.mse_loss(self.model(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.learning_rate)

    def train_dataloader(self):
        return DataLoader(dataset(), batch_size=self.batch_size, shuffle=True)

    def on_train_start(self):
        self.fit_started_with = {"lr": self.optimizers().param_groups[0]["lr"],
                                 "batch_size": self.trainer.train_dataloader.batch_size}


def refused(args):
    trainer = L.Trainer(max_epochs=1, enable_progress_bar=False, **trainer_kwargs(args))
    tuner = Tuner(trainer)
    model = LitModel()
    for call in (lambda: tuner.lr_find(model), lambda: tuner.scale_batch_size(model, mode="power")):
        try:
            call()
        except ValueError as error:  # accelkit's ConfigurationError is a ValueError, as Lightning's refusal
            expect(repr(args.strategy) in str(error) and "devices=1" in str(error), f"refusal says: {error}")
        else:
            raise AssertionError(f"the tuner ran under strategy {args.strategy!r}")
    expect(model.learning_rate == 1e-3 and model.batch_size == 32, "a refused tuner changed the module")
    trainer.fit(model)  # the Trainer is untouched by the refusals
    expect(trainer.global_step == 512 // 32 // args.devices, f"fit after the refusals: {trainer.global_step} steps")


def tune_and_fit(args):
    trainer = L.Trainer(max_epochs=3, enable_progress_bar=False, **trainer_kwargs(args))
    tuner = Tuner(trainer)

    model = LitModel()
    # Auto-scale batch size by growing it exponentially (default)
    found = tuner.scale_batch_size(model, mode="power")
    expect(found == 32 and model.batch_size == 32 and model.hparams.batch_size == 32, f"power found {found}")
    # Auto-scale batch size with binary search (the largest that fits, less a 5% safety margin)
    found = tuner.scale_batch_size(model, mode="binsearch")
    expect(found == BINSEARCH_RESULT and model.batch_size == found, f"binsearch found {found}")

    before = {k: v.clone() for k, v in model.state_dict().items()}
    # Run learning rate finder
    lr_finder = tuner.lr_find(model, min_lr=1e-4, max_lr=10)
    # Results can be found in
    print(lr_finder.results)
    after = model.state_dict()
    expect(all(torch.equal(before[k], after[k]) for k in before), "lr_find did not restore the weights")
    # Plot with
    try:
        fig = lr_finder.plot(suggest=True)
        Path(args.root).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(args.root) / "lr_finder.png")
    except ImportError as error:  # matplotlib is an optional dependency, as in Lightning
        expect("pip install matplotlib" in str(error), f"plot() without matplotlib says: {error}")
    # Pick point based on plot, or get suggestion
    new_lr = lr_finder.suggestion()
    losses, index = lr_finder.results["loss"], lr_finder.optimal_index
    lowest = min(range(len(losses)), key=losses.__getitem__)
    expect(lowest > 0, f"the loss never fell below its first value: {losses}")
    plateau = sorted(losses[:lowest])[lowest // 2]  # the loss typical of the curve before its lowest point
    expect(index < lowest and losses[lowest] < losses[index] < plateau,
           f"suggestion #{index} ({new_lr}) is not where the loss falls (lowest #{lowest}): {losses}")
    expect(model.learning_rate == new_lr and model.hparams.learning_rate == new_lr, "update_attr did not set it")
    # update hparams of the model
    model.hparams.lr = new_lr

    # Fit model
    trainer.fit(model)
    expect(model.fit_started_with == {"lr": new_lr, "batch_size": BINSEARCH_RESULT}, f"fit: {model.fit_started_with}")
    expect(trainer.global_step == 3 * -(-512 // BINSEARCH_RESULT), f"fit took {trainer.global_step} steps")
    expect(float(trainer.callback_metrics["train_loss"]) < losses[0], "the tuned fit did not learn")


def main():
    args = parse_args(__doc__)
    L.seed_everything(7)
    if args.devices > 1 or args.strategy not in ("auto", "single_device"):
        refused(args)
    else:
        tune_and_fit(args)
    ok("tuner_example")


if __name__ == "__main__":
    main()
