"""The progress bar on XLA (PJRT on the host CPU): it shows the logged loss, read from the device only when the
bar redraws its line (as Lightning's bar reads ``progress_bar_metrics`` when it updates); a batch end that does not
redraw reads nothing, and without a logger no logging step reads either."""

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
    """After the bar's own batch-end work: torch_xla's host-side count of device-to-host transfers. At each epoch's
    start it sets how often the bar may redraw (tqdm's ``mininterval``)."""
    def __init__(self, mininterval):
        self.rows, self.mininterval = [], mininterval

    def on_train_epoch_start(self, trainer, module):
        trainer.progress_bar_callback.train_progress_bar.mininterval = self.mininterval

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        import torch_xla.debug.metrics as met
        data = met.metric_data("TransferFromDeviceTime")
        self.rows.append([trainer.current_epoch, batch_idx, int(data[0]) if data else 0])

result = {}
# never a redraw inside an epoch after its first batch, then a redraw at every batch end (the control)
for name, mininterval in (("never", 1e9), ("always", 0.0)):
    bar, transfers = TQDMProgressBar(), Transfers(mininterval)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    trainer = accelkit.Trainer(accelerator="xla", devices=1, max_epochs=2, logger=False, enable_checkpointing=False,
                               enable_model_summary=False, callbacks=[bar, transfers], log_every_n_steps=4)
    trainer.fit(Model(), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8))
    result[name] = {"rows": transfers.rows, "postfix": bar.train_progress_bar.postfix}
print("RESULT " + json.dumps(result))
'''


def test_the_bar_reads_the_device_only_when_it_redraws(run_python) -> None:
    proc = run_python(SCRIPT)
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    for name in ("never", "always"):
        run = result[name]
        assert "train_loss=" in run["postfix"], (name, run["postfix"])
        for epoch in (0, 1):
            counts = [count for e, _, count in run["rows"] if e == epoch]
            moves = sum(b != a for a, b in zip(counts, counts[1:], strict=False))
            assert len(counts) == 8, (name, epoch, counts)
            if name == "never":
                # no redraw after the first batch: no read at any later batch end, the logging step included
                assert moves == 0, (epoch, counts)
            else:  # the control: a bar redrawing at every batch end reads every step, and the counter sees it
                assert moves == 7, (epoch, counts)
