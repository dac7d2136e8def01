"""A user's own DistributedSampler on real XLA (PJRT_DEVICE=CPU), and the hint for torch_xla 1.x names.

Scenarios in ``sampler_scenarios.py``, each in its own interpreter. The multi-replica run swaps the collective
as documented in ``xla_scenarios.FlatBufferAllReduceSpawn`` (stock collectives abort on the CPU); the
removed-name run in replicas uses the stock ``xla_spawn`` strategy, since it fails before any collective.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.xla, pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]

SCRIPT = "sampler_scenarios.py"


def test_xla_single_uses_a_hand_built_distributed_sampler_as_given(tmp_path, run_scenario) -> None:
    """num_replicas=2, rank=1 (torch_xla.runtime.world_size()/global_ordinal() + 1) on one core: the loader is
    not re-sharded, so exactly rank 1's 32 of 64 samples are read, in DistributedSampler's own order for each
    epoch (set_epoch is called before every epoch)."""
    result = run_scenario("sampler_single", tmp_path, script=SCRIPT)
    assert result["strategy"] == "XLASingleStrategy"
    assert result["runtime"] == [1, 0] and result["sampler"] == [2, 1]
    for epoch in range(3):
        assert len(result["epochs"][str(epoch)]) == 32
        assert result["epochs"][str(epoch)] == result["expected"][epoch]
    assert result["expected"][0] != result["expected"][1] != result["expected"][2]  # the order moves per epoch
    assert result["sampler_epochs"] == [0, 1, 2]
    assert not [w for w in result["warnings"] if "batch_sampler" in w or "IterableDataset" in w]


def test_xla_spawn_replicas_read_their_own_half_through_the_users_sampler(tmp_path, run_scenario) -> None:
    """The TPU guide's sampler with torch_xla 2.x names on 2 replicas: 32 samples each per epoch, disjoint."""
    result = run_scenario("sampler_spawn", tmp_path, script=SCRIPT, CPU_NUM_DEVICES="2", XLA_THREAD_POOL_SIZE="4")
    ranks = result["ranks"]
    assert [r["runtime"] for r in ranks] == [[2, 0], [2, 1]]
    for epoch in range(2):
        read = [r["epochs"][str(epoch)] for r in ranks]
        assert [len(x) for x in read] == [32, 32]
        assert sorted(read[0] + read[1]) == list(range(64))
        assert read == [result["expected"][0][epoch], result["expected"][1][epoch]]
    assert [r["sampler_epochs"] for r in ranks] == [[0, 1], [0, 1]]


def test_a_removed_torch_xla_name_gets_its_replacement_on_xla_single(tmp_path, run_scenario) -> None:
    result = run_scenario("removed_api", tmp_path, script=SCRIPT)
    attribute = result["single_attribute"]
    assert attribute["type"] == "AttributeError"
    assert attribute["message"].startswith("module 'torch_xla.core.xla_model' has no attribute 'xrt_world_size'")
    assert "use torch_xla.runtime.world_size() instead" in attribute["message"]
    imported = result["single_import"]
    assert imported["type"] == "ImportError"
    assert "cannot import name 'get_ordinal'" in imported["message"]
    assert "use torch_xla.runtime.global_ordinal() instead" in imported["message"]


def test_a_removed_torch_xla_name_gets_its_replacement_in_the_replicas(tmp_path, run_scenario) -> None:
    result = run_scenario("removed_api_spawn", tmp_path, script=SCRIPT, CPU_NUM_DEVICES="2")
    failure = result["spawn_attribute"]
    assert failure["type"] == "WorkerError" and failure["cause_type"] == "AttributeError"
    assert "use torch_xla.runtime.world_size() instead" in failure["cause_message"]
    assert "use torch_xla.runtime.world_size() instead" in failure["message"]
    assert "rendezvous" not in failure["message"]  # the CPU collectives note would point the wrong way
