"""``accelkit.Fabric`` with ``strategy="xla_spawn"`` on 2 real XLA replicas (PJRT on the host CPU, threads of one
process there), in a process of its own: ``fabric_scenarios.py``.

The cross-replica all-reduce is the test-side ``FlatBufferAllReduceSpawn`` (``xla_scenarios.py``): torch_xla 2.9's
``xm.all_reduce`` aborts in XLA's rendezvous with 2 CPU replicas (measured for this test with a Fabric loop and the
stock strategy: "Termination timeout for all reduce ... Expected 2 threads to join the rendezvous, but only 1 of
them arrived"), so the stock collective runs on a TPU only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.xla, pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]

WORLD = 2


def _ranks(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory, run_scenario) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("fabric_launch")
    result = run_scenario("launch", out, script="fabric_scenarios.py", timeout=300, CPU_NUM_DEVICES=str(WORLD),
                          XLA_THREAD_POOL_SIZE=str(2 * WORLD))
    return result, out


def test_tpu_and_xla_spawn_by_name_resolve_without_starting_xla(launched) -> None:
    result, _ = launched
    assert result["by_name"] == "XLASpawnStrategy" and result["by_name_world"] == WORLD
    assert result["parent_imported_xla_before_launch"] is False


def test_launch_runs_the_function_in_every_replica(launched) -> None:
    result, out = launched
    ranks = _ranks(out)
    assert [r["global_rank"] for r in ranks] == [0, 1] == [r["runtime_ordinal"] for r in ranks]
    assert [r["local_rank"] for r in ranks] == [0, 1]
    assert {r["world_size"] for r in ranks} == {WORLD}
    assert [r["device"] for r in ranks] == ["xla:0", "xla:1"]
    assert result["returned"]["rank"] == 0  # launch() returns global rank 0's result


def test_each_replica_reads_its_own_shard(launched) -> None:
    ranks = _ranks(launched[1])
    epoch = [r["seen"][: len(r["seen"]) // 2] for r in ranks]  # 2 epochs, the same order each
    assert all(len(e) == 32 // WORLD for e in epoch)
    assert not set(epoch[0]) & set(epoch[1])
    assert sorted(epoch[0] + epoch[1]) == list(range(32))


def test_replicas_end_identical_and_equal_the_whole_batch_reference(launched) -> None:
    result, out = launched
    ranks = _ranks(out)
    assert ranks[0]["weights"] == ranks[1]["weights"]  # gradients averaged across replicas every step
    for key, value in result["reference"].items():
        assert torch.allclose(torch.tensor(ranks[0]["weights"][key]), torch.tensor(value), atol=1e-5), key
        assert not torch.allclose(torch.tensor(value), torch.tensor(result["initial"][key]), atol=1e-3), key
