"""Where a loop's data comes from, how much of it runs, and how each batch reaches the device."""

from __future__ import annotations

import functools
import itertools
import operator
import warnings
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, cast

from torch.utils.data import DataLoader, SequentialSampler

from accelkit.errors import ConfigurationError
from accelkit.loops.combined import CombinedBatches, arrange_loaders
from accelkit.module.module import Module
from accelkit.precision import Precision
from accelkit.strategies.base import Strategy
from accelkit.strategies.sampler import distribute_dataloader, rank_aware_sampler, rebuild_loader, seed_workers
from accelkit.utilities.apply_func import device_plan, move_to_device
from accelkit.utilities.combined_loader import CombinedLoader

if TYPE_CHECKING:
    from accelkit.module.datamodule import DataModule
    from accelkit.trainer.trainer import Trainer

_HOOKS = {"train": "train_dataloader", "val": "val_dataloader", "test": "test_dataloader",
          "predict": "predict_dataloader"}
_LIMIT_KEYS = {"train": "fit", "val": "validate", "test": "test", "predict": "predict"}
#: :meth:`DataConnector._plain_prepare` without a first batch to plan from
_NO_BATCH = object()
#: what follows an epoch's last batch in the loader (:meth:`DataConnector.epoch_batches`)
_LAST = object()


class DataConnector:
    """Finds loaders (given to ``fit``/``test``..., else the DataModule's, else the Module's), prepares them for
    the run (distributed sampler, ``overfit_batches``) and iterates them onto the device with the batch hooks."""

    def __init__(self, trainer: Trainer, module: Module, datamodule: DataModule | None,
                 given: dict[str, object]) -> None:
        self.trainer, self.module, self.datamodule, self.given = trainer, module, datamodule, given
        strategy, precision = trainer.strategy, trainer.precision
        # The batch-transfer hooks: a DataModule's override wins over the Module's (as in Lightning).
        self._before = self._pick("on_before_batch_transfer")
        self._transfer = self._pick("transfer_batch_to_device")
        self._after = self._pick("on_after_batch_transfer")
        self._to_device: Callable[[object], object] = strategy.batch_to_device
        self._convert = precision.convert_input
        self._plain = self._before is None and self._transfer is None and self._after is None
        #: the loaders last prepared for each kind (``trainer.train_dataloader``, ``val_dataloaders`` ...)
        self.prepared: dict[str, list[Iterable[object]]] = {}

    def _pick(self, name: str) -> Callable[..., object] | None:
        from accelkit.utilities.model_helpers import is_overridden

        dm = self.datamodule
        if dm is not None and is_overridden(name, dm, _datamodule_base()):
            return getattr(dm, name)
        if is_overridden(name, self.module, Module):
            return getattr(self.module, name)
        return None

    # ----------------------------------------------------------------- loaders
    def request(self, kind: str) -> object:
        """The raw loader(s) for ``kind`` (``"train"``, ``"val"``, ``"test"``, ``"predict"``), or ``None``."""
        given = self.given.get(kind)
        if given is not None:
            return given
        hook = _HOOKS[kind]
        # As in Lightning, a DataModule is the only source of loaders when one is given.
        source = self.datamodule if self.datamodule is not None else self.module
        return getattr(source, hook)()

    def loaders(self, kind: str) -> list[Iterable[object]] | None:
        """The prepared loader(s) of ``kind`` as a list (several evaluation loaders), or ``None``."""
        raw = self.request(kind)
        if raw is None:
            return None
        many = arrange_loaders(raw, kind)  # several training loaders are combined, evaluation ones listed
        prepared = [self._prepare(loader, kind) for loader in many]
        self._check_lengths(prepared, kind)
        self.prepared[kind] = prepared
        return prepared

    def _check_lengths(self, loaders: list[Iterable[object]], kind: str) -> None:
        """An empty loader on one of several processes stalls the others in their collectives; as Lightning,
        refuse it unless the Module says ``allow_zero_length_dataloader_with_multiple_devices = True``."""
        if self.trainer.world_size <= 1:
            return
        allowed = getattr(self.datamodule if self.datamodule is not None else self.module,
                          "allow_zero_length_dataloader_with_multiple_devices", False)
        for index, loader in enumerate(loaders):
            try:
                empty = len(cast(Sized, loader)) == 0  # (a TypeError where it has no length)
            except TypeError:
                continue
            if empty and not allowed:
                raise ValueError(
                    f"the {kind} loader {index} is empty on rank {self.trainer.global_rank} of "
                    f"{self.trainer.world_size}: the other ranks would wait for it. Give every rank data, or set "
                    "allow_zero_length_dataloader_with_multiple_devices = True on the Module/DataModule")

    def _prepare(self, loader: Iterable[object], kind: str) -> Iterable[object]:
        if isinstance(loader, CombinedLoader):  # each loader inside is prepared; the loop reads the batches
            return CombinedBatches(loader.map(lambda inner: self._prepare(inner, kind)))
        trainer = self.trainer
        loader = seed_workers(loader, trainer.strategy.global_rank)  # after seed_everything(workers=True)
        if kind == "train" and trainer.overfit_batches and isinstance(loader, DataLoader) and not isinstance(
                loader.sampler, SequentialSampler) and rank_aware_sampler(loader) is None:
            warnings.warn("overfit_batches: the training loader shuffles; accelkit replaces its sampler with a "
                          "SequentialSampler so the same batches repeat every epoch.", UserWarning, stacklevel=3)
            loader = _sequential(loader)
        if trainer.use_distributed_sampler:
            # one process too: a sampler built for other ranks than the run has gets a warning
            kwargs = trainer.strategy.distributed_sampler_kwargs or {"num_replicas": 1, "rank": 0}
            hooks = trainer.plugin_manager.hook
            loader = distribute_dataloader(loader, hooks.accelkit_distributed_sampler, kwargs["num_replicas"],
                                           kwargs["rank"], trainer.seed, _LIMIT_KEYS[kind],
                                           shard_iterable=hooks.accelkit_shard_iterable)
        return loader

    def num_batches(self, loader: Iterable[object], kind: str) -> int | None:
        """How many batches of ``loader`` the loop runs (``None``: unknown, the loader has no length)."""
        trainer = self.trainer
        stage = _LIMIT_KEYS[kind]
        limit = trainer.limits[stage]
        try:
            total = len(cast(Sized, loader))  # (a TypeError where it has no length)
        except TypeError:
            total = None
        if limit is None:
            return total
        if isinstance(limit, float):
            if total is None:
                if limit == 1.0:
                    return None
                raise ConfigurationError(f"limit_{stage}_batches={limit} is a fraction but the data has no length; "
                                         "give an int number of batches")
            return int(total * limit)
        return int(limit) if total is None else min(int(limit), total)

    def agreed_num_batches(self, loaders: list[Iterable[object]], kind: str, label: str) -> list[int | None]:
        """:meth:`num_batches` of each loader, the same on every rank (:meth:`agree`); ``label`` names the loop in
        the warning."""
        return self.agree([self.num_batches(loader, kind) for loader in loaders], label)

    def agree(self, limits: list[int | None], kind: str) -> list[int | None]:
        """Make every rank run the same number of batches of each loader (the smallest count): a rank with more
        batches would otherwise wait forever in a gradient exchange or a metric reduction the others never reach.
        Says so when counts differ, or when some ranks' loaders have no length (which cannot be checked)."""
        trainer = self.trainer
        if trainer.world_size <= 1 or not limits:
            return limits
        import torch

        strategy = trainer.strategy
        counts = [-1 if n is None else int(n) for n in limits]
        # one reduction (max of the counts and of their negatives): every strategy has reduce, and XLA's
        # replicas on the CPU only support this kind of collective
        both = strategy.reduce(torch.tensor(counts + [-c for c in counts], dtype=torch.float32,
                                            device=strategy.root_device), "max").cpu().tolist()
        agreed: list[int | None] = []
        for index, count in enumerate(counts):
            most, fewest = int(both[index]), -int(both[len(counts) + index])
            if most == fewest:
                agreed.append(limits[index])
                continue
            if fewest < 0:
                warnings.warn(f"the {kind} loader {index} has no length on some ranks (this rank: "
                              f"{'none' if count < 0 else count}): if the ranks yield different numbers of batches, "
                              "the run stops in the first collective a rank does not reach. Give every rank the same "
                              "number of batches.", UserWarning, stacklevel=3)
                agreed.append(limits[index])
                continue
            warnings.warn(f"the {kind} loader {index} has different numbers of batches per rank (from {fewest} to "
                          f"{most}; this rank {count}): every rank runs {fewest}, so none waits for an exchange the "
                          "others never reach; the extra batches are not used. Give every rank the same number (the "
                          "distributed sampler pads the shards when use_distributed_sampler=True).", UserWarning,
                          stacklevel=3)
            agreed.append(fewest)
        return agreed

    # ----------------------------------------------------------------- batches
    def batches(self, loader: Iterable[object], stage: str, limit: int | None,
                dataloader_idx: int = 0) -> Iterator[tuple[int, object]]:
        """``(index, batch)`` on the device, up to ``limit`` batches."""
        iterable = self._source(loader, stage, limit, 0)
        prepare = self._preparer(dataloader_idx)
        for index, batch in enumerate(iterable):
            yield index, prepare(batch)

    def epoch_batches(self, loader: Iterable[object], stage: str, limit: int | None, start: int = 0,
                      read_ahead: bool = True) -> tuple[Iterator[tuple[int, object, bool]], Callable[[object], object]]:
        """A training epoch's batches, for a loop that iterates them in its own frame: ``(batches, prepare)``, where
        ``batches`` yields ``(index, batch, is_last)``: the batch's index (from ``start``), the batch as the loader
        gave it, and whether it is the epoch's last; ``prepare(batch)`` puts a batch on the device (the batch hooks,
        the device transfer). No generator frame runs per batch: ``batches`` is
        built of ``itertools`` pieces.

        The loader's batch after the current one is read before the current one is prepared, so the last batch is
        known even for a loader without a length; ``read_ahead=False`` with a ``limit``: the last batch is known from
        the limit and no batch is read before its step (a loader whose saved state must match the batches trained
        on). ``start``: the index of the loader's first batch (a resumed epoch whose first ``start`` batches were
        skipped); ``limit`` counts from index 0. A loader read ahead starts here (its first batch is read), another at
        the first batch asked for."""
        source = self._source(loader, stage, limit, start)
        if read_ahead or limit is None:
            iterator = iter(source)
            first = next(iterator, _NO_BATCH)
            if first is _NO_BATCH:
                return iter(()), self._preparer(0)
            current, upcoming = itertools.tee(itertools.chain((first,), iterator, (_LAST,)))
            next(upcoming)  # (one batch ahead: the loader's next batch is read when the current one is asked for)
            is_last = map(operator.is_, upcoming, itertools.repeat(_LAST))  # (tested in C)
            # (without batch hooks: the epoch's device plan, from its first batch)
            return zip(itertools.count(start), current, is_last, strict=False), self._preparer(0, first)
        # zip reads the loader first: a loader that ends before the limit ends the epoch there
        last_from_limit = itertools.chain(itertools.repeat(False, max(0, limit - start - 1)), (True,))
        return zip(itertools.count(start), source, last_from_limit, strict=False), self._preparer(0)

    def _source(self, loader: Iterable[object], stage: str, limit: int | None, start: int) -> Iterable[object]:
        """The batches of ``loader`` as the strategy hands them out, up to ``limit`` (counted from index 0 when the
        first is ``start``)."""
        iterable = self.trainer.strategy.process_dataloader(loader, stage)
        return iterable if limit is None else itertools.islice(iterable, max(0, limit - start))

    def _preparer(self, dataloader_idx: int, first: object = _NO_BATCH) -> Callable[[object], object]:
        """What puts a batch of loader ``dataloader_idx`` on the device: with batch hooks, them and the transfer;
        without, :meth:`_plain_prepare` (planned from ``first`` where given)."""
        if self._plain:
            return self._plain_prepare(first)
        return functools.partial(self._transfer_with_hooks, dataloader_idx=dataloader_idx)

    def _plain_prepare(self, first: object = _NO_BATCH) -> Callable[[object], object]:
        """Device transfer and input conversion without batch hooks, decided once per loop: the default
        strategy transfer becomes a direct :func:`move_to_device` (planned from the loop's ``first`` batch where
        given: :func:`device_plan`) and the default (identity) conversion is skipped, so a batch already on the
        device costs a type check per tensor."""
        from accelkit.utilities.model_helpers import is_overridden

        strategy, precision = self.trainer.strategy, self.trainer.precision
        to_device, convert = self._to_device, self._convert
        if not is_overridden("batch_to_device", strategy, Strategy):  # a partial: no Python frame of its own
            device, non_blocking = strategy.root_device, bool(strategy.accelerator.pin_memory)
            to_device = functools.partial(move_to_device, device=device, non_blocking=non_blocking) \
                if first is _NO_BATCH else device_plan(first, device, non_blocking)
        if not is_overridden("convert_input", precision, Precision):
            return to_device

        def prepare(batch: object) -> object:
            return convert(to_device(batch))

        return prepare

    def _transfer_with_hooks(self, batch: object, dataloader_idx: int) -> object:
        if self._before is not None:
            batch = self._before(batch, dataloader_idx)
        if self._transfer is not None:
            batch = self._transfer(batch, self.trainer.strategy.root_device, dataloader_idx)
        else:
            batch = self._to_device(batch)
        if self._after is not None:
            batch = self._after(batch, dataloader_idx)
        return self._convert(batch)


def _datamodule_base() -> type:
    from accelkit.module.datamodule import DataModule

    return DataModule


def _sequential(loader: DataLoader) -> DataLoader:
    """``loader`` in dataset order (``overfit_batches``)."""
    if loader.batch_size is None:
        raise ValueError("overfit_batches cannot re-order a loader built with a batch_sampler")
    if not isinstance(loader.dataset, Sized):
        raise ValueError(f"overfit_batches cannot re-order a loader over {type(loader.dataset).__name__}, a dataset "
                         "without a length; give the loader a map-style dataset, or set overfit_batches=0")
    return rebuild_loader(loader, sampler=SequentialSampler(loader.dataset))
