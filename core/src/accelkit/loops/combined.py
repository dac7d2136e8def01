"""Several loaders for one loop, as Lightning arranges them: the training loop reads a
:class:`~accelkit.utilities.combined_loader.CombinedLoader` (``"max_size_cycle"`` unless one is given), the
evaluation and prediction loops read their loaders one after the other, each with its ``dataloader_idx``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, cast

from accelkit.utilities.combined_loader import CombinedLoader, flatten

_STAGES = {"train": "fit", "val": "validate", "test": "test", "predict": "predict"}


def arrange_loaders(raw: Any, kind: str) -> list[Iterable[object]]:
    """The loaders of ``kind`` (``"train"``, ``"val"``, ``"test"``, ``"predict"``) as the loops take them.

    Training: one loader; a dict, list or tuple of loaders becomes ``CombinedLoader(raw, "max_size_cycle")`` (each
    batch holds one batch of every loader, in the same structure), and a :class:`CombinedLoader` is taken as it is
    (any mode but ``"sequential"``). Evaluation and prediction: a list of loaders, read one after the other (a
    dict, list or nested collection is flattened in order, a :class:`CombinedLoader` must be ``"sequential"``).
    """
    stage = _STAGES[kind]
    if isinstance(raw, CombinedLoader):
        if kind == "train":
            if raw.mode == "sequential":
                raise ValueError("trainer.fit() trains on one batch of every loader per step; CombinedLoader(mode="
                                 "'sequential') reads them one after the other, which training does not support (as in "
                                 "Lightning). Use mode='max_size_cycle', 'max_size' or 'min_size'.")
            return [raw]
        if raw.mode != "sequential":
            raise ValueError(f"trainer.{stage}() reads several loaders one after the other (each with its "
                             f"dataloader_idx), so it takes CombinedLoader(mode='sequential') only, not "
                             f"mode={raw.mode!r} (as in Lightning); pass the loaders as a list instead")
        limits = raw.limits
        if limits is not None and any(limit is not None for limit in limits):
            raise ValueError(f"trainer.{stage}(): the CombinedLoader has its own limits {limits}; limit the batches "
                             f"with Trainer(limit_{'val' if kind == 'val' else kind}_batches=...) instead")
        return raw.flattened
    if kind == "train":
        return [CombinedLoader(raw, "max_size_cycle")] if isinstance(raw, (dict, list, tuple)) else [raw]
    # (the leaves of what a ``*_dataloader`` hook returned are its loaders: each is checked where it is iterated)
    return cast("list[Iterable[object]]", flatten(raw)) if isinstance(raw, (dict, list, tuple)) else [raw]


class CombinedBatches:
    """A :class:`CombinedLoader` as the training loop reads it: its batches, without the indices it adds.

    Its length is the combined loader's; :attr:`flattened` exposes the loaders inside (their samplers get each
    epoch's number); :attr:`loader` is the combined loader.
    """

    def __init__(self, loader: CombinedLoader) -> None:
        self.loader = loader

    @property
    def flattened(self) -> list[Iterable[object]]:
        """The loaders inside, in order."""
        return self.loader.flattened

    @property
    def iterables(self) -> object:
        """The loaders inside, in the structure they were given."""
        return self.loader.iterables

    def __iter__(self) -> Iterator[object]:
        for batch, _, _ in self.loader:
            yield batch

    def __len__(self) -> int:
        return len(self.loader)

    def __repr__(self) -> str:
        return f"CombinedBatches({self.loader!r})"
