"""The CUDA strategies use the user's DataLoaders as given; pinning is an explicit ``pin_memory=True`` option.

Whether memory is really page-locked, and that loaders yielding GPU tensors train, needs a GPU (see
test_gpu.py); here the pass-through, the pinning copy's settings and the pinning of batch structures (with
tensors on the ``meta`` device standing in for tensors that cannot be pinned) are checked with real objects.
"""

from __future__ import annotations

import pickle
import warnings
from collections import namedtuple

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from accelkit_cuda.pinning import PinCPUTensorsCollate, PinnableBatch, pin_cpu_tensors, pinned_dataloader
from accelkit_cuda.strategies import CUDADDPSpawnStrategy, CUDADDPStrategy, CUDASingleDeviceStrategy

pytestmark = pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning")


def _dataset(n=10, device="cpu"):
    return TensorDataset(torch.arange(n, dtype=torch.float32, device=device).unsqueeze(1),
                         torch.arange(n, device=device))


def _batches(loader):
    """The loader's batches as lists; a batch the DataLoader did not pin (no CUDA here) is unwrapped."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "pin_memory is set but no accelerator is found" on CPU-only machines
        batches = [b.batch if isinstance(b, PinnableBatch) else b for b in loader]
    return [[t.tolist() for t in batch] for batch in batches]


# ----------------------------------------------------------------------------------------------- the default
@pytest.mark.parametrize("cls", [CUDASingleDeviceStrategy, CUDADDPStrategy, CUDADDPSpawnStrategy])
def test_loaders_are_passed_through_unchanged_by_default(cls):
    strategy = cls()
    assert strategy.pin_memory is False
    for loader in (DataLoader(_dataset(), batch_size=4),
                   DataLoader(_dataset(device="meta"), batch_size=4),  # tensors already on a device
                   DataLoader(_dataset(), batch_size=4, pin_memory=True)):
        before = loader.pin_memory
        assert strategy.process_dataloader(loader, "fit") is loader
        assert loader.pin_memory is before
    assert strategy._pinned == {}


def test_a_cuda_trainer_keeps_the_loader(make_trainer, simulate_gpus, no_cuda_init):
    simulate_gpus(1)
    trainer = make_trainer(accelerator="cuda", devices=1)
    loader = DataLoader(_dataset(), batch_size=4)
    assert trainer.strategy.process_dataloader(loader, "fit") is loader and loader.pin_memory is False
    asked = CUDASingleDeviceStrategy(pin_memory=True)  # the opt-in reaches the run as the object given
    trainer = make_trainer(accelerator="cuda", devices=1, strategy=asked)
    assert trainer.strategy is asked and asked.pin_memory is True
    assert asked.root_device == torch.device("cuda", 0)


def test_pin_memory_option_must_be_bool():
    with pytest.raises(TypeError, match="pin_memory='yes'"):
        CUDASingleDeviceStrategy(pin_memory="yes")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_pinning_without_cuda_warns_and_keeps_the_loader():
    loader = DataLoader(_dataset(), batch_size=4)
    with pytest.warns(UserWarning, match="pin_memory=True, but CUDA is not available"):
        assert CUDASingleDeviceStrategy(pin_memory=True).process_dataloader(loader, "fit") is loader


def test_strategy_pins_once_per_loader_when_asked(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the copy is built, never iterated
    loader = DataLoader(_dataset(), batch_size=4)
    strategy = CUDASingleDeviceStrategy(pin_memory=True)
    first = strategy.process_dataloader(loader, "fit")
    assert first is not loader and first.pin_memory and not loader.pin_memory
    assert strategy.process_dataloader(loader, "fit") is first  # the same copy every epoch
    assert strategy.process_dataloader(DataLoader(_dataset(), batch_size=4), "validate") is not first
    already = DataLoader(_dataset(), pin_memory=True)
    assert strategy.process_dataloader(already, "fit") is already
    clone = pickle.loads(pickle.dumps(strategy))  # loaders stay in the process that made them
    assert clone._pinned == {} and clone.pin_memory is True and strategy._pinned


# ----------------------------------------------------------------------------------------------- the copy
def test_copy_pins_and_keeps_everything_else():
    def collate(items):
        return torch.stack([i[0] for i in items]), torch.stack([i[1] for i in items]) * 10

    generator = torch.Generator().manual_seed(3)
    loader = DataLoader(_dataset(), batch_size=3, shuffle=True, drop_last=True, collate_fn=collate, generator=generator)
    pinned = pinned_dataloader(loader)
    assert pinned is not loader and pinned.pin_memory and not loader.pin_memory
    assert pinned.dataset is loader.dataset
    assert pinned.batch_sampler is loader.batch_sampler  # same sampler object: set_epoch reaches it
    assert isinstance(pinned.collate_fn, PinCPUTensorsCollate) and pinned.collate_fn.collate_fn is collate
    assert pinned.generator is generator
    generator.manual_seed(7)
    expected = _batches(loader)
    generator.manual_seed(7)
    assert _batches(pinned) == expected
    assert len(expected) == 3 and all(len(b[0]) == 3 for b in expected)
    assert all(y == x * 10 for b in expected for x, y in zip(sum(b[0], []), b[1], strict=True))


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
    expected = [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [(b.batch if isinstance(b, PinnableBatch) else b).tolist() for b in pinned]
    assert got == [b.tolist() for b in loader] == expected


def test_untouched_cases():
    already = DataLoader(_dataset(), pin_memory=True)
    assert pinned_dataloader(already) is already
    plain = [torch.ones(2)]
    assert pinned_dataloader(plain) is plain


# ----------------------------------------------------------------------------------------------- what is pinned
Pair = namedtuple("Pair", "x y")


def test_tensors_that_cannot_be_pinned_pass_through_with_their_structure():
    on_device = torch.ones(2, device="meta")
    sparse = torch.eye(2).to_sparse()
    batch = {"pair": Pair(on_device, "label"), "seq": (on_device, [sparse, 3]), "name": "b0"}
    skipped: set[str] = set()
    out = pin_cpu_tensors(batch, skipped)
    assert skipped == {"meta", "cpu (torch.sparse_coo)"}
    assert type(out["pair"]) is Pair and out["pair"].x is on_device and out["pair"].y == "label"
    assert type(out["seq"]) is tuple and out["seq"][0] is on_device  # a tuple stays a tuple
    assert type(out["seq"][1]) is list and out["seq"][1][0] is sparse and out["seq"][1][1] == 3
    assert out["name"] == "b0"


def test_the_pinning_step_warns_about_device_tensors():
    on_device = torch.ones(2, device="meta")
    wrapped = PinCPUTensorsCollate(lambda items: tuple(items))([on_device])
    assert isinstance(wrapped, PinnableBatch)
    with pytest.warns(UserWarning, match=r"cannot be page-locked \(on meta\).*pin_memory=False"):
        out = wrapped.pin_memory()
    assert out == (on_device,) and out[0] is on_device
    assert pickle.loads(pickle.dumps(wrapped)).batch[0].device.type == "meta"  # crosses from loader workers
