"""accelkit.Fabric over several CPU processes: ``strategy="ddp"`` + ``launch()`` (the script run again with the
ranks), ``ddp_spawn`` + ``launch(function)``, and the guarantees of every accelkit launch (a dead rank named, a
collective only some ranks reach named, Ctrl-C ends every process). Programs: ``helpers/fabric_runs.py``."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from helpers.guards import child_env, pid_alive, wait_gone

HELPER = Path(__file__).parent / "helpers" / "fabric_runs.py"

pytestmark = pytest.mark.slow


def _run(prewarmed, tmp_path: Path, scenario: str, strategy: str, out: Path, timeout: float = 240):  # type: ignore[no-untyped-def]
    return prewarmed.run([str(HELPER), scenario, strategy, "2", str(out)], cwd=tmp_path, env=child_env(),
                         timeout=timeout)


def _check_data_parallel(result: dict) -> None:
    assert result["world_size"] == 2 and result["gathered_shape"] == [2, 1, 4]
    assert result["ranks_agree"], "the ranks' weights differ after synchronised steps"
    assert result["unsynced_during_accumulation"], "no_backward_sync did not skip the gradient synchronisation"
    assert result["batches"] == 4  # 16 samples, batch 2, two ranks: each reads its half
    assert result["mean_rank"] == 0.5 and result["sum_rank"] == 1.0
    first_epoch = [v for rank in result["seen"] for batch in rank[:4] for v in batch]
    assert len(first_epoch) == len(set(first_epoch)) == 16  # disjoint shards covering the data
    assert result["seen"][0][:4] != result["seen"][0][4:]  # set_epoch: another order in the second epoch


def test_ddp_launch_runs_the_script_again_as_the_other_rank(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "result.json"
    proc = _run(prewarmed, tmp_path, "train", "ddp", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    _check_data_parallel(result)
    assert result["broadcast"] == result["pid"]  # rank 0 is the process the test started


def test_ddp_spawn_launch_runs_the_function_and_returns_rank_zeros_result(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "result.json"
    proc = _run(prewarmed, tmp_path, "spawn", "ddp_spawn", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    _check_data_parallel(result)
    assert result["pid"] != result["caller_pid"]  # computed in a worker, returned to the caller


def test_a_dead_rank_is_named_and_the_run_ends(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = _run(prewarmed, tmp_path, "dead_rank", "ddp", tmp_path / "unused", timeout=120)
    assert proc.returncode != 0
    assert "the process of rank 1 (local rank 1" in proc.stderr and "exited with code 3" in proc.stderr


def test_a_save_only_rank_zero_reaches_is_named(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = _run(prewarmed, tmp_path, "rank_zero_save", "ddp-short-timeout", tmp_path / "state.ckpt", timeout=150)
    assert "rank 1 is behind (not in a collective)" in proc.stderr, proc.stderr[-3000:]
    assert "in barrier 'Fabric.save'" in proc.stderr


@pytest.mark.parametrize("how", ["sigint_group", "sigint_first", "sigkill_first"])
def test_ctrl_c_or_a_killed_first_process_ends_every_process(prewarmed, tmp_path: Path, how: str) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C (SIGINT to the terminal's group), SIGINT to the first process alone (it ends the processes it
    started as it exits), and ``kill -9`` of the first process (the others see it gone and end)."""
    out = tmp_path / "pid"
    running = prewarmed.start([str(HELPER), "sleep", "ddp", "2", str(out)], cwd=tmp_path, env=child_env())
    deadline = time.monotonic() + 150
    files = [Path(f"{out}.0"), Path(f"{out}.1")]
    while not all(f.is_file() and f.read_text() for f in files) and time.monotonic() < deadline:
        assert running.poll() is None, "the launch ended before both ranks started"
        time.sleep(0.5)
    pids = [int(f.read_text()) for f in files]
    assert all(pid_alive(pid) for pid in pids) and pids[0] == running.pid
    if how == "sigint_group":
        os.killpg(running.pid, signal.SIGINT)
    else:
        os.kill(running.pid, signal.SIGINT if how == "sigint_first" else signal.SIGKILL)
    running.wait(60)
    assert wait_gone(pids, 30) == []
