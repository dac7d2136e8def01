"""``accelkit.DataModule`` on its own: defaults, ``from_datasets`` loaders, batch transfer, state, hyper-parameters,
checkpoint reload and pickling (it travels to spawned workers)."""

from __future__ import annotations

import collections
import dataclasses
import pickle
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler, TensorDataset

from accelkit.module.datamodule import DataHooks, DataModule, dataloader_is_defined
from accelkit.module.hparams import checkpoint_entries
from accelkit.module.saving import restore_datamodule_state

LOADERS = ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")


def dataset(n: int = 10) -> TensorDataset:
    return TensorDataset(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.arange(n))


class Stream(IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(4))


class Folded(DataModule):
    """A DataModule as Lightning users write them: hyper-parameters, setup, two loaders and a state."""

    def __init__(self, batch_size: int = 4, fold: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.seen_epochs = 0

    def setup(self, stage: str) -> None:
        self.train_set, self.val_set = dataset(8), dataset(4)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {"seen_epochs": self.seen_epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.seen_epochs = state_dict["seen_epochs"]


class WithSize(DataModule):
    def __init__(self, batch_size: int, tag: str = "") -> None:
        super().__init__()
        self.batch_size, self.tag = batch_size, tag


def test_defaults():
    dm = DataModule()
    assert dm.trainer is None and dm.prepare_data_per_node is True
    assert dm.allow_zero_length_dataloader_with_multiple_devices is False
    assert dm.prepare_data() is None and dm.setup("fit") is None and dm.teardown("fit") is None
    for name in LOADERS:
        assert getattr(dm, name)() is None and not dataloader_is_defined(dm, name)
    assert dm.state_dict() == {} and dm.hparams == {} and dm.name is None
    batch = torch.ones(2)
    assert dm.on_before_batch_transfer(batch, 0) is batch and dm.on_after_batch_transfer(batch, 0) is batch
    assert DataModule.CHECKPOINT_HYPER_PARAMS_KEY == "datamodule_hyper_parameters"


def test_overridden_loaders_are_defined_and_others_are_not():
    dm = Folded()
    assert dataloader_is_defined(dm, "train_dataloader") and dataloader_is_defined(dm, "val_dataloader")
    assert not dataloader_is_defined(dm, "test_dataloader") and not dataloader_is_defined(dm, "predict_dataloader")
    dm.setup("fit")
    assert [len(batch[0]) for batch in dm.train_dataloader()] == [4, 4]


def test_a_subclass_that_skips_super_init_still_works():
    class NoInit(DataModule):
        def __init__(self) -> None:
            self.x = 1

    dm = NoInit()
    assert dm.trainer is None and dm.prepare_data_per_node is True and dm.hparams == {}


def test_save_hyperparameters_in_a_datamodule():
    dm = Folded(batch_size=2, fold=3)
    assert dict(dm.hparams) == {"batch_size": 2, "fold": 3} and dm.hparams.fold == 3
    assert dm._log_hyperparams is True


def test_from_datasets_builds_the_loaders():
    train, val, test = dataset(10), dataset(6), dataset(4)
    dm = DataModule.from_datasets(train, val, test, batch_size=3, num_workers=0)
    train_loader, val_loader = dm.train_dataloader(), dm.val_dataloader()
    assert isinstance(train_loader.sampler, RandomSampler) and train_loader.batch_size == 3
    assert isinstance(val_loader.sampler, SequentialSampler) and val_loader.dataset is val
    assert dm.test_dataloader().dataset is test and dm.predict_dataloader() is None
    assert [dataloader_is_defined(dm, name) for name in LOADERS] == [True, True, True, False]
    assert sorted(torch.cat([b[1] for b in train_loader]).tolist()) == list(range(10))
    assert len(list(val_loader)) == 2


def test_from_datasets_several_datasets_and_iterable_ones():
    first, second = dataset(4), dataset(2)
    dm = DataModule.from_datasets(train_dataset={"a": first, "b": Stream()}, val_dataset=[first, second],
                                  batch_size=2)
    train = dm.train_dataloader()
    assert set(train) == {"a", "b"} and isinstance(train["a"].sampler, RandomSampler)
    assert [b.tolist() for b in train["b"]] == [[0, 1], [2, 3]]  # an iterable dataset is not shuffled
    assert [loader.dataset for loader in dm.val_dataloader()] == [first, second]


def test_from_datasets_passes_init_arguments_as_lightning_does():
    dm = WithSize.from_datasets(dataset(), batch_size=5, tag="t")
    assert (dm.batch_size, dm.tag) == (5, "t") and dm.train_dataloader().batch_size == 5
    with pytest.raises(TypeError):
        DataModule.from_datasets(dataset(), pin_memory=True)  # DataModule.__init__ takes no pin_memory


def test_pickling_keeps_loaders_and_hparams_and_drops_the_trainer():
    dm = DataModule.from_datasets(dataset(6), val_dataset=dataset(2), batch_size=2)
    dm.trainer = object()  # a Trainer stays in its own process
    clone = pickle.loads(pickle.dumps(dm))
    assert clone.trainer is None and dm.trainer is not None
    assert [len(b[0]) for b in clone.train_dataloader()] == [2, 2, 2]
    assert dataloader_is_defined(clone, "val_dataloader") and not dataloader_is_defined(clone, "test_dataloader")
    folded = pickle.loads(pickle.dumps(Folded(batch_size=3)))
    assert folded.hparams.batch_size == 3 and folded.hparams_initial == {"batch_size": 3, "fold": 0}


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    label: str


class Movable:
    def __init__(self) -> None:
        self.moved_to: Any = None

    def to(self, device: Any) -> Movable:
        self.moved_to = device
        return self


def test_transfer_batch_to_device_walks_nested_batches():
    Point = collections.namedtuple("Point", "x y")
    tensor = torch.ones(1)
    batch = {"pair": Pair(tensor, "a"), "points": [Point(tensor, 2)], "tuple": (tensor, "id"),
             "ordered": collections.OrderedDict(t=tensor), "custom": Movable()}
    moved = DataModule().transfer_batch_to_device(batch, torch.device("meta"), 0)
    assert moved["pair"].x.device.type == "meta" and moved["pair"].label == "a"
    assert type(moved["points"][0]) is Point and moved["points"][0].x.is_meta and moved["points"][0].y == 2
    assert moved["tuple"][0].is_meta and moved["tuple"][1] == "id"
    assert type(moved["ordered"]) is collections.OrderedDict and moved["ordered"]["t"].is_meta
    assert moved["custom"].moved_to == torch.device("meta")
    assert batch["pair"].x.device.type == "cpu"  # the input batch is not changed
    same = DataHooks().transfer_batch_to_device([tensor], torch.device("cpu"), 0)
    assert same[0] is tensor  # already there: no copy


@pytest.mark.parametrize("kind", [tuple, list])
def test_a_batch_of_plain_tensors_moves_in_one_call(kind):
    """The common batch, a tuple or list of tensors on the host, moves to the device in one pass of
    ``move_to_device`` (no recursive call per tensor: the step's transfer costs what a hand loop's ``x.to(device)``
    calls do); what it returns has the batch's type, and a tensor already there is not copied."""
    import sys

    from accelkit.utilities import apply_func

    on_device = torch.ones(1, device="meta")
    batch = kind([torch.ones(2), torch.zeros(3, dtype=torch.long), on_device])
    calls = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is apply_func.move_to_device.__code__:
            calls.append(frame)

    sys.setprofile(profile)
    try:
        moved = apply_func.move_to_device(batch, torch.device("meta"), non_blocking=True)
    finally:
        sys.setprofile(None)
    assert len(calls) == 1
    assert type(moved) is kind and [t.is_meta for t in moved] == [True, True, True]
    assert moved[1].dtype == torch.long and moved[2] is on_device and batch[0].device.type == "cpu"


def test_state_dict_round_trip_through_a_checkpoint(tmp_path):
    dm = Folded(batch_size=2, fold=1)
    dm.seen_epochs = 3
    entries = checkpoint_entries(None, dm)
    assert entries["datamodule_hyper_parameters"] == {"batch_size": 2, "fold": 1}
    assert entries["Folded"] == {"seen_epochs": 3}
    fresh = Folded()
    assert restore_datamodule_state(fresh, entries) and fresh.seen_epochs == 3
    assert not restore_datamodule_state(DataModule(), entries)


def test_load_from_checkpoint_rebuilds_a_datamodule(tmp_path):
    dm = Folded(batch_size=2, fold=1)
    dm.seen_epochs = 5
    path = tmp_path / "dm.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"lr": 1.0}, **checkpoint_entries(None, dm)}, path)
    loaded = Folded.load_from_checkpoint(path)
    assert type(loaded) is Folded and dict(loaded.hparams) == {"batch_size": 2, "fold": 1}
    assert loaded.seen_epochs == 5
    assert Folded.load_from_checkpoint(path, fold=4).hparams.fold == 4


@pytest.mark.parametrize("kind", [tuple, list])
def test_a_batch_of_plain_tensors_costs_the_same_python_whatever_its_length(kind):
    """``move_to_device`` reads the devices of a batch of plain tensors and moves them without a Python step per
    tensor (``item.device == device`` built a ``torch.device`` per tensor and compared it in Python): a batch of 12
    tensors runs as many Python instructions as a batch of 2, whether all are elsewhere, all there already, or
    some of each. What it returns is the same as before: the batch's type, the tensors there not copied."""
    from accelkit.utilities.apply_func import move_to_device
    from helpers.instructions import instructions

    meta = torch.device("meta")
    for make in (lambda: torch.ones(2), lambda: torch.ones(2, device="meta")):
        counts = []
        for length in (2, 12):
            batch = kind(make() for _ in range(length))
            move_to_device(batch, meta, non_blocking=True)  # once uncounted: whatever runs only the first time
            # in a process is not the batch's cost
            counts.append(instructions(lambda batch=batch: move_to_device(batch, meta, non_blocking=True)))
            moved = move_to_device(batch, meta)
            assert type(moved) is kind and all(t.is_meta for t in moved) and len(moved) == length
            assert all(a is b for a, b in zip(moved, batch, strict=True)) == batch[0].is_meta
        assert counts[0] == counts[1], counts
    mixed = kind([torch.ones(1), torch.ones(1, device="meta")] * 6)
    moved = move_to_device(mixed, meta)
    assert [t is s for t, s in zip(moved, mixed, strict=True)] == [False, True] * 6 and all(t.is_meta for t in moved)
