"""Sampler and torch_xla-migration scenarios on real XLA (PJRT_DEVICE=CPU), each in a fresh interpreter:
``python sampler_scenarios.py NAME OUTDIR`` writes ``OUTDIR/result.json`` (see ``xla_scenarios.py``)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from torch.utils.data import DataLoader, DistributedSampler

from accelkit import Callback, Trainer
from xla_scenarios import FlatBufferAllReduceSpawn, IndexedData, IndexedRegression

N, BATCH, SEED = 64, 4, 3


class HandBuiltSampler(IndexedRegression):
    """The TPU guide's ``train_dataloader`` with torch_xla 2.x names: a DistributedSampler built by hand.

    :param offset: added to both ``world_size()`` and ``global_ordinal()``. With 1 on a single core the sampler
        is ``num_replicas=2, rank=1``: only the second half is read, which shows the loader was used as given.
    """

    def __init__(self, offset: int = 0) -> None:
        super().__init__()
        self.offset = offset
        self.built_sampler = None
        self.runtime: list[int] = []

    def train_dataloader(self):
        import torch_xla.runtime as xr

        self.runtime = [xr.world_size(), xr.global_ordinal()]
        data = IndexedData(N)
        self.built_sampler = DistributedSampler(data, num_replicas=xr.world_size() + self.offset,
                                                rank=xr.global_ordinal() + self.offset, shuffle=True, seed=SEED)
        return DataLoader(data, batch_size=BATCH, sampler=self.built_sampler, drop_last=True)


class Reads(Callback):
    """Per epoch: the sample indices read and the sampler's epoch at the epoch's start; at teardown, in each
    replica, ``rank<global_rank>.json``."""

    def __init__(self, out: Path) -> None:
        self.out = str(out)
        self.epochs: dict[int, list[int]] = {}
        self.sampler_epochs: list[int] = []

    def on_train_epoch_start(self, trainer, module):
        self.sampler_epochs.append(module.built_sampler.epoch)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.epochs.setdefault(trainer.current_epoch, []).extend(int(i) for i in batch[2].cpu())

    def teardown(self, trainer, module, stage):
        info = {"rank": trainer.global_rank, "world_size": trainer.world_size, "runtime": module.runtime,
                "sampler": [module.built_sampler.num_replicas, module.built_sampler.rank],
                "epochs": self.epochs, "sampler_epochs": self.sampler_epochs}
        Path(self.out, f"rank{trainer.global_rank}.json").write_text(json.dumps(info))


def expected_orders(num_replicas: int, rank: int, epochs: int) -> list[list[int]]:
    """What ``DistributedSampler`` itself yields for each epoch, cut to whole batches."""
    orders = []
    for epoch in range(epochs):
        sampler = DistributedSampler(range(N), num_replicas=num_replicas, rank=rank, shuffle=True, seed=SEED)
        sampler.set_epoch(epoch)
        order = list(sampler)
        orders.append(order[: len(order) // BATCH * BATCH])
    return orders


def scenario_sampler_single(out: Path) -> dict:
    """xla_single, DistributedSampler(num_replicas=2, rank=1) built in train_dataloader, 3 epochs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = Trainer(accelerator="xla", devices=1, max_epochs=3, logger=False, enable_progress_bar=False,
                          enable_checkpointing=False, callbacks=[Reads(out)], default_root_dir=out)
        trainer.fit(HandBuiltSampler(offset=1))
    rank0 = json.loads((out / "rank0.json").read_text())
    return {"strategy": type(trainer.strategy).__name__, **rank0, "expected": expected_orders(2, 1, 3),
            "warnings": [str(w.message) for w in caught]}


def scenario_sampler_spawn(out: Path) -> dict:
    """xla_spawn on CPU_NUM_DEVICES replicas (collective swapped, see FlatBufferAllReduceSpawn), the guide's
    sampler with torch_xla.runtime.world_size()/global_ordinal(), 2 epochs."""
    world = int(__import__("os").environ["CPU_NUM_DEVICES"])
    trainer = Trainer(accelerator="xla", devices=world, strategy=FlatBufferAllReduceSpawn(), max_epochs=2,
                      logger=False, enable_progress_bar=False, enable_checkpointing=False,
                      callbacks=[Reads(out)], default_root_dir=out)
    trainer.fit(HandBuiltSampler(offset=0))
    return {"ranks": [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)],
            "expected": [expected_orders(world, r, 2) for r in range(world)]}


class OldNames(IndexedRegression):
    """A train_dataloader still written for torch_xla 1.x."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def train_dataloader(self):
        import torch_xla.core.xla_model as xm

        data = IndexedData(N)
        if self.how == "attribute":
            sampler = DistributedSampler(data, num_replicas=xm.xrt_world_size(), rank=xm.get_ordinal())
        else:
            from torch_xla.core.xla_model import get_ordinal  # noqa: F401

            sampler = None
        return DataLoader(data, batch_size=BATCH, sampler=sampler)


def _failure(trainer: Trainer, how: str) -> dict:
    try:
        trainer.fit(OldNames(how))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        cause = exc.__cause__
        return {"type": type(exc).__name__, "message": str(exc),
                "cause_type": type(cause).__name__ if cause is not None else None,
                "cause_message": str(cause) if cause is not None else None}
    return {"type": None}


def scenario_removed_api(out: Path) -> dict:
    """torch_xla 1.x names used inside the run: on xla_single (in process) and xla_spawn (in the replicas)."""
    quiet = dict(logger=False, enable_progress_bar=False, enable_checkpointing=False, max_epochs=1,
                 default_root_dir=out)
    result = {}
    for how in ("attribute", "import"):
        result[f"single_{how}"] = _failure(Trainer(accelerator="xla", devices=1, **quiet), how)
    return result


def scenario_removed_api_spawn(out: Path) -> dict:
    """The same name, used in every replica of the stock xla_spawn strategy (no collective is reached)."""
    world = int(__import__("os").environ["CPU_NUM_DEVICES"])
    trainer = Trainer(accelerator="xla", devices=world, strategy="xla_spawn", logger=False,
                      enable_progress_bar=False, enable_checkpointing=False, max_epochs=1, default_root_dir=out)
    return {"spawn_attribute": _failure(trainer, "attribute")}


SCENARIOS = {"sampler_single": scenario_sampler_single, "sampler_spawn": scenario_sampler_spawn,
             "removed_api": scenario_removed_api, "removed_api_spawn": scenario_removed_api_spawn}

if __name__ == "__main__":
    name, outdir = sys.argv[1], Path(sys.argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    data = SCENARIOS[name](outdir)
    (outdir / "result.json").write_text(json.dumps(data, indent=1, default=str))
    print("scenario", name, "done")
