"""accelkit.Fabric over several CPU processes: ``strategy="ddp"`` + ``launch()`` (the script run again with the
ranks), ``ddp_spawn`` + ``launch(function)``, and the guarantees of every accelkit launch (a dead rank named, a
collective only some ranks reach named, Ctrl-C ends every process). Programs: ``helpers/fabric_runs.py``."""

from __future__ import annotations

import importlib.util
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


@pytest.fixture(scope="module")
def ddp_run(prewarmed, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One ``ddp`` launch on 2 processes (the script run again as rank 1) running the ``train``, ``batch_sampler``
    and ``evaluate`` programs one after the other, read by the tests below: ``(finished process, OUT base)``."""
    folder = tmp_path_factory.mktemp("ddp")
    out = folder / "run"
    proc = _run(prewarmed, folder, "train,batch_sampler,evaluate", "ddp", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out


def test_ddp_launch_runs_the_script_again_as_the_other_rank(ddp_run) -> None:  # type: ignore[no-untyped-def]
    _, out = ddp_run
    result = json.loads(Path(f"{out}.train").read_text())
    _check_data_parallel(result)
    assert result["broadcast"] == result["pid"]  # rank 0 is the process the test started


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork"])
def test_ddp_spawn_launch_runs_the_function_and_returns_rank_zeros_result(prewarmed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                          strategy: str) -> None:
    """``launch(function)`` on each strategy that starts its processes from a function (spawned or forked;
    ``ddp_notebook`` is the ``ddp_fork`` strategy by another name, resolved as such in ``test_ddp.py``)."""
    out = tmp_path / "result.json"
    proc = _run(prewarmed, tmp_path, "spawn", strategy, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    _check_data_parallel(result)
    assert result["pid"] != result["caller_pid"]  # computed in a worker, returned to the caller


def test_ddp_shards_a_users_batch_sampler_keeping_its_batches(ddp_run) -> None:  # type: ignore[no-untyped-def]
    """``setup_dataloaders`` of a loader built with ``batch_sampler=BatchSampler(RandomSampler(data), 8, False)``
    (20 samples) on 2 ``ddp`` processes: each rank reads its 10 as batches of 8 and 2 (the batch sampler's size
    kept, not one sample a batch), every sample once per epoch, and nothing warns about the batch sampler."""
    proc, base = ddp_run
    out = f"{base}.batch_sampler"
    ranks = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    for epoch in range(2):
        assert [r["sizes"][epoch] for r in ranks] == [[8, 2], [8, 2]]
        assert sorted(ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch]) == list(range(20))
    assert "batch_sampler" not in proc.stderr, proc.stderr[-3000:]


def test_a_dead_rank_is_named_and_the_run_ends(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = _run(prewarmed, tmp_path, "dead_rank", "ddp", tmp_path / "unused", timeout=120)
    assert proc.returncode != 0
    assert "the process of rank 1 (local rank 1" in proc.stderr and "exited with code 3" in proc.stderr


def test_a_stopped_rank_is_named_and_every_process_ends(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "pid"
    proc = _run(prewarmed, tmp_path, "stopped_rank", "ddp-short-timeout", out, timeout=150)
    assert proc.returncode != 0
    assert "(its process" in proc.stderr and "is stopped: SIGSTOP or SIGTSTP)" in proc.stderr, proc.stderr[-3000:]
    assert wait_gone([int(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)], 30) == []


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
    running.wait(120)  # bounded: under a loaded machine the ranks take a while to unwind
    assert wait_gone(pids, 30) == []


@pytest.fixture(scope="module")
def fsdp_run(prewarmed, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One FSDP launch on 2 processes: two clipped steps, then a sharded save (``fsdp_checkpoint``), then a module
    made under ``init_module(empty_init=True)`` (``fsdp_empty_init``), read by the tests below:
    ``(folder, the checkpoint run's result, finished process)``."""
    folder = tmp_path_factory.mktemp("fsdp")
    proc = _run(prewarmed, folder, "fsdp_checkpoint,fsdp_empty_init", "fsdp", folder / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder, json.loads((folder / "run.fsdp_checkpoint").read_text()), proc


def test_clip_gradients_under_fsdp_returns_the_norm_of_the_full_gradients(fsdp_run) -> None:  # type: ignore[no-untyped-def]
    _, result, _ = fsdp_run
    for returned, expected in result["norms"]:
        assert returned == pytest.approx(expected, rel=1e-5)


def test_fsdp_save_is_sharded_and_loads_whole_in_one_plain_process(fsdp_run) -> None:  # type: ignore[no-untyped-def]
    import torch

    from accelkit import Fabric
    from accelkit.checkpoint.sharded import is_sharded_checkpoint

    folder, result, _ = fsdp_run
    path = folder / "run.fsdp_checkpoint.ckpt"
    assert is_sharded_checkpoint(path) and len(list(path.glob("*.distcp"))) == 2  # one shard file per process
    loaded = Fabric(accelerator="cpu", devices=1).load(path)
    assert loaded["step"] == 2 and set(loaded) == {"model", "optimizer", "step"}
    for key, value in result["weights"].items():
        torch.testing.assert_close(loaded["model"][key], torch.tensor(value))


def test_fsdp_checkpoint_loads_into_a_sharded_model_at_another_world_size(
        prewarmed, fsdp_run) -> None:  # type: ignore[no-untyped-def]
    folder, result, _ = fsdp_run
    out = folder / "run.fsdp_checkpoint.loaded"
    proc = prewarmed.run([str(HELPER), "fsdp_load", "fsdp", "1", str(out)], cwd=folder, env=child_env(), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(out.read_text())
    assert loaded["weights"] == result["weights"] and loaded["step"] == 2 and loaded["rest"] == []
    assert loaded["adam_steps"] == [2]  # the optimizer's state too


def test_fsdp_empty_init_materialises_after_sharding_with_a_normal_inits_weights(fsdp_run) -> None:  # type: ignore[no-untyped-def]
    """``init_module(empty_init=True)`` under FSDP on 2 CPU processes: the module is on the meta device until
    ``setup`` shards it, each process then holds half of the weights, which equal a normal init with the same
    seed, and the module trains."""
    folder, _, proc = fsdp_run
    out = folder / "run.fsdp_empty_init"
    assert "initialises the weights anyway" not in proc.stderr
    result = json.loads(out.read_text())
    assert result["on_meta"] is True
    assert result["weights"] == result["reference"]
    full_bytes = 4 * (6 * 16 + 16 + 16 + 16 + 16 * 3 + 3)
    assert result["local_bytes"] < full_bytes  # this process allocated its shards, not the whole module
    assert result["loss"] == result["loss"] and result["loss"] > 0  # finite: initialised memory, not garbage


def test_accelkit_run_starts_a_script_that_never_calls_launch(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "no_launch.py"
    script.write_text(
        "import sys, torch\n"
        "from accelkit import Fabric\n"
        "fabric = Fabric(accelerator='cpu')\n"
        "total = fabric.all_reduce(torch.tensor(float(fabric.global_rank)), reduce_op='sum').item()\n"
        "line = ' '.join(map(str, ['RESULT', fabric.global_rank, fabric.world_size, fabric.strategy.name,\n"
        "                         fabric.precision.name, total, sys.argv[1:]]))\n"
        "sys.stdout.write(line + '\\n')  # one write: the ranks share the output\n"
        "sys.stdout.flush()\n")
    proc = prewarmed.run(["-m", "accelkit.cli", "run", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp",
                          "--precision", "bf16-mixed", str(script), "--lr", "0.1"], cwd=tmp_path, env=child_env(),
                         timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("RESULT"))
    assert lines == [f"RESULT {rank} 2 ddp bf16-mixed 1.0 ['--lr', '0.1']" for rank in (0, 1)]


def test_accelkit_run_names_the_process_that_failed(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "fails.py"
    script.write_text("import os, sys\nif os.environ['RANK'] == '1':\n    sys.exit(5)\nimport time\ntime.sleep(60)\n")
    proc = prewarmed.run(["-m", "accelkit.cli", "run", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp",
                          str(script)], cwd=tmp_path, env=child_env(), timeout=120)
    assert proc.returncode == 5
    assert "the process of rank 1 (local rank 1" in proc.stderr and "exited with code 5" in proc.stderr


@pytest.mark.parametrize("strategy", ["auto", "ddp_fork"])
def test_launch_without_a_function_on_a_spawning_strategy_runs_the_script_again(prewarmed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                                 strategy: str) -> None:
    """``Fabric(devices=2)`` (whose default starts its processes from a function: the ``ddp_spawn`` strategy, so
    the default stands for an explicit ``ddp_spawn`` too, but for the notice) and ``ddp_fork`` (a subclass of it,
    named: the notice) with ``launch()``: the script runs in each process as with ``ddp`` (Lightning's default does
    the same), and ``rank_zero_first(local=True)`` lets the node's first process finish its block (it writes a
    file, late) before the other's block starts (it finds the file)."""
    script = tmp_path / "auto.py"
    script.write_text(
        "import os, sys, time, torch\n"
        "from accelkit import Fabric\n"
        "fabric = Fabric(accelerator='cpu', devices=2, strategy=sys.argv[1])\n"
        "fabric.launch()\n"
        "with fabric.rank_zero_first(local=True):\n"
        "    if fabric.local_rank == 0:\n"
        "        time.sleep(1.0)  # the other process, were it not waiting, would look before the file exists\n"
        "        open('downloaded', 'w').close()\n"
        "    found = os.path.exists('downloaded')\n"
        "total = fabric.all_reduce(torch.tensor(float(fabric.global_rank)), reduce_op='sum').item()\n"
        "sys.stdout.write(f'RESULT {fabric.global_rank} {fabric.world_size} {total} {found}\\n')  # one write\n"
        "sys.stdout.flush()\n")
    proc = prewarmed.run([str(script), strategy], cwd=tmp_path, env=child_env(), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(line for line in proc.stdout.splitlines() if line.startswith("RESULT")) == [
        "RESULT 0 2 1.0 True", "RESULT 1 2 1.0 True"]
    assert proc.stdout.count("launch() without a function") == (0 if strategy == "auto" else 1)


def test_gather_for_metrics_sees_each_sample_once_and_accumulate_keeps_ranks_in_step(ddp_run) -> None:  # type: ignore[no-untyped-def]
    _, out = ddp_run
    result = json.loads(Path(f"{out}.evaluate").read_text())
    assert len(result["plain"]) == 16  # all_gather: the sampler's repeated sample included
    assert sorted(result["seen"]) == [float(i) for i in range(15)]
    assert result["agree"]


@pytest.mark.xla
@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")
def test_a_fabric_loop_on_one_xla_device_trains_as_on_the_cpu(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The same seeded loop through Fabric on an XLA device (PJRT on the host CPU, in a process of its own) and on
    the CPU: the optimizer steps through the XLA strategy, the loader moves batches to the XLA device."""
    from helpers.xla import run_program, xla_env

    results = {}
    for accelerator in ("cpu", "xla"):
        out = tmp_path / f"{accelerator}.json"
        env = xla_env(1, FABRIC_RUNS_ACCELERATOR=accelerator, PYTHONPATH=child_env()["PYTHONPATH"])
        proc = run_program([str(HELPER), "one_device", "auto", "1", str(out)], env, 300, prewarmed)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[accelerator] = json.loads(out.read_text())
    assert results["xla"]["device"].startswith("xla") and results["cpu"]["device"] == "cpu"
    assert results["xla"]["weight"][0] == pytest.approx(results["cpu"]["weight"][0], abs=1e-5)


#: A Fabric script on one XLA device with ``plugins="tpu_spawn_debug"``: ``launch()`` without a function, so the
#: script is the run; 12 steps of one shape, then one step of another.
XLA_DEBUG_SCRIPT = """
import json, sys, torch
from accelkit import Fabric

fabric = Fabric(accelerator="xla", devices=1, plugins="tpu_spawn_debug")
fabric.launch()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = fabric.setup(model, optimizer)
data = torch.utils.data.TensorDataset(torch.randn(48, 4), torch.randn(48, 1))
loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(data, batch_size=4))
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    fabric.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
print(json.dumps({"strategy": type(fabric.strategy).__name__, "device": str(fabric.device)}), flush=True)
"""


@pytest.mark.xla
@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")
def test_tpu_spawn_debug_under_fabric_prints_its_report_when_the_script_ends(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``plugins="tpu_spawn_debug"`` on one XLA device (PJRT on the host CPU, a process of its own): the script that
    called ``launch()`` without a function is the run; when it ends, the report is written and its path printed,
    as after a Trainer's fit."""
    from helpers.xla import xla_env

    script = tmp_path / "debug_loop.py"
    script.write_text(XLA_DEBUG_SCRIPT)
    env = xla_env(None, unset=("PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE", "XLA_IR_DEBUG", "XLA_HLO_DEBUG"),
                  PYTHONPATH=child_env()["PYTHONPATH"])
    proc = prewarmed.run([str(script)], cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["strategy"] == "XLASingleDebugStrategy" and outcome["device"].startswith("xla")
    report = tmp_path / "xla_debug" / "run-rank0.txt"
    assert f"XLA debug report of replica 0: {report}" in proc.stderr, proc.stderr[-3000:]
    assert "no XLA debug report was written" not in proc.stderr
    data = json.loads(report.with_suffix(".json").read_text())
    assert data["summary"]["steps"] == 12
    assert "Metric: CompileTime" in report.read_text()
    log = tmp_path / "xla_debug" / "pt_xla_debug.log"  # the variables stayed set while the script's loop ran
    assert f"torch_xla debug log (PT_XLA_DEBUG_LEVEL=2): {log}" in proc.stderr, proc.stderr[-3000:]
    assert "Compilation Analysis" in log.read_text()


@pytest.mark.xla
@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")
def test_xla_spmd_under_fabric_shards_the_batch_and_matches_one_cpu_device(prewarmed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``strategy="xla_spmd"`` through Fabric on 4 PJRT CPU devices (SPMD: one process): the loader's batches reach
    the mesh split on the data axis, whole as the loop sees them, and three epochs end with the weights of plain
    torch on one CPU device with the whole batch; ``clip_gradients`` returns the whole gradient's norm and a checkpoint
round-trips. Program: ``helpers/fabric_xla_spmd.py``."""
    from helpers.xla import xla_env

    out = tmp_path / "spmd.json"
    env = xla_env(4, PYTHONPATH=child_env()["PYTHONPATH"])
    proc = prewarmed.run([str(HELPER.parent / "fabric_xla_spmd.py"), str(out)], cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["strategy"] == "XLASPMDStrategy" and result["world_size"] == 1 and result["mesh_shape"] == [4]
    assert result["device"].startswith("xla") and result["batches"] == 4
    assert result["shardings"] == ["{devices=[4,1]0,1,2,3}", "{devices=[4]0,1,2,3}"]  # split on the data axis
    assert result["shapes"] == [[16, 8], [16]]  # the global batch, whole in the loop
    assert result["trained"] > 0.1  # the weights moved
    assert result["max_diff"] <= 1e-5
    assert result["norms"] == pytest.approx(result["expected_norms"], rel=1e-4)  # clip_gradients over the mesh
    assert result["restored"] is True  # save, then load into a fresh set-up model and optimizer
