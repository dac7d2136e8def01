"""Distributed sampling: each rank reads its own shard of the data.

The Trainer puts a :class:`ShardSampler` into every DataLoader of a distributed run (plugins can supply
another through the ``accelkit_distributed_sampler`` hook). ``Trainer(use_distributed_sampler=False)`` opts out.

A loader whose sampler already knows about ranks is used as given, as Lightning does: a
``torch.utils.data.DistributedSampler``, or any sampler (or batch sampler, or a batch sampler's inner sampler)
whose ``num_replicas`` and ``rank`` attributes are set. If those disagree with the run's world size and rank,
a warning names both. Neither the hook nor the core re-shards such a loader.

A loader built with ``batch_sampler=`` keeps its batches: the batch sampler's own ``sampler`` is sharded
(:func:`shard_batch_sampler`), as Lightning does; a batch sampler without one is refused with what to do.

Each epoch the loop calls :func:`set_epoch` on the loader, which reaches the sampler(s) that shuffle per epoch.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any, Protocol, TypeVar

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from accelkit.errors import ConfigurationError

#: a loader as given (a DataLoader, a wrapper of one, or any iterable), returned as it is where it is not re-built
_L = TypeVar("_L")


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
                 sampler: Iterable[int] | None = None) -> None:
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
        if self.sampler is None:
            return len(self.data_source)
        if not isinstance(self.sampler, Sized):
            raise TypeError(f"the wrapped sampler {self.sampler!r} has no length, so the shards of its order have "
                            "none either; give it a __len__ to know a rank's number of batches")
        return len(self.sampler)

    def __len__(self) -> int:
        return math.ceil(self._source_len() / self.num_replicas)

    def __iter__(self) -> Iterator[int]:
        order = self.global_order()
        if not order:
            return iter(())
        total = math.ceil(len(order) / self.num_replicas) * self.num_replicas
        padded = (order * math.ceil(total / len(order)))[:total]
        return iter(padded[self.rank:total:self.num_replicas])


def is_rank_aware(sampler: object) -> bool:
    """Whether ``sampler`` already picks one rank's share of the data.

    ``True`` for a ``torch.utils.data.DistributedSampler`` and for any object whose ``num_replicas`` and
    ``rank`` attributes are both set (not ``None``), such as :class:`ShardSampler` or a user's own class.
    """
    if sampler is None:
        return False
    if isinstance(sampler, DistributedSampler):
        return True
    return getattr(sampler, "num_replicas", None) is not None and getattr(sampler, "rank", None) is not None


def rank_aware_sampler(loader: object) -> object | None:
    """The rank-aware object of ``loader`` (see :func:`is_rank_aware`), or ``None``.

    Looked for, in order, as ``loader.sampler``, ``loader.batch_sampler`` and ``loader.batch_sampler.sampler``.
    """
    batch_sampler = getattr(loader, "batch_sampler", None)
    for candidate in (getattr(loader, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None)):
        if is_rank_aware(candidate):
            return candidate
    return None


def warn_if_ranks_differ(sampler: object, num_replicas: int, rank: int) -> bool:
    """Warn when a rank-aware ``sampler`` splits the data differently from the run; return whether it did.

    :param sampler: a rank-aware sampler (its ``num_replicas`` and ``rank`` are read).
    :param num_replicas: the run's world size.
    :param rank: this process's global rank.
    """
    theirs = (getattr(sampler, "num_replicas", None), getattr(sampler, "rank", None))
    if theirs == (num_replicas, rank):
        return False
    warnings.warn(
        f"the DataLoader's {type(sampler).__name__} has num_replicas={theirs[0]}, rank={theirs[1]}, but this run "
        f"has world size {num_replicas} and this process is rank {rank}. accelkit uses a rank-aware sampler as "
        f"given, so the data is split into {theirs[0]} shard(s) and this process reads shard {theirs[1]}, not "
        f"the split of the processes. Build it with num_replicas=trainer.world_size, rank=trainer.global_rank "
        f"(on XLA: torch_xla.runtime.world_size(), torch_xla.runtime.global_ordinal()), or pass a plain sampler "
        f"and let accelkit shard it.",
        UserWarning, stacklevel=3)
    return True


def default_distributed_sampler(dataset: Sized, sampler: Iterable[int] | None, shuffle: bool, num_replicas: int,
                                rank: int, seed: int) -> Iterable[int]:
    """The core's sampler choice: shard the dataset, or the user's own sampler.

    A rank-aware ``sampler`` (see :func:`is_rank_aware`) is returned as it is: it already reads one rank's
    share, and sharding it again would give each rank a fraction of that share.
    """
    if sampler is not None and is_rank_aware(sampler):
        return sampler
    plain = sampler is None or type(sampler) in (SequentialSampler, RandomSampler)
    return ShardSampler(dataset, num_replicas, rank, shuffle=shuffle, seed=seed, sampler=None if plain else sampler)


_LOADER_ARGS = ("batch_size", "num_workers", "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
                "multiprocessing_context", "generator", "prefetch_factor", "persistent_workers",
                "pin_memory_device", "in_order")


def rebuild_loader(loader: DataLoader, **changes: Any) -> DataLoader:
    """A ``DataLoader`` like ``loader`` with ``changes`` (a ``sampler``, a ``worker_init_fn``, a ``dataset`` ...):
    every setting carries over; without a new ``sampler`` its sampler (or batch sampler) is kept."""
    kwargs = {name: getattr(loader, name) for name in _LOADER_ARGS if hasattr(loader, name)}
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs.pop("persistent_workers", None)
    dataset = changes.pop("dataset", loader.dataset)
    if "sampler" not in changes and "batch_sampler" not in changes:
        if loader.batch_size is None:  # built with a batch_sampler: keep it
            kwargs.pop("batch_size", None)
            kwargs.pop("drop_last", None)
            changes["batch_sampler"] = loader.batch_sampler
        else:  # a stream's loader made its own sampler, which a DataLoader refuses to be given
            changes["sampler"] = None if isinstance(dataset, IterableDataset) else loader.sampler
    kwargs.update(changes)
    return DataLoader(dataset, **kwargs)


def distribute_dataloader(loader: _L, hook: Callable[..., Sampler], num_replicas: int, rank: int, seed: int, stage: str,
                          shard_iterable: Callable[..., Dataset | None] | None = None) -> _L | DataLoader:
    """A copy of ``loader`` whose sampler gives this rank its shard (``loader`` itself where that is impossible
    or not wanted).

    ``loader`` is returned unchanged when it is not a ``DataLoader``, when its sampler, batch sampler or the
    batch sampler's inner sampler is rank-aware (with a warning if that sampler's ``num_replicas``/``rank``
    differ from ``num_replicas``/``rank``), when ``num_replicas`` is 1, and for an ``IterableDataset`` no plugin
    shards (through ``accelkit_shard_iterable``; with a warning: nothing shards it). A loader built with
    ``batch_sampler=`` is sharded through its batch sampler's ``sampler`` (:func:`shard_batch_sampler`).

    :param loader: the user's loader (or any iterable).
    :param hook: the ``accelkit_distributed_sampler`` hook caller; called with keyword arguments.
    :param num_replicas: the run's world size.
    :param rank: this process's global rank.
    :param seed: base seed of the shuffle.
    :param stage: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
    :param shard_iterable: the ``accelkit_shard_iterable`` hook caller, asked for an ``IterableDataset``.
    """
    if not isinstance(loader, DataLoader):
        return loader
    given = rank_aware_sampler(loader)
    if given is not None:
        warn_if_ranks_differ(given, num_replicas, rank)
        return loader
    if num_replicas == 1:
        return loader
    if isinstance(loader.dataset, IterableDataset):
        shard = None if shard_iterable is None else shard_iterable(
            dataset=loader.dataset, num_replicas=num_replicas, rank=rank, stage=stage)
        if shard is not None:
            return rebuild_loader(loader, dataset=shard, sampler=None)
        warnings.warn(
            "an IterableDataset is used in a distributed run: accelkit cannot shard it, so every rank reads the "
            "whole stream unless the dataset splits itself (see torch.utils.data.get_worker_info and the rank) or a "
            "plugin shards it (the accelkit_shard_iterable hook).",
            UserWarning, stacklevel=3)
        return loader
    if loader.batch_size is None and loader.batch_sampler is not None:  # built with batch_sampler=
        return shard_batch_sampler(loader, hook, num_replicas, rank, seed, stage)
    shuffle = isinstance(loader.sampler, RandomSampler) and stage == "fit"
    new_sampler = hook(dataset=loader.dataset, sampler=loader.sampler, shuffle=shuffle, num_replicas=num_replicas,
                       rank=rank, seed=seed, stage=stage)
    return rebuild_loader(loader, sampler=new_sampler)


def shard_batch_sampler(loader: DataLoader, hook: Callable[..., Sampler], num_replicas: int, rank: int, seed: int,
                        stage: str) -> DataLoader:
    """A copy of ``loader`` (built with ``batch_sampler=``) whose batches are drawn from this rank's shard of the
    batch sampler's own ``sampler``, as Lightning injects its distributed sampler into a batch sampler.

    The ``accelkit_distributed_sampler`` hook is asked about the batch sampler's ``sampler`` (``shuffle`` when
    it is a ``RandomSampler`` and the stage is ``fit``). Torch's plain ``BatchSampler`` becomes the loader's
    ``batch_size``/``drop_last`` around the shard (the loader a ``batch_size=`` loader would be, so a mid-epoch
    resume maps samples exactly as for one); any other batch sampler is copied with its ``sampler`` replaced, so
    its own settings stay. Arguments as :func:`distribute_dataloader`'s.

    :raises ConfigurationError: naming the batch sampler, when it has no ``sampler`` to shard, or when its copy
        does not draw from the replaced ``sampler`` (its length does not follow the shard's); the message says
        what to do instead.
    """
    batches: Any = loader.batch_sampler  # a sampler of index lists (typed by torch as an Iterable)
    name = type(batches).__name__
    inner = getattr(batches, "sampler", None)
    cannot = (f"the DataLoader's batch_sampler {name} cannot be sharded over the {num_replicas} processes of this "
              f"run: ")
    remedy = ("Build it around a sampler it keeps as its `sampler` attribute and draws from when iterated (as "
              "torch's BatchSampler does: accelkit then shards that sampler), give it num_replicas and rank "
              "attributes and shard it yourself (accelkit then uses it as given), or pass "
              "Trainer(use_distributed_sampler=False) if every process should read all of it.")
    if inner is None:
        raise ConfigurationError(cannot + "it has no `sampler` attribute whose indices accelkit could split. "
                                 + remedy)
    shuffle = isinstance(inner, RandomSampler) and stage == "fit"
    shard = hook(dataset=loader.dataset, sampler=inner, shuffle=shuffle, num_replicas=num_replicas, rank=rank,
                 seed=seed, stage=stage)
    if type(batches) is BatchSampler:
        return rebuild_loader(loader, sampler=shard, batch_size=batches.batch_size, drop_last=batches.drop_last)
    sharded = copy.copy(batches)
    sharded.sampler = shard
    size = getattr(batches, "batch_size", None)
    if isinstance(size, int) and size > 0 and isinstance(sharded, Sized) and isinstance(shard, Sized):
        expected = len(shard) // size if getattr(batches, "drop_last", False) else math.ceil(len(shard) / size)
        if len(sharded) != expected:
            raise ConfigurationError(
                cannot + f"with its `sampler` replaced by this process's shard of {len(shard)} samples it still "
                f"gives {len(sharded)} batches of {size} where {expected} were expected, so it does not draw from "
                "its `sampler` attribute when iterated. " + remedy)
    return rebuild_loader(loader, batch_sampler=sharded, batch_size=1, drop_last=False)


#: where a device loader wrapping a DataLoader keeps it, for :func:`set_epoch` to look through: ``loader`` (the
#: public name: give a device loader of your own this attribute), and ``_loader``, where torch_xla's
#: ``MpDeviceLoader`` (a third party's class) keeps it
WRAPPED_LOADER_ATTRIBUTES = ("loader", "_loader")


class SetsEpoch(Protocol):
    """A sampler (or batch sampler) that draws a new order per epoch: :func:`set_epoch` calls it."""

    def set_epoch(self, epoch: int) -> object:
        """Draw the order of epoch ``epoch``."""


def set_epoch(loader: object, epoch: int) -> list[SetsEpoch]:
    """Call ``set_epoch(epoch)`` on the samplers of ``loader`` that have it; return the objects called.

    The loop calls this at the start of every epoch, before iterating the loader, so a shuffling sampler
    (``DistributedSampler(shuffle=True)``, :class:`ShardSampler`) draws a new order per epoch that every rank
    agrees on. Reached, each at most once: ``loader.sampler``, ``loader.batch_sampler`` (beyond Lightning, which
    skips it) and ``loader.batch_sampler.sampler``. A device loader that wraps the DataLoader without exposing
    a sampler is looked through when it keeps the wrapped loader under a name of
    :data:`WRAPPED_LOADER_ATTRIBUTES`. Objects without
    ``set_epoch`` and loaders that are plain iterables are left alone. Several loaders read as one (a
    :class:`accelkit.utilities.CombinedLoader`, whose ``flattened`` lists them) each get it.

    :param loader: a DataLoader, a wrapper of one, or any iterable.
    :param epoch: the epoch about to start (``trainer.current_epoch``).
    """
    flattened = getattr(loader, "flattened", None)
    if isinstance(flattened, list):  # several loaders read as one (a CombinedLoader): each gets the epoch
        return [called for part in flattened for called in set_epoch(part, epoch)]
    inner = loader
    for _ in range(4):  # look through a few layers of device-loader wrappers
        if hasattr(inner, "sampler") or hasattr(inner, "batch_sampler"):
            break
        wrapped = next((getattr(inner, name) for name in WRAPPED_LOADER_ATTRIBUTES if hasattr(inner, name)), None)
        if wrapped is None:
            break
        inner = wrapped
    batch_sampler = getattr(inner, "batch_sampler", None)
    found: dict[int, SetsEpoch] = {}
    for candidate in (getattr(inner, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None)):
        if candidate is not None and callable(getattr(candidate, "set_epoch", None)):
            found.setdefault(id(candidate), candidate)
    for candidate in found.values():
        candidate.set_epoch(epoch)
    return list(found.values())


def seed_workers(loader: _L, rank: int) -> _L | DataLoader:
    """``loader`` with each worker process seeded reproducibly for ``rank`` (a copy with
    :func:`~accelkit.utilities.seed.worker_init_function`) after ``seed_everything(workers=True)``; ``loader`` itself
    when that was not asked for, it has no workers, or it has a ``worker_init_fn`` of its own."""
    import functools
    import os

    from accelkit.utilities.seed import SEED_WORKERS_ENV, worker_init_function

    if os.environ.get(SEED_WORKERS_ENV) == "1" and isinstance(loader, DataLoader) and \
            loader.num_workers > 0 and loader.worker_init_fn is None:
        return rebuild_loader(loader, worker_init_fn=functools.partial(worker_init_function, rank=rank))
    return loader
