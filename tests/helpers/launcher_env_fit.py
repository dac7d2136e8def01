"""Started by tests/test_environments.py once per rank, with a launcher's variables (SLURM's or Open MPI's) set
as ``srun``/``mpirun`` would set them: ``strategy="auto"`` must join the other rank with ``ddp``.

Every rank writes its weights to ``FOLDER/rank<r>.pt`` (see :class:`helpers.models.WeightDump`) and prints one
JSON line: the chosen strategy, the detected environment, the world size and its global rank.
Usage: ``launcher_env_fit.py FOLDER``
"""

from __future__ import annotations

import json
import sys

import accelkit
from helpers.models import RegressionModule, WeightDump


def main(folder: str) -> int:
    """Three steps of the regression module on per-rank batches of 4."""
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy="auto", max_steps=3, logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                               default_root_dir=folder, callbacks=[WeightDump(folder)])
    trainer.fit(RegressionModule(batch_size=4))
    environment = trainer.strategy.cluster_environment
    print(json.dumps({"strategy": trainer.strategy.name, "environment": getattr(environment, "name", None),
                      "world_size": trainer.world_size, "rank": trainer.global_rank,
                      "global_step": trainer.global_step}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
