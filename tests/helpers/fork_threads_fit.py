"""A ``ddp_fork`` fit of two workers whose steps run parallel tensor operations, from a caller that ran one before
(``warm``) or not (``cold``); prints JSON: each worker's intra-op threads and the warnings about them.
``tests/test_ddp.py`` runs it with ``OMP_NUM_THREADS=2`` (a forked worker with two threads hangs where the caller's
pool is up)."""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.models import RegressionModule, quiet_trainer  # noqa: E402

if sys.argv[1] == "warm":
    matrix = torch.randn(800, 800)
    (matrix @ matrix).sum()  # the caller's intra-op thread pool starts
out = Path(tempfile.mkdtemp())


class Threads(RegressionModule):
    """Runs a parallel operation in each step and writes the worker's intra-op thread count."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = torch.randn(600, 600)
        (x @ x).sum()
        (out / f"rank{self.global_rank}").write_text(str(torch.get_num_threads()))
        return super().training_step(batch, batch_idx)


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    trainer = quiet_trainer(tempfile.mkdtemp(), accelerator="cpu", max_epochs=1, devices=2, strategy="ddp_fork",
                            enable_model_summary=False)
    trainer.fit(Threads())
print(json.dumps({"threads": [int((out / f"rank{r}").read_text()) for r in (0, 1)],
                  "warned": [str(w.message) for w in caught if "intra-op thread" in str(w.message)]}))
