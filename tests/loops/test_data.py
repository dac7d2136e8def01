"""The batches an epoch iterates (``accelkit.loops.data.DataConnector.batches``): each index once, in order, the
batch read one ahead so that the last one is known even for a loader without a length."""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import DataLoader, IterableDataset

import accelkit
from helpers.models import RegressionModule, quiet_trainer, regression_data


class Stream(IterableDataset):
    """``n`` samples of :func:`helpers.models.regression_data`, as a stream without a length."""

    def __init__(self, n: int) -> None:
        self.data = regression_data(n)

    def __iter__(self) -> Any:
        return iter(self.data)


class SeenBatches(accelkit.Callback):
    """Records ``(batch_idx, trainer.is_last_batch, first target of the batch)`` at every training batch's end."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, bool, float]] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append((batch_idx, trainer.is_last_batch, float(batch[1][0])))


@pytest.mark.parametrize("dataset", ["sized", "stream"])
@pytest.mark.parametrize("limit", [None, 3, 1])
def test_each_batch_once_in_order_and_the_last_one_known(tmp_path, dataset, limit):
    data = regression_data(20)
    loader = DataLoader(data if dataset == "sized" else Stream(20), batch_size=4)
    seen = SeenBatches()
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[seen],
                            **({} if limit is None else {"limit_train_batches": limit}))
    trainer.fit(RegressionModule(), train_dataloaders=loader)
    count = 5 if limit is None else limit
    assert seen.seen == [(i, i == count - 1, float(data[4 * i][1][0])) for i in range(count)]
    assert trainer.global_step == count


def test_a_loader_of_one_batch_yields_it_as_the_last(tmp_path):
    seen = SeenBatches()
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[seen])
    trainer.fit(RegressionModule(), train_dataloaders=DataLoader(Stream(3), batch_size=4))
    assert [s[:2] for s in seen.seen] == [(0, True), (0, True)] and trainer.global_step == 2


def test_an_empty_stream_yields_nothing_and_the_fit_says_so(tmp_path):
    seen = SeenBatches()
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[seen])
    with pytest.warns(UserWarning, match="epoch 0 produced no training batches; stopping"):
        trainer.fit(RegressionModule(), train_dataloaders=DataLoader(Stream(0), batch_size=4))
    assert seen.seen == [] and trainer.global_step == 0


@pytest.mark.parametrize("kind", [tuple, list, dict])
def test_an_epochs_device_plan_moves_its_batches_as_move_to_device_in_fewer_instructions(kind):
    """``device_plan``: the epoch's first batch (a tuple, list or dict of plain tensors on one device) decides a
    plan that a batch of the same type with every tensor on that device follows in fewer Python instructions than
    ``move_to_device`` (counted: no clock); a batch that does not fit (a tensor on another device, an element that
    is not a tensor, another type) is moved by ``move_to_device``. Every batch comes out as ``move_to_device``
    gives it: its type, the tensors already there not copied, the others moved."""
    import torch

    from accelkit.utilities.apply_func import device_plan, move_to_device
    from helpers.instructions import instructions

    def make(*items: Any) -> Any:
        return dict(zip("abcd", items, strict=False)) if kind is dict else kind(items)

    def values(batch: Any) -> list[Any]:
        return list(batch.values()) if isinstance(batch, dict) else list(batch)

    meta, cpu = torch.device("meta"), torch.device("cpu")
    for target, first_on in ((meta, meta), (meta, cpu), (cpu, cpu)):  # already there, moved, already there
        # (the third batch has a tensor elsewhere: on the host for a meta plan, on meta for a host plan (skipped))
        first = make(torch.ones(2, device=first_on), torch.zeros(3, dtype=torch.long, device=first_on))
        plan = device_plan(first, target)
        batches = [first, make(torch.ones(4, device=first_on), torch.ones(1, device=first_on)),
                   make(torch.ones(1, device=first_on), torch.ones(1, device=cpu if first_on == meta else meta)),
                   make(torch.ones(1, device=first_on), "a name"), make(torch.ones(1, device=first_on)),
                   [torch.ones(1, device=first_on)] if kind is not list else (torch.ones(1, device=first_on),)]
        for batch in batches:
            if target == cpu and any(getattr(v, "is_meta", False) for v in values(batch)):
                continue  # (a meta tensor holds no data to copy to the host)
            moved, expected = plan(batch), move_to_device(batch, target)
            assert type(moved) is type(expected) and (moved is batch) == (expected is batch)
            assert [type(v) for v in values(moved)] == [type(v) for v in values(expected)]
            assert [getattr(v, "device", v) for v in values(moved)] == [getattr(v, "device", v)
                                                                       for v in values(expected)]
            assert [a is b for a, b in zip(values(moved), values(batch), strict=True)] == \
                [a is b for a, b in zip(values(expected), values(batch), strict=True)]
        planned = instructions(lambda plan=plan, first=first: plan(first), within="accelkit/")
        general = instructions(lambda first=first, target=target: move_to_device(first, target), within="accelkit/")
        assert planned <= 0.65 * general, (target, planned, general)


@pytest.mark.parametrize("kind", [tuple, list])
def test_a_sequence_already_on_the_device_follows_its_plan_in_one_class_test_and_one_device_test(kind):
    """A tuple or list of plain tensors already on the device follows its epoch's plan with its class read once and
    its elements' classes and devices tested in one C call, with nothing left to decide about moving (a plan that
    leaves its batches where they are is a function of its own): at most 22 Python instructions (27 with
    ``type()``, a comparison of sets and a test of whether to move); an empty one comes out as from
    ``move_to_device``."""
    import torch

    from accelkit.utilities.apply_func import device_plan, move_to_device
    from helpers.instructions import instructions

    cpu = torch.device("cpu")
    first = kind((torch.ones(2), torch.zeros(3)))
    plan = device_plan(first, cpu)
    assert instructions(lambda: plan(first), within="accelkit/") <= 22
    moved = plan(first)
    assert type(moved) is kind and (moved is first) == (kind is tuple) and all(
        a is b for a, b in zip(moved, first, strict=True))
    assert plan(kind()) == move_to_device(kind(), cpu) and type(plan(kind())) is kind


class Reads:
    """An iterable of ``n`` one-tensor batches (batch ``i`` holds ``i``) that counts the batches read from it."""

    def __init__(self, n: int) -> None:
        self.n, self.read = n, 0

    def __iter__(self) -> Any:
        import torch

        for i in range(self.n):
            self.read += 1
            yield [torch.full((1,), float(i))]


def epoch_of(tmp_path: Any, loader: Reads, limit: int | None, start: int = 0,
             read_ahead: bool = True) -> list[tuple[int, float, bool, int]]:
    """``DataConnector.epoch_batches`` of ``loader`` iterated as the fit loop does: per batch, its index, its value
    (prepared), whether it is marked the epoch's last, and how many batches the loader had given when it came."""
    from accelkit.loops.data import DataConnector

    data = DataConnector(quiet_trainer(tmp_path), RegressionModule(), None, {})
    batches, prepare = data.epoch_batches(loader, "fit", limit, start=start, read_ahead=read_ahead)
    return [(index, float(prepare(batch)[0][0]), is_last, loader.read) for index, batch, is_last in batches]


@pytest.mark.parametrize("limit", [None, 6])
def test_an_epoch_read_ahead_knows_its_last_batch_one_batch_early(tmp_path, limit):
    """Read ahead (a loader without a length, or one whose state need not match): the loader's next batch is read
    before the current one is handed out, so the last one is marked even without a length; indices from ``start``
    (2: the loader gives the batches from index 2 on, 4 of them up to ``limit``)."""
    count = 4 if limit is not None else 8
    assert epoch_of(tmp_path, Reads(8), limit, start=2) == [
        (2 + i, float(i), i == count - 1, min(i + 2, count)) for i in range(count)]


def test_an_epoch_not_read_ahead_reads_each_batch_at_its_turn_and_knows_the_last_from_the_limit(tmp_path):
    """``read_ahead=False`` (a stateful loader whose saved state must match the batches trained on): no batch is
    read before it is handed out; the last is marked from the limit, counted from index 0 (``start`` skipped)."""
    assert epoch_of(tmp_path, Reads(6), 4, start=1, read_ahead=False) == [
        (1, 0.0, False, 1), (2, 1.0, False, 2), (3, 2.0, True, 3)]


def test_an_epoch_not_read_ahead_whose_loader_ends_before_the_limit_ends_there(tmp_path):
    """A loader that runs out before the limit (its length overstated) ends the epoch at its last batch, unmarked:
    no error, no batch invented."""
    assert epoch_of(tmp_path, Reads(2), 5, read_ahead=False) == [(0, 0.0, False, 1), (1, 1.0, False, 2)]
