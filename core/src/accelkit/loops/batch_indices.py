"""Which dataset samples each batch of a loader holds, for prediction writers (``batch_indices``).

A DataLoader draws its batches' indices from its (batch) sampler in the process that iterates it, also when
worker processes load the samples and a device loader reads ahead. :func:`track_batch_indices` rebuilds the
loader around a sampler that records each batch's indices as they are drawn, in order, so the indices of batch
``i`` are the ``i``-th recorded list.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, Sampler

from accelkit.strategies.sampler import rebuild_loader


class RecordingBatchSampler(Sampler[list[int]]):
    """Yields the batches of ``batch_sampler`` and keeps their indices in ``seen`` (one list per batch).

    A sampler of single indices (a loader with ``batch_size=None``) is recorded with ``single=True``: each
    index is a batch of one sample.
    """

    def __init__(self, batch_sampler: Any, single: bool = False) -> None:
        self.batch_sampler, self.single = batch_sampler, single
        self.seen: list[list[int]] = []

    @property
    def sampler(self) -> object:
        """The sampler inside the wrapped batch sampler (samplers are looked for there: rank, ``set_epoch``)."""
        return getattr(self.batch_sampler, "sampler", None)

    def __iter__(self) -> Iterator[Any]:
        self.seen = []
        for drawn in self.batch_sampler:
            self.seen.append([int(drawn)] if self.single else [int(i) for i in drawn])
            yield drawn

    def __len__(self) -> int:
        return len(self.batch_sampler)


def track_batch_indices(loader: Iterable[object], label: str) -> tuple[Iterable[object], Callable[[int], list[int]]]:
    """``loader`` rebuilt to record its batches' dataset indices, and a function giving the indices of batch
    ``batch_idx`` once the loader has produced it. Where they cannot be known (an ``IterableDataset``, a loader
    that is not a ``DataLoader``) the loader is returned as it is, the function gives empty lists and a warning
    naming ``label`` (the loader) says so."""
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        kind = "an IterableDataset" if isinstance(loader, DataLoader) else f"a {type(loader).__name__}"
        warnings.warn(f"{label} reads {kind}: which dataset samples a batch holds is unknown, so prediction "
                      "writers receive empty batch_indices for it (use a map-style Dataset in a DataLoader to get "
                      "them)", UserWarning, stacklevel=3)
        return loader, lambda batch_idx: []
    if loader.batch_sampler is not None:
        recorder = RecordingBatchSampler(loader.batch_sampler)
        rebuilt = rebuild_loader(loader, batch_sampler=recorder, batch_size=1, drop_last=False)
    else:  # batch_size=None: the sampler's indices are the "batches"
        recorder = RecordingBatchSampler(loader.sampler, single=True)
        rebuilt = rebuild_loader(loader, sampler=recorder)
    return rebuilt, lambda batch_idx: recorder.seen[batch_idx]
