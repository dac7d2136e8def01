"""The CUDA strategies give unpinned DataLoaders a pinned copy that yields the same batches.

Whether the memory is really page-locked needs a GPU (see test_gpu.py); here the copy's settings and
contents are checked with real DataLoaders.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from accelkit_cuda.strategies import CUDADDPSpawnStrategy, CUDASingleDeviceStrategy, pinned_dataloader

pytestmark = pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning")


def _dataset(n=10):
    return TensorDataset(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.arange(n))


def _batches(loader):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "pin_memory is set but no accelerator is found" on CPU-only machines
        return [[t.tolist() for t in batch] for batch in loader]


def test_copy_pins_and_keeps_everything_else():
    def collate(items):
        return torch.stack([i[0] for i in items]), torch.stack([i[1] for i in items]) * 10

    generator = torch.Generator().manual_seed(3)
    loader = DataLoader(_dataset(), batch_size=3, shuffle=True, drop_last=True, collate_fn=collate, generator=generator)
    pinned = pinned_dataloader(loader)
    assert pinned is not loader and pinned.pin_memory and not loader.pin_memory
    assert pinned.dataset is loader.dataset
    assert pinned.batch_sampler is loader.batch_sampler  # same sampler object: set_epoch reaches it
    assert pinned.collate_fn is collate and pinned.generator is generator
    generator.manual_seed(7)
    expected = _batches(loader)
    generator.manual_seed(7)
    assert _batches(pinned) == expected
    assert len(expected) == 3 and all(len(b[0]) == 3 for b in expected)
    assert all(y == x * 10 for b in expected for x, y in zip(sum(b[0], []), b[1]))


def test_unbatched_loader():
    loader = DataLoader(_dataset(4), batch_size=None)
    pinned = pinned_dataloader(loader)
    assert pinned.batch_size is None and pinned.sampler is loader.sampler
    assert _batches(pinned) == _batches(loader)


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(7, dtype=torch.float32))


def test_iterable_dataset():
    loader = DataLoader(_Stream(), batch_size=2, drop_last=True)
    pinned = pinned_dataloader(loader)
    assert pinned.pin_memory and pinned.drop_last and pinned.batch_size == 2
    assert _batches(pinned) == _batches(loader) == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


def test_untouched_cases():
    already = DataLoader(_dataset(), pin_memory=True)
    assert pinned_dataloader(already) is already
    plain = [torch.ones(2)]
    assert pinned_dataloader(plain) is plain


def test_strategy_pins_once_per_loader_and_can_be_told_not_to():
    loader = DataLoader(_dataset(), batch_size=4)
    strategy = CUDASingleDeviceStrategy()
    first = strategy.process_dataloader(loader, "fit")
    assert first.pin_memory and first is not loader
    assert strategy.process_dataloader(loader, "fit") is first  # the same copy every epoch
    other = DataLoader(_dataset(), batch_size=4)
    assert strategy.process_dataloader(other, "validate") is not first
    off = CUDADDPSpawnStrategy(pin_memory=False)
    assert off.process_dataloader(loader, "fit") is loader


def test_pin_memory_option_must_be_bool():
    with pytest.raises(TypeError, match="pin_memory='yes'"):
        CUDASingleDeviceStrategy(pin_memory="yes")


def test_pinned_copies_are_not_pickled():
    import pickle

    strategy = CUDADDPSpawnStrategy()
    strategy.process_dataloader(DataLoader(_dataset()), "fit")
    assert strategy._pinned
    clone = pickle.loads(pickle.dumps(strategy))
    assert clone._pinned == {} and clone.pin_memory is True
