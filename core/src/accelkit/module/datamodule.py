"""``accelkit.DataModule``: the LightningDataModule of accelkit, and the data hooks it shares with the Module.

A DataModule gathers what a run needs to get its data: ``prepare_data`` (download once per node), ``setup(stage)``
(split and build datasets in every process), the four ``*_dataloader`` methods and ``teardown``. Pass it to
``Trainer.fit(model, datamodule=dm)`` (or ``fit(model, dm)``), ``validate``, ``test`` or ``predict``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from accelkit.module.hparams import HyperparametersMixin
from accelkit.utilities.apply_func import move_to_device
from accelkit.utilities.types import EVAL_DATALOADERS, TRAIN_DATALOADERS

if TYPE_CHECKING:
    from accelkit.trainer.trainer import Trainer

__all__ = ["DataHooks", "DataModule", "dataloader_is_defined"]

#: what :meth:`DataModule.from_datasets` takes for a stage: a dataset, a list of them or a dict of them by name (a
#: list of other items is one dataset: a sequence is a map-style dataset to a DataLoader)
Datasets = Dataset | Sequence[object] | Mapping[str, Dataset]

_LOADER_METHODS = ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")


_DEFAULT_LOADERS: list[Callable[..., object]] = []  # the ``*_dataloader`` defaults of DataHooks (they return None)


_F = TypeVar("_F", bound=Callable[..., object])


def _default_loader(method: _F) -> _F:
    _DEFAULT_LOADERS.append(method)
    return method


def dataloader_is_defined(obj: object, name: str) -> bool:
    """Whether ``obj`` provides the ``name`` loader (``"train_dataloader"``, ...): it overrides the method, or
    :meth:`~accelkit.DataModule.from_datasets` gave it one. The defaults of :class:`DataHooks` return ``None`` and do
    not
    count."""
    method = getattr(obj, name, None)
    if method is None:
        return False
    function = getattr(method, "__func__", method)
    return not any(function is default for default in _DEFAULT_LOADERS)  # by identity: any object may stand here


class DataHooks:
    """The data hooks Lightning's ``DataHooks`` defines, with their defaults. Shared by :class:`DataModule`.

    The ``*_dataloader`` defaults return ``None``: "this object provides no data for that stage". The Trainer then
    skips the stage's loop where it is optional (validation during ``fit``) and raises an error naming the method
    where it is required (``train_dataloader`` for ``fit``, ``test_dataloader`` for ``test``, ...). Use
    :func:`dataloader_is_defined` to ask without calling.
    """

    #: ``True``: ``prepare_data`` runs on local rank 0 of every node; ``False``: on global rank 0 only.
    prepare_data_per_node: bool = True
    #: Allow a loader with no batches on some ranks when running on several devices.
    allow_zero_length_dataloader_with_multiple_devices: bool = False

    def prepare_data(self) -> None:
        """Download or write data to disk, once per node (local rank 0; once in all if
        ``prepare_data_per_node`` is ``False``), before the processes start where the strategy spawns them.
        State set here is not seen by the other processes: set it in ``setup()``."""

    def setup(self, stage: str) -> None:
        """Build datasets and splits, in every process, at the start of ``fit``, ``validate``, ``test`` or
        ``predict`` (``stage`` is that name)."""

    def teardown(self, stage: str) -> None:
        """Release what ``setup()`` built, in every process, at the end of ``stage``."""

    @_default_loader
    def train_dataloader(self) -> TRAIN_DATALOADERS | None:
        """The training loader(s); ``None`` (the default) when this object provides none."""
        return None

    @_default_loader
    def val_dataloader(self) -> EVAL_DATALOADERS | None:
        """The validation loader(s); ``None`` (the default): no validation."""
        return None

    @_default_loader
    def test_dataloader(self) -> EVAL_DATALOADERS | None:
        """The test loader(s); ``None`` (the default) when this object provides none."""
        return None

    @_default_loader
    def predict_dataloader(self) -> EVAL_DATALOADERS | None:
        """The prediction loader(s); ``None`` (the default) when this object provides none."""
        return None

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it moves to the device (on the host); return the batch."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move ``batch`` to ``device`` and return it. The default moves every tensor in nested dicts, lists,
        tuples, namedtuples and dataclasses (tensors already there are left alone) and calls ``.to(device)`` on
        other objects that have it; override it for batches of your own type."""
        return move_to_device(batch, torch.device(device))

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch after it moved to the device (device-side augmentation); return the batch."""
        return batch


class _DatasetLoaders:
    """The loader method :meth:`~accelkit.DataModule.from_datasets` attaches: a picklable callable (a closure would not
    travel to spawned workers)."""

    def __init__(self, datasets: Datasets, batch_size: int, num_workers: int, shuffle: bool) -> None:
        self.datasets, self.batch_size, self.num_workers, self.shuffle = datasets, batch_size, num_workers, shuffle

    def _loader(self, dataset: Dataset | Sequence[object]) -> DataLoader:
        shuffle = self.shuffle and not isinstance(dataset, IterableDataset)
        # (a sequence works as a map-style dataset: a DataLoader only indexes it and takes its len)
        return DataLoader(cast(Dataset, dataset), batch_size=self.batch_size, shuffle=shuffle,
                          num_workers=self.num_workers)

    def __call__(self) -> DataLoader | list[DataLoader] | dict[str, DataLoader]:
        datasets = self.datasets
        if isinstance(datasets, Mapping):
            return {name: self._loader(dataset) for name, dataset in datasets.items()}
        if isinstance(datasets, (list, tuple)) and datasets and all(isinstance(d, Dataset) for d in datasets):
            return [self._loader(dataset) for dataset in datasets]
        return self._loader(datasets)


class DataModule(DataHooks, HyperparametersMixin):
    """Lightning's ``LightningDataModule``: the data of a run in one reusable, picklable object.

    Override ``prepare_data()``, ``setup()``, the ``*_dataloader`` methods you need and ``teardown()``;
    ``self.save_hyperparameters()`` in ``__init__`` works as in a Module (they are stored in checkpoints under
    ``"datamodule_hyper_parameters"``). :meth:`state_dict` is saved in checkpoints under the class's qualified
    name and given back to :meth:`load_state_dict` on resume. ``self.trainer`` is the running Trainer
    (``None`` outside a run; it is not pickled). The batch-transfer hooks, when overridden here, are used instead
    of the Module's.
    """

    #: A name for this datamodule (optional, as in Lightning).
    name: str | None = None
    #: Checkpoint key of a datamodule's hyper-parameters.
    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    #: Checkpoint key of the ``__init__`` argument a datamodule's hyper-parameters were passed as.
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"
    #: The Trainer running this datamodule (``None`` outside a run).
    trainer: Trainer | None = None

    def __init__(self) -> None:
        super().__init__()
        self.trainer = None

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state.pop("trainer", None)  # the Trainer does not travel to workers with its datamodule
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints (default: nothing). Return plain data so ``weights_only`` loading works."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (on resume and in
        :meth:`~accelkit.module.hparams.load_from_checkpoint`)."""

    def on_exception(self, exception: BaseException) -> None:
        """Called when a run ends with an exception, before it propagates."""

    @classmethod
    def from_datasets(cls, train_dataset: Datasets | None = None, val_dataset: Datasets | None = None,
                      test_dataset: Datasets | None = None, predict_dataset: Datasets | None = None,
                      batch_size: int = 1, num_workers: int = 0, **datamodule_kwargs: object) -> DataModule:
        """A datamodule whose loaders wrap the given datasets, as Lightning's ``from_datasets``.

        Each ``*_dataset`` may be a dataset, a list of datasets (several loaders) or a dict of them; the training
        loader shuffles (except for iterable datasets), the others do not. ``batch_size`` and ``num_workers``
        go to every :class:`~torch.utils.data.DataLoader`, and also to ``cls.__init__`` where it accepts them;
        ``datamodule_kwargs`` go to ``cls.__init__`` (as in Lightning, not to the loaders). Loaders are built
        without ``pin_memory``; define the ``*_dataloader`` methods to choose loader options.
        """
        params = inspect.signature(cls.__init__).parameters
        any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        special = {name: value for name, value in (("batch_size", batch_size), ("num_workers", num_workers))
                   if any_keyword or name in params}
        datamodule = cls(**datamodule_kwargs, **special)
        for name, datasets, shuffle in (("train_dataloader", train_dataset, True),
                                        ("val_dataloader", val_dataset, False),
                                        ("test_dataloader", test_dataset, False),
                                        ("predict_dataloader", predict_dataset, False)):
            if datasets is not None:
                setattr(datamodule, name, _DatasetLoaders(datasets, batch_size, num_workers, shuffle))
        return datamodule
