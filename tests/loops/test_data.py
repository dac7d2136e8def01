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
