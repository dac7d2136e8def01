"""Sampler and torch_xla-migration scenarios on real XLA (PJRT_DEVICE=CPU), each in a process of its own:
``python sampler_scenarios.py NAME OUTDIR`` writes ``OUTDIR/result.json`` (see ``xla_scenarios.py``)."""

from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path

from scenario_main import run_scenario_main
from torch.utils.data import DataLoader, DistributedSampler
from xla_scenarios import FlatBufferAllReduceSpawn, IndexedData, IndexedRegression

from accelkit import Callback, Trainer

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


_seen_lock = threading.Lock()
_seen: list[str] = []  # legacy-name warnings shown in this process


def record_legacy_name_warnings() -> list[str]:
    """From now on keep every TorchXLALegacyNameWarning this process shows (in :data:`_seen`, returned), with
    Python's own once-per-place filter off, so only accelkit's once-per-process rule can hold a repeat back.

    Process-wide on purpose: on PJRT_DEVICE=CPU the replicas are threads of one process, and
    ``warnings.catch_warnings`` is not thread-safe."""
    from accelkit_xla_spawn.legacy_names import TorchXLALegacyNameWarning

    with _seen_lock:
        if not getattr(warnings.showwarning, "records_legacy_names", False):
            shown_before = warnings.showwarning

            def show(message, category, filename, lineno, file=None, line=None):
                if issubclass(category, TorchXLALegacyNameWarning):
                    _seen.append(f"{category.__name__}: {message}")
                else:
                    shown_before(message, category, filename, lineno, file, line)

            show.records_legacy_names = True
            warnings.showwarning = show
            warnings.simplefilter("always", TorchXLALegacyNameWarning)
    return _seen


class OldNames(IndexedRegression):
    """The TPU guide's ``train_dataloader`` still written for torch_xla 1.x: the sampler from
    ``xm.xrt_world_size()`` and ``xm.get_ordinal()`` (``how="attribute"``) or from the names imported with
    ``from torch_xla.core.xla_model import ...`` (``how="import"``). Each name is called twice per loader."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.built_sampler = None
        self.runtime: list[int] = []

    def train_dataloader(self):
        import torch_xla.core.xla_model as xm

        record_legacy_name_warnings()
        data = IndexedData(N)
        if self.how == "attribute":
            world, rank = xm.xrt_world_size(), xm.get_ordinal()
            self.runtime = [xm.xrt_world_size(), xm.get_ordinal()]
        else:
            from torch_xla.core.xla_model import get_ordinal, xrt_world_size

            world, rank = xrt_world_size(), get_ordinal()
            self.runtime = [xrt_world_size(), get_ordinal()]
        self.built_sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=SEED)
        return DataLoader(data, batch_size=BATCH, sampler=self.built_sampler, drop_last=True)


class ReadsAndWarnings(Reads):
    """:class:`Reads` plus this replica's process id and the legacy-name warnings its process showed."""

    def teardown(self, trainer, module, stage):
        super().teardown(trainer, module, stage)
        path = Path(self.out, f"rank{trainer.global_rank}.json")
        info = json.loads(path.read_text())
        info.update(pid=os.getpid(), caught=list(record_legacy_name_warnings()))
        path.write_text(json.dumps(info))


def _names_outside_a_run() -> dict:
    """What torch_xla itself says about the 1.x names when no XLA strategy runs."""
    import torch_xla.core.xla_model as xm

    try:
        xm.xrt_world_size()
    except AttributeError as exc:
        error = f"{type(exc).__name__}: {exc}"
    else:
        error = None
    return {"left_on_xla_model": [n for n in ("xrt_world_size", "get_ordinal") if hasattr(xm, n)],
            "call_outside": error}


def scenario_legacy_names(out: Path) -> dict:
    """xla_single: the guide's 1.x names inside the run (attribute, then import form, one process), then outside."""
    quiet = dict(logger=False, enable_progress_bar=False, enable_checkpointing=False, max_epochs=1,
                 default_root_dir=out)
    result = {}
    seen = record_legacy_name_warnings()
    for how in ("attribute", "import"):
        module, before = OldNames(how), len(seen)
        Trainer(accelerator="xla", devices=1, **quiet).fit(module)
        result[how] = {"runtime": module.runtime, "caught": seen[before:],
                       "sampler": [module.built_sampler.num_replicas, module.built_sampler.rank]}
    result["after"] = _names_outside_a_run()
    return result


def scenario_legacy_names_spawn(out: Path) -> dict:
    """xla_spawn on CPU_NUM_DEVICES replicas (collective swapped, see FlatBufferAllReduceSpawn): the guide's
    sampler with xm.xrt_world_size()/xm.get_ordinal() in every replica, 2 epochs."""
    world = int(os.environ["CPU_NUM_DEVICES"])
    trainer = Trainer(accelerator="xla", devices=world, strategy=FlatBufferAllReduceSpawn(), max_epochs=2,
                      logger=False, enable_progress_bar=False, enable_checkpointing=False,
                      callbacks=[ReadsAndWarnings(out)], default_root_dir=out)
    trainer.fit(OldNames("attribute"))
    return {"ranks": [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)],
            "expected": [expected_orders(world, r, 2) for r in range(world)]}


def scenario_single(out: Path) -> dict:
    """The two one-core scenarios, one after the other in this process: ``sampler_single`` (2.x names only, so no
    legacy-name warning yet), then ``legacy_names`` (the first legacy names this process calls)."""
    (out / "sampler").mkdir()
    (out / "legacy").mkdir()
    return {"sampler_single": scenario_sampler_single(out / "sampler"),
            "legacy_names": scenario_legacy_names(out / "legacy")}


SCENARIOS = {"sampler_single": scenario_sampler_single, "sampler_spawn": scenario_sampler_spawn,
             "legacy_names": scenario_legacy_names, "legacy_names_spawn": scenario_legacy_names_spawn,
             "single": scenario_single}

if __name__ == "__main__":
    run_scenario_main(SCENARIOS)
