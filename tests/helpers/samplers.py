"""A Module that builds its own rank-aware sampler, a Callback recording what each rank read, and the two-process
fits that use them (for ``tests/test_sampler.py``; spawned workers import these by module name)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler, TensorDataset

import accelkit
from helpers.guards import standard_error_to


def indexed_data(n: int = 64, features: int = 4) -> TensorDataset:
    """``(x, y, index)`` samples, so a rank can report which ones it read."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True), torch.arange(n))


class PairBatches(BatchSampler):
    """A user's own batch sampler class around a (rank-aware) sampler."""


class OwnSamplerModule(accelkit.Module):
    """Trains a linear layer; ``train_dataloader`` builds a ``DistributedSampler`` by hand, as TPU/DDP guides do.

    :param mode: ``"matching"``: ``num_replicas=world_size, rank=global_rank``; ``"mismatch"``:
        ``num_replicas=4`` whatever the run; ``"batch_sampler"``: the matching sampler inside a
        :class:`PairBatches` passed as ``batch_sampler=``.
    :param n: samples in the data set.
    :param batch_size: batch size.
    :param seed: the sampler's shuffle seed.
    """

    def __init__(self, mode: str = "matching", n: int = 64, batch_size: int = 4, seed: int = 5) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.mode, self.n, self.batch_size, self.seed = mode, n, batch_size, seed
        self.built_sampler: Any = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        return F.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y, _ = batch
        self.log("val_loss", F.mse_loss(self.layer(x), y))

    def train_dataloader(self) -> DataLoader:
        replicas = 4 if self.mode == "mismatch" else self.trainer.world_size
        self.built_sampler = DistributedSampler(indexed_data(self.n), num_replicas=replicas, rank=self.global_rank,
                                                shuffle=True, seed=self.seed)
        if self.mode == "batch_sampler":
            return DataLoader(indexed_data(self.n),
                              batch_sampler=PairBatches(self.built_sampler, self.batch_size, drop_last=False))
        return DataLoader(indexed_data(self.n), batch_size=self.batch_size, sampler=self.built_sampler)


class ReadRecorder(accelkit.Callback):
    """Per rank: the sample indices read in each training epoch and (for :class:`OwnSamplerModule`) its sampler's
    epoch when the epoch started; written to ``<folder>/rank<global_rank>.json`` at teardown."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = str(folder)
        self.epochs: dict[int, list[int]] = {}
        self.sizes: dict[int, list[int]] = {}  # the size of each batch read, per epoch
        self.sampler_epochs: list[int] = []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        sampler = getattr(pl_module, "built_sampler", None)
        if sampler is not None:
            self.sampler_epochs.append(sampler.epoch)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.epochs.setdefault(trainer.current_epoch, []).extend(int(i) for i in batch[2])
        self.sizes.setdefault(trainer.current_epoch, []).append(len(batch[2]))

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        info = {"rank": trainer.global_rank, "world_size": trainer.world_size, "epochs": self.epochs,
                "sampler_epochs": self.sampler_epochs, "pid": os.getpid(), "sizes": self.sizes,
                "strategy": type(trainer.strategy).__name__}
        Path(self.folder, f"rank{trainer.global_rank}.json").write_text(json.dumps(info))


class EveryOtherReversed(torch.utils.data.Sampler):
    """What :class:`RecordingSamplerPlugin` returns: rank r reads indices r, r + R, ... in reverse."""

    def __init__(self, n: int, num_replicas: int, rank: int) -> None:
        self.indices = list(range(rank, n, num_replicas))[::-1]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class RecordingSamplerPlugin:
    """A plugin object implementing ``accelkit_distributed_sampler``. Each call is appended to
    ``<folder>/plugin-rank<rank>.jsonl`` (in the worker that makes it).

    :param answer: return :class:`EveryOtherReversed` (``True``) or ``None`` to defer to the core (``False``).
    """

    ACCELKIT_API = ">=1.0,<2"

    def __init__(self, folder: str | os.PathLike, answer: bool) -> None:
        self.folder, self.answer = str(folder), answer

    @accelkit.hookimpl
    def accelkit_distributed_sampler(self, dataset, sampler, shuffle, num_replicas, rank, seed, stage):
        call = {"shuffle": shuffle, "num_replicas": num_replicas, "rank": rank, "seed": seed, "stage": stage,
                "sampler": type(sampler).__name__}
        with open(Path(self.folder, f"plugin-rank{rank}.jsonl"), "a") as fh:
            fh.write(json.dumps(call) + "\n")
        return EveryOtherReversed(len(dataset), num_replicas, rank) if self.answer else None


class IndexStream(torch.utils.data.IterableDataset):
    """``(x, y, index)`` samples of :func:`indexed_data` as a stream: an ``IterableDataset`` that does not split
    itself."""

    def __init__(self, n: int = 64) -> None:
        self.n = n

    def __iter__(self):
        return iter(indexed_data(self.n))


class StridedStream(torch.utils.data.IterableDataset):
    """Every ``step``-th item of a stream from ``start``, split again among the loader's workers: what
    :class:`StreamShardingPlugin` returns."""

    def __init__(self, stream: Any, num_replicas: int, rank: int) -> None:
        self.stream, self.num_replicas, self.rank = stream, num_replicas, rank

    def __iter__(self):
        worker = torch.utils.data.get_worker_info()
        workers, index = (1, 0) if worker is None else (worker.num_workers, worker.id)
        step, start = self.num_replicas * workers, self.rank * workers + index
        return (item for position, item in enumerate(self.stream) if position % step == start)


class StreamShardingPlugin:
    """A plugin object implementing ``accelkit_shard_iterable``: each rank (and each of its loader's workers) reads
    every ``num_replicas``-th item of the stream."""

    ACCELKIT_API = ">=1.3,<2"

    @accelkit.hookimpl
    def accelkit_shard_iterable(self, dataset, num_replicas, rank, stage):
        return StridedStream(dataset, num_replicas, rank)


class StreamModule(OwnSamplerModule):
    """:class:`OwnSamplerModule` reading :class:`IndexStream` (``num_workers`` loader workers)."""

    def __init__(self, num_workers: int = 0) -> None:
        super().__init__()
        self.num_workers = num_workers

    def train_dataloader(self) -> DataLoader:
        return DataLoader(IndexStream(self.n), batch_size=self.batch_size, num_workers=self.num_workers)


class KeepsExtra(BatchSampler):
    """A user's batch sampler class with a setting of its own (``tag``), which a sharded copy keeps."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool, tag: str = "") -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.tag = tag

    def __iter__(self):
        assert self.tag == "kept", f"the batch sampler lost its tag: {self.tag!r}"
        return super().__iter__()


def batch_sampler_loader(n: int = 20, batch_size: int = 8, kind: type = BatchSampler, **extra: Any) -> DataLoader:
    """A loader of ``indexed_data(n)`` built with ``batch_sampler=kind(RandomSampler(data), batch_size, False)``."""
    data = indexed_data(n)
    return DataLoader(data, batch_sampler=kind(RandomSampler(data), batch_size, False, **extra))


def fit_and_read(folder: str | os.PathLike, module: accelkit.Module | None = None, loader: Any = None,
                 val: Any = None, devices: int = 2, epochs: int = 2, plugins: Any = (), strategy: str | None = None,
                 **trainer_arguments: Any) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """Fit ``module`` (an :class:`OwnSamplerModule` reading ``loader``, by default a shuffled loader of
    ``indexed_data(9)``) for ``epochs`` on ``devices`` CPU processes (``strategy``, by default ``ddp_fork`` for more
    than one), recording with a :class:`ReadRecorder` in ``folder``; return what each rank read and the sampler
    plugin calls each made."""
    folder = Path(folder)
    if module is None:
        module = OwnSamplerModule()
        loader = loader or DataLoader(indexed_data(9), batch_size=2, shuffle=True)
    strategy = strategy or ("ddp_fork" if devices > 1 else "auto")
    trainer = accelkit.Trainer(accelerator="cpu", devices=devices, strategy=strategy,
                               max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                               enable_model_summary=False, default_root_dir=folder,
                               callbacks=[ReadRecorder(folder)], plugins=list(plugins), **trainer_arguments)
    trainer.fit(module, loader, val)
    ranks = [json.loads((folder / f"rank{r}.json").read_text()) for r in range(devices)]
    calls = [[json.loads(line) for line in (folder / f"plugin-rank{r}.jsonl").read_text().splitlines()]
             if (folder / f"plugin-rank{r}.jsonl").is_file() else [] for r in range(devices)]
    return ranks, calls


#: the two-process fits of ``tests/test_sampler.py``: name -> the arguments of :func:`fit_and_read` but the folder
TWO_RANK_FITS: dict[str, Any] = {
    # a shuffled loader of 9 given to fit, a plugin that defers to the core
    "plugin_defers": lambda folder: {"seed": 11, "plugins": [RecordingSamplerPlugin(folder, answer=False)]},
    "opted_out": lambda folder: {"epochs": 1, "use_distributed_sampler": False,
                                 "loader": DataLoader(indexed_data(9), batch_size=2)},
    "plugin_replaces": lambda folder: {
        "epochs": 1, "seed": 3, "plugins": [RecordingSamplerPlugin(folder, True)],
        "loader": DataLoader(indexed_data(9), batch_size=2, shuffle=True, drop_last=True),
        "val": DataLoader(indexed_data(9), batch_size=3)},
    # the module's own DistributedSampler (64 samples, batches of 4, seed 5)
    "own_matching": lambda folder: {"module": OwnSamplerModule("matching", n=64, batch_size=4, seed=5)},
    "own_batch_sampler": lambda folder: {"module": OwnSamplerModule("batch_sampler", n=64, batch_size=4, seed=5)},
    "own_mismatch": lambda folder: {"module": OwnSamplerModule("mismatch", n=64, batch_size=4, seed=5), "epochs": 1},
    # loaders built with batch_sampler= (20 samples, batches of 8): torch's BatchSampler, under ddp_fork and
    # ddp_spawn, and a class of the user's with a setting of its own
    "batch_sampler_fork": lambda folder: {"loader": batch_sampler_loader()},
    "batch_sampler_spawn": lambda folder: {"loader": batch_sampler_loader(), "strategy": "ddp_spawn", "epochs": 1},
    "batch_sampler_subclass": lambda folder: {"loader": batch_sampler_loader(kind=KeepsExtra, tag="kept")},
    # the same under the fsdp plugin's strategy (spawned workers, gloo): plugins/fsdp/tests/test_fsdp.py
    "batch_sampler_fsdp": lambda folder: {"loader": batch_sampler_loader(), "strategy": "fsdp"},
    # a 64-item stream sharded by StreamShardingPlugin, with 0 or 2 loader workers per rank
    "stream_0_workers": lambda folder: {"module": StreamModule(num_workers=0), "epochs": 1,
                                        "plugins": [StreamShardingPlugin()]},
    "stream_2_workers": lambda folder: {"module": StreamModule(num_workers=2), "epochs": 1,
                                        "plugins": [StreamShardingPlugin()]},
}


def record_two_rank_fit(folder: str, name: str) -> dict[str, Any]:
    """Run the fit ``TWO_RANK_FITS[name]`` (in a process of its own: ``ddp_fork`` forks it) and return what each rank
    read, the plugin calls and what this process and its workers wrote to the standard error (their warnings)."""
    with standard_error_to(Path(folder, "stderr.txt")) as err:
        ranks, calls = fit_and_read(folder, **TWO_RANK_FITS[name](folder))
    return {"ranks": ranks, "calls": calls, "err": err.read_text()}


def resume_batch_sampler_mid_epoch(folder: str) -> dict[str, Any]:
    """Two ``ddp_fork`` fits of 2 processes reading :func:`batch_sampler_loader` (40 samples, batches of 4): the
    first stops after step 3 of epoch 0 with a checkpoint there, the second resumes from it to the end of epoch 0,
    and a third resumes from it on one process. Returns what each rank read in each fit, and the standard error."""
    from accelkit.callbacks import ModelCheckpoint

    root = Path(folder)
    with standard_error_to(root / "stderr.txt") as err:
        for part, extra in (("first", {"max_steps": 3}), ("second", {"max_epochs": 1}),
                            ("single", {"max_epochs": 1, "devices": 1, "strategy": "auto"})):
            (root / part).mkdir()
            checkpoints = ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=3, save_top_k=-1)
            arguments = {"devices": 2, "strategy": "ddp_fork", **extra}
            trainer = accelkit.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                                       enable_model_summary=False, default_root_dir=root / part,
                                       callbacks=[ReadRecorder(root / part), checkpoints], **arguments)
            resume = None if part == "first" else str(root / "ckpt" / "epoch=0-step=3.ckpt")
            trainer.fit(OwnSamplerModule(), batch_sampler_loader(n=40, batch_size=4), ckpt_path=resume)
    read = {part: [json.loads((root / part / f"rank{r}.json").read_text()) for r in range(2 if part != "single" else 1)]
            for part in ("first", "second", "single")}
    return {"read": read, "err": err.read_text()}
