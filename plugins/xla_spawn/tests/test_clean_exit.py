"""A completed XLA run exits 0 (issue 17, item 5, the XLA part).

The cause was the device loader: torch_xla's ``MpDeviceLoader`` keeps its two upload threads (one reading the
DataLoader ahead, one copying batches to the device) running after a loop that stops before the end of its
loader (the sanity check, ``limit_*_batches``, ``max_steps``), until the interpreter exits; one caught in
torch_xla's C++ code by the shutdown aborts the process (``terminate called without an active exception``,
exit 134) after every result was printed. The strategies' ``DeviceLoader`` stops them when the loop ends.

Two tests: no upload thread is left after fit/validate/test/predict (deterministic), and complete runs of
``benchmarks/exit_codes.py`` exit 0 (the abort was timing-dependent: 4 of 5 such runs aborted before the fix).
Two runs of ``xla``, not three: the first test catches the cause every time, and two runs would still see an
abort as frequent as the old one 24 times in 25 (three: 124 in 125), for the cost of a whole XLA process less.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.xla, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]

ROOT = Path(__file__).resolve().parents[3]

STAGES = r"""
import json, threading, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import accelkit

class M(accelkit.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)
    def training_step(self, batch, i):
        return nn.functional.mse_loss(self.layer(batch[0]), batch[1])
    def validation_step(self, batch, i):
        self.log("val_loss", nn.functional.mse_loss(self.layer(batch[0]), batch[1]))
    test_step = validation_step
    def predict_step(self, batch, i):
        return self.layer(batch[0])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

x = torch.randn(640, 4)
def loader():  # 40 batches: more than the device loader reads ahead (16 on the host, 8 on the device)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)

trainer = accelkit.Trainer(accelerator="tpu", devices=1, max_epochs=2, limit_train_batches=5, limit_val_batches=3,
                           limit_test_batches=3, limit_predict_batches=2, logger=False, enable_progress_bar=False,
                           enable_checkpointing=False, enable_model_summary=False)
model = M()
trainer.fit(model, loader(), loader())
trainer.validate(model, loader(), verbose=False)
trainer.test(model, loader(), verbose=False)
trainer.predict(model, loader())
upload = [t.name for t in threading.enumerate() if t.name.endswith(("(_loader_worker)", "(_worker)"))]
print("RESULT " + json.dumps({"upload_threads": upload, "threads": [t.name for t in threading.enumerate()]}))
"""


def test_no_upload_thread_is_left_after_loops_that_stop_early(run_python) -> None:
    """Six loops stop early here (sanity check, 2 x train and validation, validate, test, predict): before the
    fix, each left its two upload threads behind (12 at the end)."""
    proc = run_python(STAGES)
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result["upload_threads"] == [], result["threads"]


@pytest.mark.parametrize("kind, runs", [("xla", 2), ("xla_spawn", 1)])
def test_complete_runs_exit_0(kind, runs, tmp_path, prewarmed) -> None:
    # the benchmark's driver (which imports no torch_xla) forked from the prewarmed interpreter; it runs each user
    # script in a fresh interpreter
    command = [str(ROOT / "benchmarks" / "exit_codes.py"), "--kind", kind, "--runs", str(runs)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "XRT_", "TPU_", "ACCELKIT_"))}
    proc = prewarmed.run(command, cwd=tmp_path, env=env, timeout=300 * runs)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert f"{kind}: 0 of {runs} runs failed" in proc.stdout, proc.stdout
