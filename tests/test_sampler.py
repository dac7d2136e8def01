"""Distributed sampling: :class:`accelkit.strategies.sampler.ShardSampler` invariants (hypothesis),
:func:`accelkit.strategies.sampler.distribute_dataloader`, and the Trainer's use of both (``use_distributed_sampler``,
the ``accelkit_distributed_sampler`` hook)."""

from __future__ import annotations

import math
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset, Sampler, TensorDataset

from accelkit.errors import ConfigurationError
from accelkit.plugins.manager import PluginManager
from accelkit.strategies.sampler import ShardSampler, default_distributed_sampler, distribute_dataloader, set_epoch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spawned workers import helpers.samplers by name
from helpers.samplers import KeepsExtra, batch_sampler_loader  # noqa: E402

sizes = st.integers(min_value=0, max_value=150)
replicas = st.integers(min_value=1, max_value=9)


def shards(n, num_replicas, shuffle=False, seed=0, epoch=0, sampler=None):
    """Every rank's indices for one epoch."""
    out = []
    for rank in range(num_replicas):
        s = ShardSampler(range(n), num_replicas, rank, shuffle=shuffle, seed=seed, sampler=sampler)
        s.set_epoch(epoch)
        out.append(list(s))
    return out


def interleave(per_rank):
    """The global order the ranks' shards were cut from (rank r took positions r, r + R, ...)."""
    width = len(per_rank[0]) if per_rank else 0
    return [per_rank[r][i] for i in range(width) for r in range(len(per_rank))]


@given(n=sizes, num_replicas=replicas, shuffle=st.booleans(), seed=st.integers(0, 2**31), epoch=st.integers(0, 50))
def test_every_index_appears_shards_are_equal_and_only_padding_repeats(n, num_replicas, shuffle, seed, epoch):
    per_rank = shards(n, num_replicas, shuffle, seed, epoch)
    expected_len = math.ceil(n / num_replicas)
    for rank, shard in enumerate(per_rank):
        assert len(shard) == expected_len
        assert len(ShardSampler(range(n), num_replicas, rank, shuffle=shuffle, seed=seed)) == expected_len
    seen = Counter(i for shard in per_rank for i in shard)
    assert set(seen) == set(range(n))
    repeated = sum(count - 1 for count in seen.values())
    assert repeated == expected_len * num_replicas - n
    assert repeated < num_replicas
    # beyond the padding no rank sees another's samples: the overlap between ranks is bounded by the repeats
    ranks_of = Counter(i for shard in per_rank for i in set(shard))
    assert sum(count - 1 for count in ranks_of.values()) <= repeated


@given(n=st.integers(1, 150), num_replicas=replicas, seed=st.integers(0, 2**31), epoch=st.integers(0, 50))
def test_shuffle_is_one_global_permutation_shared_by_all_ranks(n, num_replicas, seed, epoch):
    order = interleave(shards(n, num_replicas, True, seed, epoch))
    assert sorted(order[:n]) == list(range(n))  # a permutation, cut into shards...
    assert order == (order[:n] * num_replicas)[: len(order)]  # ...padded by repeating its start
    again = interleave(shards(n, num_replicas, True, seed, epoch))
    assert again == order  # deterministic: a rank computing its shard elsewhere agrees


@settings(max_examples=50)
@given(n=st.integers(20, 150), num_replicas=replicas, seed=st.integers(0, 2**31), epoch=st.integers(0, 50))
def test_shuffle_changes_between_epochs_and_seeds(n, num_replicas, seed, epoch):
    this_epoch = interleave(shards(n, num_replicas, True, seed, epoch))
    assert interleave(shards(n, num_replicas, True, seed, epoch + 1)) != this_epoch
    assert this_epoch[:n] != list(range(n))


@given(n=sizes, num_replicas=replicas, epoch=st.integers(0, 5))
def test_without_shuffle_the_order_is_kept(n, num_replicas, epoch):
    per_rank = shards(n, num_replicas, shuffle=False, epoch=epoch)
    order = interleave(per_rank)
    assert order[:n] == list(range(n))
    for rank, shard in enumerate(per_rank):
        assert shard[: len(range(rank, n, num_replicas))] == list(range(rank, n, num_replicas))


class ReversedEvens(Sampler[int]):
    """A user sampler: the even indices, last first; counts its epochs."""

    def __init__(self, n):
        self.n = n
        self.epochs = []

    def __iter__(self):
        return iter(range((self.n - 1) // 2 * 2, -1, -2))

    def __len__(self):
        return (self.n + 1) // 2

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


class SeededPermutation(Sampler[int]):
    """A user sampler with its own (deterministic) shuffle."""

    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def __iter__(self):
        return iter(torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed)).tolist())

    def __len__(self):
        return self.n


@given(n=st.integers(1, 120), num_replicas=replicas, seed=st.integers(0, 1000), shuffle=st.booleans())
def test_a_custom_sampler_is_wrapped_and_its_order_sharded(n, num_replicas, seed, shuffle):
    for user in (ReversedEvens(n), SeededPermutation(n, seed)):
        per_rank = []
        for rank in range(num_replicas):
            wrapped = default_distributed_sampler(range(n), user, shuffle, num_replicas, rank, 0)
            assert isinstance(wrapped, ShardSampler) and wrapped.sampler is user
            assert len(wrapped) == math.ceil(len(user) / num_replicas)
            per_rank.append(list(wrapped))
        user_order = list(user)
        order = interleave(per_rank)
        assert order[: len(user_order)] == user_order  # the user's order, not range(n) and not reshuffled
        assert order == (user_order * num_replicas)[: len(order)]
        assert len({len(s) for s in per_rank}) == 1


class Unsized(Sampler):
    """A user sampler without a length."""

    def __iter__(self):
        return iter(range(6))


def test_a_wrapped_sampler_without_a_length_says_so():
    wrapped = ShardSampler(range(6), num_replicas=2, rank=0, sampler=Unsized())
    assert list(wrapped) == [0, 2, 4]  # its order is still sharded
    with pytest.raises(TypeError, match=r"the wrapped sampler <.*Unsized.*> has no length"):
        len(wrapped)


def test_set_epoch_reaches_a_wrapped_sampler():
    user = ReversedEvens(10)
    wrapped = default_distributed_sampler(range(10), user, True, 2, 1, 0)
    wrapped.set_epoch(3)
    wrapped.set_epoch(4)
    assert user.epochs == [3, 4]


@pytest.mark.parametrize("plain", [torch.utils.data.SequentialSampler(range(7)),
                                   torch.utils.data.RandomSampler(range(7)), None])
def test_plain_samplers_are_replaced_not_wrapped(plain):
    chosen = default_distributed_sampler(range(7), plain, True, 3, 2, 5)
    assert isinstance(chosen, ShardSampler) and chosen.sampler is None
    assert (chosen.num_replicas, chosen.rank, chosen.shuffle, chosen.seed) == (3, 2, True, 5)


@pytest.mark.parametrize("rank, num_replicas", [(-1, 2), (2, 2), (0, 0)])
def test_bad_rank_is_rejected(rank, num_replicas):
    with pytest.raises(ValueError, match=f"rank={rank}"):
        ShardSampler(range(4), num_replicas, rank)


# ---------------------------------------------------------------------------------------- distribute_dataloader
def _pairs_collate(batch):
    """A user collate_fn: returns (list of x, sum of y) so its use is visible."""
    return [x for x, _ in batch], sum(int(y) for _, y in batch)


def _dataset(n=20):
    return TensorDataset(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.arange(n))


def _core_hook(isolated_manager=None):
    return (isolated_manager or PluginManager(autoload=False)).hook.accelkit_distributed_sampler


@pytest.mark.parametrize("shuffle, stage, shuffled", [(True, "fit", True), (True, "validate", False),
                                                      (False, "fit", False)])
def test_distribute_dataloader_keeps_the_loader_settings(isolated, shuffle, stage, shuffled):
    loader = DataLoader(_dataset(21), batch_size=4, shuffle=shuffle, collate_fn=_pairs_collate, drop_last=True)
    out = distribute_dataloader(loader, _core_hook(), num_replicas=3, rank=1, seed=7, stage=stage)
    assert out is not loader
    assert (out.batch_size, out.drop_last, out.collate_fn) == (4, True, _pairs_collate)
    assert isinstance(out.sampler, ShardSampler)
    assert (out.sampler.num_replicas, out.sampler.rank, out.sampler.seed, out.sampler.shuffle) == (3, 1, 7, shuffled)
    batches = list(out)
    assert len(batches) == len(out) == 7 // 4  # rank 1 has 7 of 21 samples; drop_last drops the remainder 3
    xs, total = batches[0]
    assert isinstance(xs, list) and len(xs) == 4 and isinstance(total, int)
    if not shuffled:
        assert [int(x) for x in xs] == [1, 4, 7, 10]


def test_an_iterable_dataset_is_left_alone_with_a_warning(isolated):
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(5))

    loader = DataLoader(Stream(), batch_size=2)
    with pytest.warns(UserWarning, match="IterableDataset"):
        out = distribute_dataloader(loader, _core_hook(), 2, 0, 0, "fit")
    assert out is loader


def test_a_batch_sampler_without_a_sampler_to_shard_is_refused_saying_what_to_do(isolated):
    class Pairs(Sampler[list]):
        def __iter__(self):
            return iter([[0, 1], [2, 3]])

        def __len__(self):
            return 2

    loader = DataLoader(_dataset(4), batch_sampler=Pairs())
    with pytest.raises(ConfigurationError, match="batch_sampler Pairs cannot be sharded over the 2 processes") as info:
        distribute_dataloader(loader, _core_hook(), 2, 0, 0, "fit")
    assert "no `sampler` attribute" in str(info.value) and "use_distributed_sampler=False" in str(info.value)


def test_a_batch_sampler_that_ignores_its_replaced_sampler_is_refused(isolated):
    class Frozen(torch.utils.data.BatchSampler):  # draws every batch in __init__: a new `sampler` changes nothing
        def __init__(self, sampler, batch_size, drop_last):
            super().__init__(sampler, batch_size, drop_last)
            self.batches = list(torch.utils.data.BatchSampler(sampler, batch_size, drop_last))

        def __iter__(self):
            return iter(self.batches)

        def __len__(self):
            return len(self.batches)

    loader = DataLoader(_dataset(20), batch_sampler=Frozen(torch.utils.data.SequentialSampler(range(20)), 4, False))
    with pytest.raises(ConfigurationError, match="batch_sampler Frozen cannot be sharded") as info:
        distribute_dataloader(loader, _core_hook(), 2, 0, 0, "fit")
    assert "still gives 5 batches of 4 where 3 were expected" in str(info.value)


@pytest.mark.parametrize("kind", ["BatchSampler", "KeepsExtra"])
def test_a_loader_built_with_a_batch_sampler_is_sharded_keeping_its_batches(isolated, kind):
    """20 samples, batches of 8, 2 ranks: each rank reads its 10 as batches of 8 and 2, the ranks disjoint; a
    user's class stays its class with its own settings."""
    extra = {"kind": KeepsExtra, "tag": "kept"} if kind == "KeepsExtra" else {}
    read, sizes = [], []
    for rank in range(2):
        loader = batch_sampler_loader(**extra)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sharded = distribute_dataloader(loader, _core_hook(), 2, rank, 0, "fit")
        assert type(sharded.batch_sampler).__name__ == kind
        batches = [batch[2].tolist() for batch in sharded]
        sizes.append([len(b) for b in batches])
        read.append([i for b in batches for i in b])
    assert sizes == [[8, 2], [8, 2]]
    assert sorted(read[0] + read[1]) == list(range(20))
    assert read == [_shard_order(20, 2, rank, 0, 0) for rank in range(2)]  # the seeded shared shuffle, sharded


def test_non_dataloader_iterables_pass_through(isolated):
    batches = [torch.zeros(2), torch.ones(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert distribute_dataloader(batches, _core_hook(), 2, 1, 0, "fit") is batches


# ---------------------------------------------------------------------------------------- through a Trainer
def _two_rank_fit(forked_python, tmp_path, name):
    """``helpers.samplers.TWO_RANK_FITS[name]`` on two ``ddp_fork`` processes, in a process forked from the prewarmed
    interpreter: what each rank read, the sampler plugin's calls and the standard error of the run's processes. What
    these tests check (the samplers each rank gets, the plugins' answers, the warnings) is decided in each worker
    whichever way it started; ``ddp_spawn``'s pickling of the loaders and plugins is the same under ``ddp_fork``."""
    return forked_python(f"""
        import json
        from helpers.samplers import record_two_rank_fit
        print(json.dumps(record_two_rank_fit({str(tmp_path)!r}, {name!r})))
        """, path=[Path(__file__).resolve().parent], env={"CUDA_VISIBLE_DEVICES": ""})


def _shard_order(n, num_replicas, rank, seed, epoch):
    sampler = ShardSampler(range(n), num_replicas, rank, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.slow
def test_trainer_gives_each_rank_its_shard_and_asks_plugins_first(tmp_path, forked_python):
    """Two ranks, a shuffled loader of 9: each reads its ShardSampler shard (5, one padded) in the shared,
    seeded order of each epoch; a plugin that answers None was asked with the run's values and deferred."""
    run = _two_rank_fit(forked_python, tmp_path, "plugin_defers")
    ranks, calls = run["ranks"], run["calls"]
    for epoch in range(2):
        read = [r["epochs"][str(epoch)] for r in ranks]
        assert read == [_shard_order(9, 2, rank, 11, epoch) for rank in range(2)]
        assert [len(x) for x in read] == [5, 5] and set(read[0]) | set(read[1]) == set(range(9))
    assert ranks[0]["epochs"]["0"] != ranks[0]["epochs"]["1"]
    assert calls == [[{"shuffle": True, "num_replicas": 2, "rank": rank, "seed": 11, "stage": "fit",
                       "sampler": "RandomSampler"}] for rank in range(2)]


@pytest.mark.slow
def test_use_distributed_sampler_false_opts_out(tmp_path, forked_python):
    ranks = _two_rank_fit(forked_python, tmp_path, "opted_out")["ranks"]
    assert [r["epochs"]["0"] for r in ranks] == [list(range(9)), list(range(9))]  # every rank reads everything


def test_single_process_runs_keep_the_loader(tmp_path):
    """One process: the loader's own RandomSampler (and its generator) decides the order, epoch after epoch."""
    from helpers.samplers import fit_and_read, indexed_data

    loader = DataLoader(indexed_data(9), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(7))
    twin = DataLoader(indexed_data(9), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(7))
    expected = [[int(i) for b in twin for i in b[2]] for _ in range(2)]
    ranks, _ = fit_and_read(tmp_path, devices=1, loader=loader)
    assert [ranks[0]["epochs"][str(e)] for e in range(2)] == expected


@pytest.mark.slow
def test_a_plugin_replaces_the_sampler_through_the_hook(tmp_path, forked_python):
    run = _two_rank_fit(forked_python, tmp_path, "plugin_replaces")
    ranks, calls = run["ranks"], run["calls"]
    assert [r["epochs"]["0"] for r in ranks] == [[8, 6, 4, 2], [7, 5, 3, 1]]  # drop_last drops rank 0's odd one
    for rank in range(2):
        fit = [c for c in calls[rank] if c["stage"] == "fit"]
        assert fit == [{"shuffle": True, "num_replicas": 2, "rank": rank, "seed": 3, "stage": "fit",
                        "sampler": "RandomSampler"}]
        validate = {(c["shuffle"], c["sampler"]) for c in calls[rank] if c["stage"] == "validate"}
        assert validate == {(False, "SequentialSampler")}


# ---------------------------------------------------------------------------------------- rank-aware samplers
class RankAware(Sampler[int]):
    """A user's own rank-aware sampler (not a DistributedSampler): every ``num_replicas``-th index from ``rank``."""

    def __init__(self, n, num_replicas, rank):
        self.n, self.num_replicas, self.rank = n, num_replicas, rank
        self.epochs = []

    def __iter__(self):
        return iter(range(self.rank, self.n, self.num_replicas))

    def __len__(self):
        return len(range(self.rank, self.n, self.num_replicas))

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


@pytest.mark.parametrize("make", [
    lambda ds: torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3),
    lambda ds: RankAware(len(ds), 2, 1),
])
def test_a_rank_aware_sampler_is_used_as_given(isolated, make):
    dataset = _dataset(64)
    sampler = make(dataset)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert distribute_dataloader(loader, _core_hook(), num_replicas=2, rank=1, seed=0, stage="fit") is loader
        # the core's hook implementation keeps it too, for plugins or callers that ask it directly
        assert default_distributed_sampler(dataset, sampler, True, 2, 1, 0) is sampler
    assert sum(len(b[1]) for b in loader) == 32


def test_a_sampler_whose_rank_is_unset_is_still_sharded(isolated):
    unset = RankAware(20, 2, 0)
    unset.rank = None  # num_replicas alone does not make it rank-aware
    out = distribute_dataloader(DataLoader(_dataset(20), sampler=unset), _core_hook(), 2, 1, 0, "fit")
    assert isinstance(out.sampler, ShardSampler) and out.sampler.sampler is unset


@pytest.mark.parametrize("theirs, ours", [((4, 1), (2, 1)), ((2, 0), (2, 1)), ((2, 1), (1, 0))])
def test_a_rank_aware_sampler_that_disagrees_with_the_run_is_used_with_a_warning(isolated, theirs, ours):
    dataset = _dataset(64)
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=theirs[0], rank=theirs[1])
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    with pytest.warns(UserWarning) as caught:
        assert distribute_dataloader(loader, _core_hook(), ours[0], ours[1], 0, "fit") is loader
    message = str(caught[0].message)
    assert f"num_replicas={theirs[0]}, rank={theirs[1]}" in message
    assert f"world size {ours[0]} and this process is rank {ours[1]}" in message
    assert "torch_xla.runtime.world_size()" in message


def test_a_matching_sampler_in_a_single_process_run_is_silent(isolated):
    dataset = _dataset(8)
    loader = DataLoader(dataset, sampler=torch.utils.data.DistributedSampler(dataset, num_replicas=1, rank=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert distribute_dataloader(loader, _core_hook(), 1, 0, 0, "fit") is loader
    plain = DataLoader(dataset, shuffle=True)
    assert distribute_dataloader(plain, _core_hook(), 1, 0, 0, "fit") is plain  # one process: nothing to shard


@pytest.mark.parametrize("batch_sampler_type", [torch.utils.data.BatchSampler, "custom"])
def test_a_batch_sampler_around_a_rank_aware_sampler_is_left_alone_silently(isolated, batch_sampler_type):
    class Custom(torch.utils.data.BatchSampler):
        pass

    kind = Custom if batch_sampler_type == "custom" else batch_sampler_type
    dataset = _dataset(64)
    inner = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=False)
    loader = DataLoader(dataset, batch_sampler=kind(inner, 4, drop_last=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "custom batch_sampler" warning
        assert distribute_dataloader(loader, _core_hook(), 2, 0, 0, "fit") is loader
    assert [int(i) for b in loader for i in b[1]] == list(range(0, 64, 2))


def test_a_rank_aware_batch_sampler_is_left_alone(isolated):
    class RankBatches(Sampler[list]):
        num_replicas, rank = 2, 1

        def __iter__(self):
            return iter([[1, 3], [5, 7]])

        def __len__(self):
            return 2

    loader = DataLoader(_dataset(8), batch_sampler=RankBatches())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert distribute_dataloader(loader, _core_hook(), 2, 1, 0, "fit") is loader


# ---------------------------------------------------------------------------------------- set_epoch
def test_set_epoch_reaches_the_sampler_once():
    dataset = _dataset(16)
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True, seed=1)
    loader = DataLoader(dataset, batch_size=2, sampler=sampler)  # loader.batch_sampler.sampler is the same object
    assert set_epoch(loader, 3) == [sampler]
    assert sampler.epoch == 3
    expected = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True, seed=1)
    expected.set_epoch(3)
    assert [int(i) for b in loader for i in b[1]] == list(expected)


def test_set_epoch_reaches_a_batch_samplers_inner_sampler_and_the_batch_sampler():
    class EpochBatches(torch.utils.data.BatchSampler):
        def set_epoch(self, epoch):
            self.epoch = epoch

    inner = RankAware(16, 2, 1)
    batches = EpochBatches(inner, 2, drop_last=False)
    loader = DataLoader(_dataset(16), batch_sampler=batches)
    called = set_epoch(loader, 5)
    assert batches in called and inner in called and len(called) == 2
    assert inner.epochs == [5] and batches.epoch == 5


def test_set_epoch_looks_through_a_device_loader_and_ignores_plain_iterables():
    class DeviceLoader:  # the shape of torch_xla's MpDeviceLoader: the DataLoader is kept as ``_loader``
        def __init__(self, loader):
            self._loader = loader

    inner = RankAware(8, 2, 0)
    assert set_epoch(DeviceLoader(DataLoader(_dataset(8), sampler=inner)), 2) == [inner]
    assert inner.epochs == [2]
    assert set_epoch([torch.zeros(1)], 1) == []
    assert set_epoch(DataLoader(_dataset(4)), 1) == []  # SequentialSampler has no set_epoch



def test_set_epoch_looks_through_a_device_loader_keeping_the_loader_as_its_public_attribute():
    pytest.importorskip("accelkit_xla_spawn")
    from accelkit_xla_spawn.device_loader import DeviceLoader  # its module imports no torch_xla

    class OwnDeviceLoader:  # a plugin's device loader of its own, following the documented convention
        def __init__(self, loader):
            self.loader = loader

    inner = RankAware(8, 2, 0)
    assert set_epoch(DeviceLoader(DataLoader(_dataset(8), sampler=inner), device=None), 3) == [inner]
    assert set_epoch(OwnDeviceLoader(DataLoader(_dataset(8), sampler=inner)), 4) == [inner]
    assert inner.epochs == [3, 4]

# ---------------------------------------------------------------------------------------- real 2-process runs
def _distributed_order(num_replicas, rank, epoch, n=64, seed=5):
    expected = torch.utils.data.DistributedSampler(range(n), num_replicas=num_replicas, rank=rank, shuffle=True,
                                                   seed=seed)
    expected.set_epoch(epoch)
    return list(expected)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["matching", "batch_sampler"])
def test_two_ranks_read_a_users_distributed_sampler_as_given(tmp_path, forked_python, mode):
    """2 ranks, 64 samples, the module's own DistributedSampler: each rank reads 32 per epoch (not 16), in the
    sampler's own order for that epoch (set_epoch called before every epoch), the ranks' halves disjoint."""
    run = _two_rank_fit(forked_python, tmp_path, f"own_{mode}")
    ranks, err = run["ranks"], run["err"]
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["pid"] != ranks[1]["pid"]
    for epoch in range(2):
        read = [r["epochs"][str(epoch)] for r in ranks]
        assert [len(x) for x in read] == [32, 32]
        assert sorted(read[0] + read[1]) == list(range(64))
        for rank in range(2):
            assert read[rank] == _distributed_order(2, rank, epoch)
    assert ranks[0]["epochs"]["0"] != ranks[0]["epochs"]["1"]  # the shuffle changed with the epoch
    assert [r["sampler_epochs"] for r in ranks] == [[0, 1], [0, 1]]
    assert "num_replicas=" not in err and "custom batch_sampler" not in err


@pytest.mark.slow
def test_two_ranks_warn_when_a_users_sampler_splits_differently(tmp_path, forked_python):
    """num_replicas=4 on 2 processes: used as given (each rank reads its quarter) with a warning per rank."""
    run = _two_rank_fit(forked_python, tmp_path, "own_mismatch")
    ranks, err = run["ranks"], run["err"]
    for rank in range(2):
        assert ranks[rank]["epochs"]["0"] == _distributed_order(4, rank, 0)
        assert f"num_replicas=4, rank={rank}, but this run has world size 2 and this process is rank {rank}" in err


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_two_ranks_shard_an_iterable_dataset_through_a_plugin_by_rank_and_worker(tmp_path, forked_python,
                                                                                 num_workers):
    """2 ranks reading a 64-item stream through accelkit_shard_iterable: each reads a disjoint half (with 0 or 2
    loader workers per rank), and the 'every rank reads the whole stream' warning is not given."""
    run = _two_rank_fit(forked_python, tmp_path, f"stream_{num_workers}_workers")
    read = [rank["epochs"]["0"] for rank in run["ranks"]]
    assert [len(r) for r in read] == [32, 32]
    assert not set(read[0]) & set(read[1]) and sorted(read[0] + read[1]) == list(range(64))
    assert "cannot shard it" not in run["err"]


def test_without_a_plugin_an_iterable_dataset_stays_whole_with_the_warning(isolated):
    from helpers.samplers import IndexStream, StreamShardingPlugin

    loader = DataLoader(IndexStream(8), batch_size=2)
    manager = PluginManager()
    with pytest.warns(UserWarning, match="every rank reads the whole stream"):
        assert distribute_dataloader(loader, _core_hook(), 2, 0, 0, "fit",
                                     shard_iterable=manager.hook.accelkit_shard_iterable) is loader
    manager.add_plugin(StreamShardingPlugin())
    sharded = distribute_dataloader(loader, _core_hook(), 2, 1, 0, "fit",
                                    shard_iterable=manager.hook.accelkit_shard_iterable)
    assert [int(i) for batch in sharded for i in batch[2]] == [1, 3, 5, 7]


def test_a_streams_loader_can_be_rebuilt_with_a_worker_init_fn():
    """seed_everything(workers=True) rebuilds loaders with a worker_init_fn; a stream's loader made its own sampler,
    which a DataLoader refuses to be given (this raised ValueError)."""
    from accelkit.strategies.sampler import rebuild_loader
    from helpers.samplers import IndexStream

    loader = rebuild_loader(DataLoader(IndexStream(6), batch_size=2), worker_init_fn=print)
    assert loader.worker_init_fn is print and [int(i) for batch in loader for i in batch[2]] == list(range(6))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["batch_sampler_fork", "batch_sampler_spawn", "batch_sampler_subclass"])
def test_two_ranks_train_every_sample_once_through_a_users_batch_sampler(tmp_path, forked_python, name):
    """``batch_sampler=BatchSampler(RandomSampler(data), 8, False)`` (or a class of the user's) over 20 samples on
    2 processes: each rank trains its 10 as batches of 8 and 2, every sample once per epoch, and nothing warns."""
    run = _two_rank_fit(forked_python, tmp_path, name)
    ranks = run["ranks"]
    for epoch in map(str, range(len(ranks[0]["epochs"]))):
        assert [r["sizes"][epoch] for r in ranks] == [[8, 2], [8, 2]]
        assert sorted(ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch]) == list(range(20))
    assert "batch_sampler" not in run["err"]


@pytest.mark.slow
def test_a_batch_sampler_run_resumed_mid_epoch_trains_the_rest_of_the_epoch_once(tmp_path, forked_python):
    """2 processes, 40 samples in batches of 4 through a BatchSampler: stopped after step 3 of epoch 0 and resumed
    from its checkpoint, the two fits together train every sample of epoch 0 once, in the uninterrupted order;
    resumed on one process, the samples trained count as batches of the batch sampler's size."""
    run = forked_python(f"""
        import json
        from helpers.samplers import resume_batch_sampler_mid_epoch
        print(json.dumps(resume_batch_sampler_mid_epoch({str(tmp_path)!r})))
        """, path=[Path(__file__).resolve().parent], env={"CUDA_VISIBLE_DEVICES": ""})
    first, second = run["read"]["first"], run["read"]["second"]
    for rank in range(2):
        assert first[rank]["sizes"]["0"] == [4, 4, 4] and second[rank]["sizes"]["0"] == [4, 4]
        assert first[rank]["epochs"]["0"] + second[rank]["epochs"]["0"] == _shard_order(40, 2, rank, 0, 0)
    err = run["err"]
    assert err.count("resuming inside epoch") == 1, err  # the same geometry: an exact resume, without a word
    # on one process (another geometry) the 24 samples trained count as 6 batches of the batch sampler's 4, and the
    # other 16 samples' worth of the epoch is trained
    assert "the 24 sample(s) trained before the checkpoint count as 6 batch(es) of 4 per process" in err, err
    assert run["read"]["single"][0]["sizes"]["0"] == [4, 4, 4, 4]
