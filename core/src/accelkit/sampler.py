"""Distributed sampling: each rank reads its own shard of the data.

The Trainer puts a :class:`ShardSampler` into every DataLoader of a distributed run (plugins can supply
another through the ``accelkit_distributed_sampler`` hook). ``Trainer(use_distributed_sampler=False)`` opts out.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterator, Sized

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler, SequentialSampler


class ShardSampler(Sampler[int]):
    """Yields the indices of one rank's shard.

    The global order is ``range(len(dataset))`` (shuffled with ``seed + epoch`` when ``shuffle``), or the
    order of a wrapped ``sampler``. It is padded by repeating from its start up to a multiple of
    ``num_replicas`` so every rank gets ``ceil(n / num_replicas)`` indices; rank ``r`` takes positions
    ``r, r + num_replicas, ...``. Only the padding (fewer than ``num_replicas`` indices) is seen twice.

    :param data_source: the dataset (anything with ``len``).
    :param num_replicas: number of ranks.
    :param rank: this rank.
    :param shuffle: shuffle the global order (identically on every rank) each epoch.
    :param seed: base seed of the shuffle.
    :param sampler: a user sampler whose order is sharded instead of ``range(len(dataset))``.
    """

    def __init__(self, data_source: Sized, num_replicas: int, rank: int, shuffle: bool = False, seed: int = 0,
                 sampler: Sampler | None = None) -> None:
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must be in [0, num_replicas={num_replicas})")
        self.data_source = data_source
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed = shuffle, seed
        self.sampler = sampler
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` (forwarded to a wrapped sampler that has ``set_epoch``)."""
        self.epoch = epoch
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def global_order(self) -> list[int]:
        """The order all ranks agree on, before sharding and padding."""
        if self.sampler is not None:
            return [int(i) for i in self.sampler]
        n = len(self.data_source)
        if not self.shuffle:
            return list(range(n))
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        return torch.randperm(n, generator=generator).tolist()

    def _source_len(self) -> int:
        return len(self.sampler) if self.sampler is not None else len(self.data_source)

    def __len__(self) -> int:
        return math.ceil(self._source_len() / self.num_replicas)

    def __iter__(self) -> Iterator[int]:
        order = self.global_order()
        if not order:
            return iter(())
        total = math.ceil(len(order) / self.num_replicas) * self.num_replicas
        padded = (order * math.ceil(total / len(order)))[:total]
        return iter(padded[self.rank:total:self.num_replicas])


def default_distributed_sampler(dataset: Any, sampler: Any, shuffle: bool, num_replicas: int, rank: int,
                                seed: int) -> Sampler:
    """The core's sampler choice: shard the dataset, or the user's own sampler."""
    plain = sampler is None or type(sampler) in (SequentialSampler, RandomSampler)
    return ShardSampler(dataset, num_replicas, rank, shuffle=shuffle, seed=seed, sampler=None if plain else sampler)


_LOADER_ARGS = ("num_workers", "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
                "multiprocessing_context", "generator", "prefetch_factor", "persistent_workers")


def distribute_dataloader(loader: Any, hook: Any, num_replicas: int, rank: int, seed: int, stage: str) -> Any:
    """A copy of ``loader`` whose sampler gives this rank its shard (``loader`` itself where that is impossible)."""
    if not isinstance(loader, DataLoader):
        return loader
    if isinstance(loader.dataset, IterableDataset):
        warnings.warn(
            "an IterableDataset is used in a distributed run: accelkit cannot shard it, so every rank reads the "
            "whole stream unless the dataset splits itself (see torch.utils.data.get_worker_info and the rank).",
            UserWarning, stacklevel=3)
        return loader
    if loader.batch_sampler is not None and type(loader.batch_sampler) is not BatchSampler:
        warnings.warn(
            f"the DataLoader uses a custom batch_sampler ({type(loader.batch_sampler).__name__}); accelkit leaves it "
            "as it is, so it must shard the data itself (or pass use_distributed_sampler=False to silence this).",
            UserWarning, stacklevel=3)
        return loader
    shuffle = isinstance(loader.sampler, RandomSampler) and stage == "fit"
    new_sampler = hook(dataset=loader.dataset, sampler=loader.sampler, shuffle=shuffle, num_replicas=num_replicas,
                       rank=rank, seed=seed, stage=stage)
    kwargs = {name: getattr(loader, name) for name in _LOADER_ARGS if hasattr(loader, name)}
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs.pop("persistent_workers", None)
    return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=new_sampler, **kwargs)
