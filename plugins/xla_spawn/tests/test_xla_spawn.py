"""xla_spawn on 4 real XLA CPU replicas, and the parent-process checks before a spawn.

The replica run uses ``FlatBufferAllReduceSpawn`` from ``xla_scenarios.py``: a TEST-SIDE SUBSTITUTE for the
collective only. On torch_xla 2.9 with PJRT_DEVICE=CPU the public collectives (``xm.all_reduce``,
``xm.rendezvous``) abort in XLA's rendezvous (pytorch/xla#5005, #9089; re-measured here before writing this
test), so the subclass replaces the one primitive ``XLASpawnStrategy.all_reduce_`` (and the barrier on top of
it) with a single all-reduce of one flat buffer through the private ``torch_xla._XLAC._xla_spmd_all_reduce``,
which needs ``XLA_THREAD_POOL_SIZE`` >= the replica count. The production strategy keeps the public
``xm.all_reduce``; every other part of the run (torch_xla.launch, per-replica pickled copies, ordinals from
torch_xla.runtime, sharded MpDeviceLoader, gradient averaging, the checkpoint writer) is the production code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.xla, pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]

WORLD = 4


@pytest.fixture(scope="module")
def spawn(tmp_path_factory: pytest.TempPathFactory, run_scenario) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("xla_spawn")
    result = run_scenario("spawn", out, CPU_NUM_DEVICES=str(WORLD), XLA_THREAD_POOL_SIZE=str(2 * WORLD))
    return result, out


def _ranks(out: Path) -> list[dict]:
    import json

    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


def test_parent_did_not_import_torch_xla_before_fit(spawn) -> None:
    assert spawn[0]["parent_imported_xla_before_fit"] is False


def test_replica_ordinals_come_from_the_runtime(spawn) -> None:
    ranks = _ranks(spawn[1])
    assert [r["global_rank"] for r in ranks] == [0, 1, 2, 3]
    assert [r["local_rank"] for r in ranks] == [0, 1, 2, 3]
    assert {r["world_size"] for r in ranks} == {WORLD}
    assert {r["node_rank"] for r in ranks} == {0}
    assert [r["device"] for r in ranks] == [f"xla:{r}" for r in range(WORLD)]


def test_replicas_have_private_copies(spawn) -> None:
    """PJRT on CPU runs the replicas as threads of one process: each must still own its trainer and module."""
    ranks = _ranks(spawn[1])
    assert len({r["pid"] for r in ranks}) == 1  # threads of one process, as measured
    assert len({r["module_id"] for r in ranks}) == WORLD
    assert len({r["trainer_id"] for r in ranks}) == WORLD


def test_each_replica_reads_its_own_shard(spawn) -> None:
    ranks = _ranks(spawn[1])
    epoch = [r["indices"][: len(r["indices"]) // 2] for r in ranks]  # 2 epochs, same order each
    assert all(len(e) == 64 // WORLD for e in epoch)
    for a in range(WORLD):
        for b in range(a + 1, WORLD):
            assert not set(epoch[a]) & set(epoch[b])
    assert sorted(i for e in epoch for i in e) == list(range(64))


def test_replicas_end_identical_and_equal_the_full_batch_reference(spawn) -> None:
    out = spawn[1]
    states = [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]
    reference = torch.load(out / "reference.pt")
    initial = torch.load(out / "initial.pt")
    caller = torch.load(out / "caller.pt")
    for key in reference:
        for state in states[1:]:
            assert torch.equal(state[key], states[0][key]), key
        assert torch.allclose(states[0][key], reference[key], atol=1e-5), key
        assert not torch.allclose(initial[key], reference[key], atol=1e-3), key  # training moved the weights
        assert torch.equal(caller[key], states[0][key]), key  # rank 0's weights are back in the caller's model


def test_checkpoint_written_by_one_replica(spawn) -> None:
    result, out = spawn
    writes = [w.split() for w in result["writes"]]
    ckpt_writers = [int(ordinal) for ordinal, name in writes if name.endswith(".ckpt")]
    assert ckpt_writers == [0, 0]  # one write per epoch, by local ordinal 0 only
    # The default checkpoint callback keeps Lightning's one file, the latest epoch=E-step=S.ckpt (no last.ckpt);
    # atomic writes leave no temporary file behind.
    assert result["leftovers"] == ["epoch=1-step=8.ckpt"]
    saved = torch.load(out / "checkpoint_state.pt")
    final = torch.load(out / "rank0.pt")
    assert all(torch.equal(saved[k], final[k]) for k in final)
    assert result["global_step"] == 2 * 64 // (WORLD * 4)
    assert result["current_epoch"] == 2


def test_runtime_started_in_parent_is_detected_before_spawning(single_run: dict) -> None:
    """A Trainer over 2 devices built before anything used XLA; the single-core runs of ``single_run`` then started
    the runtime in the parent: resolving another such Trainer, and launching the first, both refuse."""
    result = single_run["touched"]
    for key in ("resolve_error", "launch_error"):
        assert result[key] is not None, key
        assert "already running in this (parent) process" in result[key]
        assert "Runtime is already initialized" in result[key]
    assert result["launch_error"].startswith("RuntimeError")
    assert result["single_after_touch_steps"] == 8
