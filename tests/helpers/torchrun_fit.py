"""Run under ``torchrun`` by tests/test_ddp.py: strategy="ddp" over ``num_nodes`` nodes of one process each.

Every rank writes its weights to ``FOLDER/rank<r>.pt`` (see :class:`helpers.models.WeightDump`).
Usage: ``torchrun --nnodes 2 --nproc-per-node 1 --node-rank R ... torchrun_fit.py FOLDER NUM_NODES``
"""

from __future__ import annotations

import sys

import accelkit
from helpers.models import RegressionModule, WeightDump


def main(folder: str, num_nodes: int) -> int:
    """Fit the regression module with per-rank batches of 4 for two epochs."""
    trainer = accelkit.Trainer(accelerator="cpu", strategy="ddp", num_nodes=num_nodes, devices=1, max_epochs=2,
                               logger=False, enable_checkpointing=False, enable_progress_bar=False,
                               default_root_dir=folder, callbacks=[WeightDump(folder)])
    trainer.fit(RegressionModule(batch_size=4))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
