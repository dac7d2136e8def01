"""The progress bar on XLA (PJRT on the host CPU): it shows the logged loss, yet reads nothing from the device
itself; values cross to the host only at the logging steps (``log_every_n_steps``), as without a bar."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xla, pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]

SCRIPT = r'''
import io, json, warnings
warnings.simplefilter("ignore")
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import accelkit
from accelkit.callbacks import TQDMProgressBar

class Model(accelkit.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

class Transfers(accelkit.Callback):
    """After the bar's own batch-end work: torch_xla's host-side count of device-to-host transfers."""
    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        import torch_xla.debug.metrics as met
        data = met.metric_data("TransferFromDeviceTime")
        self.rows.append([trainer.current_epoch, batch_idx, int(data[0]) if data else 0])

result = {}
for log_every in (4, 1):
    bar, transfers = TQDMProgressBar(), Transfers()
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    trainer = accelkit.Trainer(accelerator="xla", devices=1, max_epochs=2, logger=False, enable_checkpointing=False,
                               enable_model_summary=False, callbacks=[bar, transfers], log_every_n_steps=log_every)
    trainer.fit(Model(), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8))
    result[log_every] = {"rows": transfers.rows, "postfix": bar.train_progress_bar.postfix}
print("RESULT " + json.dumps(result))
'''


def test_the_bar_shows_the_loss_without_reading_the_device_per_step(run_python) -> None:
    proc = run_python(SCRIPT)
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    for log_every, run in ((4, result["4"]), (1, result["1"])):
        assert "train_loss=" in run["postfix"], run["postfix"]
        for epoch in (0, 1):
            counts = [count for e, _, count in run["rows"] if e == epoch]
            moves = sum(b != a for a, b in zip(counts, counts[1:], strict=False))
            if log_every == 4:
                # the logging step after batch 3 is the only read inside the epoch (batch 7's shows next epoch)
                assert len(counts) == 8 and moves == 1, (epoch, counts)
            else:  # the control: logging every step reads every step, and the counter sees it
                assert moves == 7, (epoch, counts)
