"""A script that trains on the CPU first, then on XLA, in one process (``python cpu_then_xla.py [NAME] OUTDIR``;
the optional NAME is what the ``run_scenario`` fixture passes, unused).

The CPU part runs backward passes before torch_xla is first imported: a hand-written loop (``loss.backward()``)
and a CPU ``Trainer.fit``. Before accelkit handled it, every XLA backward pass after that failed with
``device_ready_queues_ ... INTERNAL ASSERT FAILED`` (PyTorch's autograd engine had no queue for the XLA device).
Then ``Trainer(accelerator="tpu", devices=1)`` fits, validates and fits again (a second setup in the same
process), and a last CPU fit shows the CPU is unaffected. Writes ``OUTDIR/result.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit


class Line(accelkit.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        self.losses.append(float(loss.detach()))  # reads the device: fine for 16 steps
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def loader() -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)


def fit(accelerator: str, **extra) -> tuple[Line, accelkit.Trainer]:
    model = Line()
    trainer = accelkit.Trainer(accelerator=accelerator, max_epochs=2, logger=False, enable_progress_bar=False,
                               enable_checkpointing=False, enable_model_summary=False, **extra)
    trainer.fit(model, loader(), loader())
    return model, trainer


def main(out: Path) -> dict:
    # 1. a hand-written CPU backward pass, then a CPU fit: torch_xla is not imported yet
    w = torch.randn(3, requires_grad=True)
    (w * w).sum().backward()
    cpu_model, _ = fit("cpu")
    imported_before_xla = "torch_xla" in sys.modules
    # 2. XLA in the same process: fit, validate, fit again
    xla_model, trainer = fit("tpu", devices=1)
    validated = trainer.validate(xla_model, loader(), verbose=False)
    again, _ = fit("tpu", devices=1)
    # 3. the CPU afterwards
    cpu_after, _ = fit("cpu")
    return {
        "torch_xla_imported_before_xla_fit": imported_before_xla,
        "strategy": type(trainer.strategy).__name__,
        "cpu_losses": cpu_model.losses, "xla_losses": xla_model.losses, "xla_again_losses": again.losses,
        "cpu_after_losses": cpu_after.losses,
        "val_loss": float(validated[0]["val_loss"]),
        # the XLA runs turned autograd's multithreading off for their thread, and back on at teardown
        "multithreading_after": bool(torch._C._is_multithreading_enabled()),
    }


if __name__ == "__main__":
    outdir = Path(sys.argv[-1])
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "result.json").write_text(json.dumps(main(outdir), indent=1))
    print("cpu_then_xla done")
