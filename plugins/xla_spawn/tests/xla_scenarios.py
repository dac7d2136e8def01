"""Scenarios run on real XLA (PJRT_DEVICE=CPU) in a fresh interpreter: ``python xla_scenarios.py NAME OUTDIR``.

Each scenario writes ``OUTDIR/result.json`` with what it measured; the pytest module asserts on it. They run in
subprocesses because an XLA runtime started in the pytest process would break every later spawn.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import accelkit
from accelkit import Callback, Module, Trainer


def _data(n: int = 64, features: int = 8, seed: int = 0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=gen)
    w = torch.randn(features, 1, generator=gen)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=gen))


class Regression(Module):
    """A linear regression trained with SGD and a mean squared error."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.layer = nn.Linear(8, 1)
        self.lr = lr

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch[0], batch[1]
        loss = nn.functional.mse_loss(self(x), y)
        self.log("loss", loss, on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class TaggedData(Dataset):
    """Samples ``(x, y, name)``: the name is a string that must reach training_step untouched."""

    def __init__(self) -> None:
        self.inner = _data()

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i):
        x, y = self.inner[i]
        return x, y, f"sample-{i}"


class TaggedRegression(Regression):
    """Checks each batch: tensors on the XLA device, the string names untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def training_step(self, batch, batch_idx):
        x, y, names = batch
        self.seen.append((x.device.type, type(names).__name__, list(names)))
        return super().training_step((x, y), batch_idx)


class WeightSharingModule(Module):
    """The Lightning TPU guide's example: layer_3 shares layer_1's weight, re-tied after the move."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.layer_1 = nn.Linear(8, 8, bias=False)
        self.layer_2 = nn.Linear(8, 8, bias=False)
        self.layer_3 = nn.Linear(8, 8, bias=False)
        self.layer_3.weight = self.layer_1.weight

    def forward(self, x):
        return self.layer_3(torch.relu(self.layer_2(self.layer_1(x))))

    def on_post_move_to_device(self):
        self.layer_3.weight = self.layer_1.weight

    def training_step(self, batch, batch_idx):
        x, _ = batch
        return nn.functional.mse_loss(self(x), x)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class XLACounters(Callback):
    """After every training batch (the step's graph is already cut), read torch_xla's host-side counters.

    Reading ``torch_xla.debug.metrics`` touches no device tensor, so it adds no transfer of its own.
    """

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        import torch_xla.debug.metrics as met

        def count(name):
            data = met.metric_data(name)
            return int(data[0]) if data else 0

        self.rows.append({"epoch": trainer.current_epoch, "batch": batch_idx,
                          "compiles": count("CompileTime"), "from_device": count("TransferFromDeviceTime")})


def _fit_counting(model: Module, loader, epochs: int, root: Path, log_every: int) -> tuple[Trainer, XLACounters]:
    counters = XLACounters()
    trainer = Trainer(accelerator="xla", devices=1, max_epochs=epochs, logger=False, enable_progress_bar=False,
                      enable_checkpointing=False, callbacks=[counters], log_every_n_steps=log_every,
                      default_root_dir=root)
    trainer.fit(model, loader)
    return trainer, counters


class ItemEveryStep(Regression):
    """Negative control: reads the loss on the host every step (the habit the no-sync check must catch)."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.last = loss.item()
        return loss


class GrowingInput(Regression):
    """Negative control: a different input shape every step, so each step compiles a new graph."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        keep = 1 + batch_idx % 4  # 1..4 rows: four shapes, so steps 1-4 each compile
        return super().training_step((x[:keep], y[:keep]), batch_idx)


def scenario_single(out: Path) -> dict:
    """xla_single: loss falls, compilations and device->host transfers flat per step, non-tensor batch items,
    weight tying, and two negative controls showing the counters do catch per-step syncs and recompiles."""
    import torch_xla.debug.metrics as met

    result: dict = {}
    model = TaggedRegression()
    loader = DataLoader(TaggedData(), batch_size=8)  # 8 equal batches per epoch
    epoch_losses = []

    class EpochLoss(Callback):
        def on_train_epoch_end(self, trainer, module):
            epoch_losses.append(trainer.callback_metrics["loss_epoch"])

    counters = XLACounters()
    trainer = Trainer(accelerator="xla", devices=1, max_epochs=4, logger=False, enable_progress_bar=False,
                      callbacks=[counters, EpochLoss()], log_every_n_steps=1000, default_root_dir=out)
    result["strategy"] = type(trainer.strategy).__name__
    trainer.fit(model, loader)
    result["epoch_losses"] = epoch_losses
    result["rows"] = counters.rows
    result["param_device"] = str(next(model.parameters()).device)
    result["batch_devices"] = sorted({s[0] for s in model.seen})
    result["names_type"] = sorted({s[1] for s in model.seen})
    result["names_first_epoch"] = [n for s in model.seen[:8] for n in s[2]]
    result["checkpoint_exists"] = trainer.checkpoint_path.is_file()
    state = accelkit.checkpoint.load(trainer.checkpoint_path)
    result["checkpoint_devices"] = sorted({t.device.type for t in state["state_dict"].values()})

    # weight tying
    tied = WeightSharingModule()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(accelerator="xla", devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                enable_checkpointing=False, default_root_dir=out).fit(
            tied, DataLoader(_data(32), batch_size=8))
    start = WeightSharingModule()
    result["tie"] = {
        "same_object": tied.layer_1.weight is tied.layer_3.weight,
        "same_storage": tied.layer_1.weight.data_ptr() == tied.layer_3.weight.data_ptr()
        if tied.layer_1.weight.device.type == "cpu" else None,
        "equal_values": bool(torch.equal(tied.layer_1.weight.cpu(), tied.layer_3.weight.cpu())),
        "device": str(tied.layer_1.weight.device),
        "num_params": len(list(tied.parameters())),
        "trained": not torch.equal(start.layer_1.weight, tied.layer_1.weight.cpu()),
        "warnings": [str(w.message) for w in caught if "distinct parameters" in str(w.message)],
    }

    # negative controls: the same counters must move when a step syncs or recompiles
    loader = DataLoader(_data(), batch_size=8)
    _, item = _fit_counting(ItemEveryStep(), loader, 1, out, 1000)
    _, grow = _fit_counting(GrowingInput(), loader, 1, out, 1000)
    result["item_rows"] = item.rows
    result["grow_rows"] = grow.rows
    result["metric_names"] = sorted(met.metric_names())
    return result


SCENARIOS = {"single": scenario_single}

if __name__ == "__main__":
    name, outdir = sys.argv[1], Path(sys.argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    data = SCENARIOS[name](outdir)
    (outdir / "result.json").write_text(json.dumps(data, indent=1, default=str))
    print("scenario", name, "done")
