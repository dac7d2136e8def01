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


def test_the_stock_collective_aborts_on_cpu_replicas_and_the_error_says_why(tmp_path: Path, run_scenario) -> None:
    """Why the tests above use the substitute: ``xm.all_reduce`` with 2 CPU replicas aborts their process in XLA's
    rendezvous (if this starts failing, torch_xla fixed it and the stock strategy can be tested here)."""
    result = run_scenario("stock", tmp_path, script="fabric_scenarios.py", timeout=300, CPU_NUM_DEVICES=str(WORLD),
                          XLA_THREAD_POOL_SIZE=str(2 * WORLD))
    assert result["error"] is not None and "BrokenProcessPool" in result["error"]
    assert "known to abort in XLA's rendezvous" in result["error"]


# ------------------------------------------------------------------------------------ launch() without a function
def _run_script(prewarmed, out: Path, **env: str):  # type: ignore[no-untyped-def]
    from helpers.xla import run_program, xla_env

    return run_program([str(Path(__file__).with_name("fabric_script.py")), str(out)],
                       xla_env(WORLD, XLA_THREAD_POOL_SIZE=str(2 * WORLD), **env), 300, prewarmed)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def script_run(tmp_path_factory: pytest.TempPathFactory, prewarmed) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("fabric_script")
    proc = _run_script(prewarmed, out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out


def test_launch_without_a_function_runs_the_rest_of_the_script_in_each_replica_only(script_run: Path) -> None:
    before, after = _lines(script_run / "before.jsonl"), _lines(script_run / "after.jsonl")
    launching_pid = before[0]["pid"]  # the launching process runs the top of the script first
    assert len(before) == 1 + WORLD  # the code before launch(): once in the launching process, once per replica
    assert sorted(r["global_rank"] for r in after) == [0, 1]  # the code after launch(): once per replica
    assert {r["world_size"] for r in after} == {WORLD}
    assert sorted(r["device"] for r in after) == ["xla:0", "xla:1"]
    assert launching_pid not in {r["pid"] for r in after}  # never in the launching process
    assert len({(r["pid"], r["thread"]) for r in after}) == WORLD


def test_launch_without_a_function_trains_as_launch_with_one(script_run: Path, launched) -> None:
    ranks, by_function = _ranks(script_run), _ranks(launched[1])
    assert ranks[0]["weights"] == ranks[1]["weights"]
    assert ranks[0]["weights"] == by_function[0]["weights"]  # the same loop through launch(train)
    assert not set(ranks[0]["seen"]) & set(ranks[1]["seen"])


def test_a_replica_failing_after_launch_fails_the_launching_process(tmp_path: Path, prewarmed) -> None:  # type: ignore[no-untyped-def]
    proc = _run_script(prewarmed, tmp_path, FAIL_AFTER_LAUNCH="1")
    assert proc.returncode != 0
    assert "fails on purpose" in proc.stderr and "a replica failed" in proc.stderr, proc.stderr[-3000:]
    assert "known to abort" not in proc.stderr  # the CPU collectives note is for a replica process that died
    assert not (tmp_path / "after.jsonl").exists()


def test_launch_without_a_function_and_without_a_script_file_names_launch_function(run_python) -> None:  # type: ignore[no-untyped-def]
    proc = run_python("from accelkit import Fabric\n"
                      "Fabric(accelerator='xla', devices=2, strategy='xla_spawn').launch()", devices=2)
    assert proc.returncode != 0
    assert "TypeError" in proc.stderr and "call fabric.launch(function)" in proc.stderr, proc.stderr[-2000:]
    assert "no script file" in proc.stderr
