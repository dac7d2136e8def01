"""Elastic training under torchrun (issue 39): a job that loses a node keeps training on the survivors, and every
sample of every epoch is trained exactly once, with torchrun's default (shared) rendezvous store, neither
``num_nodes`` nor ``ckpt_path`` given, and no environment variable set by the user.

The slow tests run real launchers on this machine (``torchrun --nnodes=1:2 --rdzv-backend=c10d
--rdzv-endpoint=127.0.0.1:PORT``), each in a process group of its own that the test kills in the end; the fit is
tests/helpers/elastic_fit.py, which records the dataset indices of every batch each process trains."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from helpers.guards import PYTHON, TESTS, child_env  # noqa: E402

SCRIPT = TESTS / "helpers" / "elastic_fit.py"
SAMPLES, EPOCHS = 96, 2
BOUND_S = 420.0  # a generous bound on one whole job (a loaded machine of 2 cores): past it, the test fails


def free_port() -> int:
    from accelkit.strategies.ddp import find_free_port

    return find_free_port()


def launcher(root: Path, port: int, name: str, strategy: str = "ddp", step_sleep_s: float = 0.15,
             nnodes: str = "1:2", last_call_s: int = 5, max_restarts: int = 3,
             env_extra: dict[str, str] | None = None) -> subprocess.Popen:
    """One torchrun launcher (a "node") of an elastic job of ``nnodes`` nodes (1 to 2 unless told), one process
    each, in its own process group; its output goes to ``root/<name>.out``. ``env_extra``: the launcher's own
    variables (what a user would export before torchrun)."""
    env = child_env()
    env["ELASTIC_TEST_LAUNCHER"] = name  # names the records' files (the test's instrument, not accelkit's)
    env["STEP_SLEEP_S"] = str(step_sleep_s)
    env.update(env_extra or {})
    root.mkdir(parents=True, exist_ok=True)
    command = [PYTHON, "-m", "torch.distributed.run", f"--nnodes={nnodes}", "--nproc-per-node=1",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=elastic-test",
               f"--max-restarts={max_restarts}", f"--rdzv-conf=last_call_timeout={last_call_s}",
               "--monitor-interval=0.5", str(SCRIPT), str(root), strategy]
    out = open(root / f"{name}.out", "w")  # noqa: SIM115 - closed when the process ends (the child holds it)
    try:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        out.close()


def listening(port: int) -> bool:
    """Whether a socket of this machine listens on TCP ``port`` (read from /proc/net: nothing connects to it)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    return True
    return False


def bind_endpoint_first(proc: subprocess.Popen, root: Path, port: int) -> None:
    """Wait until launcher ``proc``, started first, listens on the rendezvous endpoint: its agent then hosts torch's
    rendezvous store (a launcher started later only connects), so losing another launcher never takes the store.
    (A fixed pause is not enough on a loaded machine: a launcher started a second later can bind first.)"""
    deadline = time.monotonic() + 120
    while not listening(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the first launcher did not bind 127.0.0.1:{port}: " + output(root))
        time.sleep(0.2)


def workers_of(root: Path, name: str) -> list[int]:
    """The process ids of the workers launcher ``name`` started (read from their records' file names)."""
    return [int(p.stem.rsplit("pid", 1)[1]) for p in (root / "records").glob(f"{name}-*.jsonl")]


def kill_all(root: Path, launchers: list[subprocess.Popen]) -> None:
    """Kill every launcher's process group and every worker that recorded (torchrun puts each worker in a session
    of its own)."""
    for proc in launchers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for path in (root / "records").glob("*.jsonl") if (root / "records").is_dir() else []:
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            os.kill(int(path.stem.rsplit("pid", 1)[1]), signal.SIGKILL)
    for proc in launchers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


def records(root: Path) -> list[dict]:
    rows = []
    for path in sorted((root / "records").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by SIGKILL
                rows.append(json.loads(line))
    return rows


def kept(rows: list[dict]) -> list[dict]:
    """The batches whose training the run kept: an attempt that resumed at step S (its first batch's global step)
    drops what the attempts before it trained from step S on (work lost with the failure)."""
    starts = {}
    for row in rows:
        starts[row["round"]] = min(starts.get(row["round"], row["step"]), row["step"])
    return [row for row in rows if all(not (later > row["round"] and row["step"] >= start)
                                       for later, start in starts.items())]


def trained_once(rows: list[dict]) -> dict[int, str]:
    """Per epoch, what is wrong with the samples the run kept ("" when each of them is trained exactly once)."""
    wrong = {}
    for epoch in range(EPOCHS):
        counts = Counter(i for row in rows if row["epoch"] == epoch for i in row["idx"])
        twice = sorted(i for i, n in counts.items() if n > 1)
        missing = sorted(set(range(SAMPLES)) - set(counts))
        if twice or missing:
            wrong[epoch] = f"twice {twice}, missing {missing}"
    return wrong


def wait_for(condition, root: Path, launchers: list[subprocess.Popen], what: str, deadline: float) -> None:
    while not condition():
        if time.monotonic() > deadline or all(p.poll() is not None for p in launchers):
            raise AssertionError(f"{what} did not happen: " + output(root))
        time.sleep(0.2)


def output(root: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(root.glob("*.out")))


def records_of_a_clean_run(root: Path) -> list[dict]:
    """The run's records, after checking that no process of it aborted (a worker that aborts at its exit, "terminate
    called without an active exception", has its job restarted: a round more than the test planned)."""
    aborted = [p.name for p in sorted(root.glob("*.out")) if "terminate called" in p.read_text()]
    assert not aborted, (aborted, output(root))
    return records(root)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_lose_a_worker_then_a_whole_launcher_every_sample_once_with_the_shared_store(tmp_path, strategy):
    """Two launchers (a shared store, the default); a worker of launcher B is killed mid-epoch: both restart
    (round 1) and resume from the newest checkpoint by themselves; then launcher B is killed whole: A restarts
    alone on a world of 1 (round 2), resumes mid-epoch and finishes. Every sample of both epochs is trained exactly
    once (the work lost with each failure dropped), in one version folder, without num_nodes or ckpt_path."""
    root, port = tmp_path / "run", free_port()
    # last_call_timeout 15 s: B, slow to start on a loaded machine, came more than 5 s after A in 3 of 7 runs, and
    # A had begun alone (B's arrival a grow: torch's deadlock under the shared store); the shrink's restart waits it
    first = launcher(root, port, "A", strategy, last_call_s=15)
    bind_endpoint_first(first, root, port)  # A hosts the rendezvous store (B's loss must not take the store)
    second = launcher(root, port, "B", strategy, last_call_s=15)
    launchers = [first, second]
    deadline = time.monotonic() + BOUND_S
    try:
        def max_step(round_: int) -> int:
            return max((r["step"] for r in records(root) if r["round"] == round_), default=-1)

        wait_for(lambda: max_step(0) >= 4, root, launchers, "round 0 reaching step 4", deadline)
        os.kill(workers_of(root, "B")[0], signal.SIGKILL)  # inside epoch 0, past the checkpoint of step 3
        wait_for(lambda: max_step(1) >= max(max_step(0), 7) + 2, root, launchers, "round 1 training on", deadline)
        os.killpg(second.pid, signal.SIGKILL)  # the whole launcher B: its agent and its worker
        for pid in workers_of(root, "B"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        first.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        kill_all(root, launchers)
    said = (root / "A.out").read_text()
    assert first.returncode == 0 and "done" in said, output(root)
    rows = records_of_a_clean_run(root)
    worlds = {row["round"]: row["world"] for row in rows}
    assert worlds == {0: 2, 1: 2, 2: 1}, (worlds, output(root))
    assert trained_once(kept(rows)) == {}, output(root)
    # the restarted attempts resumed by themselves from a checkpoint of this run, and said so
    assert min(r["step"] for r in rows if r["round"] == 1) > 0 and min(r["step"] for r in rows if r["round"] == 2) > 0
    assert "attempt 2 of this run (restarted by its launcher): loaded checkpoint" in said, said[-3000:]
    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]  # one run folder
    # what each failure cost: DDP's survivor kept the last completed step (the step running is trained again, once);
    # FSDP's state is sharded: nothing is written, and the run goes on from its last periodic checkpoint
    for after in (1, 2):
        lost = max(r["step"] for r in rows if r["round"] == after - 1) + 1 - \
            min(r["step"] for r in rows if r["round"] == after)
        assert lost <= (1 if strategy == "ddp" else 3), (after, lost)
    assert ("wrote the last completed step" in said) == (strategy == "ddp"), said[-3000:]
    assert ("no process can write it alone" in said) == (strategy == "fsdp"), said[-3000:]


def run_job(root: Path, kill_worker_at: int | None, strategy: str = "ddp") -> tuple[subprocess.Popen, list[dict]]:
    """Two launchers of one job (DDP unless told) to its end; with ``kill_worker_at``, launcher B's worker is
    killed once round 0 reached that step. The world never changes here, so each launcher asks for 2 nodes
    (``--nnodes=2:2``): launcher A never starts alone when B is slow to start on a loaded machine (with ``1:2`` it
    did after ``last_call_timeout``, and B's arrival was then torch's growing deadlock under the shared store)."""
    port = free_port()
    pace = 0.15 if kill_worker_at is not None else 0.0
    first = launcher(root, port, "A", strategy, step_sleep_s=pace, nnodes="2:2")
    bind_endpoint_first(first, root, port)
    second = launcher(root, port, "B", strategy, step_sleep_s=pace, nnodes="2:2")
    launchers, deadline = [first, second], time.monotonic() + BOUND_S
    try:
        if kill_worker_at is not None:
            wait_for(lambda: max((r["step"] for r in records(root) if r["round"] == 0), default=-1) >= kill_worker_at,
                     root, launchers, f"round 0 reaching step {kill_worker_at}", deadline)
            os.kill(workers_of(root, "B")[0], signal.SIGKILL)
        for proc in launchers:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        kill_all(root, launchers)
    return first, records(root)


def never_stopped_ddp(prewarmed, root: Path) -> None:
    """The DDP job never stopped, to ``root/final.pt``: the same fit (elastic_fit.py) on 2 processes launched by
    accelkit (``ddp_fork``, a program forked from the prewarmed interpreter) instead of two torchrun launchers: the
    same strategy, sampler and collectives, bit for bit the same weights, without 2 launchers and 2 fresh worker
    interpreters (what is compared with it, the restarted job, runs under torchrun)."""
    root.mkdir(parents=True)
    done = prewarmed.run([str(SCRIPT), str(root), "ddp_fork"], cwd=root, timeout=BOUND_S,
                         env={**child_env(), "ELASTIC_TEST_DEVICES": "2", "STEP_SLEEP_S": "0"})
    assert done.returncode == 0 and "done" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_a_killed_worker_restarts_both_launchers_and_ends_with_the_weights_of_a_run_never_stopped(tmp_path,
                                                                                                  prewarmed):
    """The world does not change (both launchers restart their workers): the restarted attempt resumes by itself
    from the newest checkpoint, the one the survivor wrote at the last completed step (it trains again only the step
    that was running), and the final weights equal those of the same job never stopped, bit for bit."""
    never_stopped_ddp(prewarmed, tmp_path / "reference")
    job, rows = run_job(tmp_path / "run", 4)
    assert job.returncode == 0, output(tmp_path / "run")
    resumed = min(r["step"] for r in rows if r["round"] == 1)  # the survivor's step, not a periodic checkpoint's
    running = max(r["step"] for r in rows if r["round"] == 0)  # the step the failure cut short
    assert sorted({row["round"] for row in rows}) == [0, 1] and resumed == running >= 4, (resumed, running)
    assert trained_once(kept(rows)) == {}
    final, expected = (torch.load(tmp_path / name / "final.pt", weights_only=True) for name in ("run", "reference"))
    assert final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)


@pytest.mark.slow
def test_under_fsdp_a_killed_worker_resumes_from_the_periodic_checkpoint_and_ends_with_the_weights_never_stopped(
        tmp_path):
    """FSDP where the world does not change (a worker killed in step 4, both launchers restart on a world of 2):
    no process can write the sharded state alone, so the restarted attempt resumes from the newest periodic
    checkpoint (step 3, a sharded directory, read back into the same 2 shards) and trains the steps since again;
    every sample of both epochs is kept once and the final weights, gathered from both processes, equal those of
    the same FSDP job never stopped, bit for bit."""
    reference, _ = run_job(tmp_path / "reference", None, "fsdp")
    assert reference.returncode == 0, output(tmp_path / "reference")
    job, rows = run_job(tmp_path / "run", 4, "fsdp")
    assert job.returncode == 0, output(tmp_path / "run")
    assert {row["round"]: row["world"] for row in rows} == {0: 2, 1: 2}, output(tmp_path / "run")
    resumed = min(r["step"] for r in rows if r["round"] == 1)
    assert resumed == 3, resumed  # every_n_train_steps=3: the newest periodic checkpoint before step 4
    assert "no process can write it alone" in (tmp_path / "run" / "A.out").read_text()  # (A survived)
    assert trained_once(kept(rows)) == {}
    final, expected = (torch.load(tmp_path / name / "final.pt", weights_only=True) for name in ("run", "reference"))
    assert final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)


def test_a_given_num_nodes_that_an_elastic_torchrun_contradicts_says_what_to_write(monkeypatch):
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                        "GROUP_WORLD_SIZE": "1", "GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "job",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(accelkit.ConfigurationError, match=r"num_nodes=2 was given, but torchrun started this "
                       r"attempt on 1 node.*elastic launcher.*Leave num_nodes out of the Trainer"):
        accelkit.Trainer(accelerator="cpu", strategy="ddp", devices=1, num_nodes=2)
    # not given: the launcher's
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    trainer = accelkit.Trainer(accelerator="cpu", strategy="ddp", devices=1, logger=False)
    assert trainer.num_nodes == 2 and trainer.world_size == 2


# ------------------------------------------------------------------ a restarted attempt resumes by itself (in-process)
def torchrun_attempt(monkeypatch, restarts: int) -> None:
    """The variables torchrun sets in the single process of a one-node run at its ``restarts``-th restart (its own
    store, as with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: the attempt is torchrun's restart count)."""
    for key in list(os.environ):
        if key.startswith(("TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_", "GROUP_")):
            monkeypatch.delenv(key)
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                        "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "job",
                        "TORCHELASTIC_RESTART_COUNT": str(restarts), "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(name, value)


def small_trainer(root: Path, epochs: int, **options) -> accelkit.Trainer:
    from accelkit.callbacks import ModelCheckpoint

    return accelkit.Trainer(accelerator="cpu", strategy="ddp", devices=1, max_epochs=epochs, default_root_dir=root,
                            enable_progress_bar=False, enable_model_summary=False, logger="csv",
                            callbacks=[ModelCheckpoint(every_n_train_steps=2, **options)])


def test_a_restarted_attempt_resumes_from_the_runs_newest_checkpoint_in_the_runs_folder(monkeypatch, tmp_path, capsys):
    from accelkit.trainer.summary import fit_summary
    from helpers.models import RegressionModule

    torchrun_attempt(monkeypatch, 0)
    first = small_trainer(tmp_path, 1)
    first.fit(RegressionModule())
    assert "first attempt of this run: starts from the beginning" in capsys.readouterr().out
    assert "first attempt of this run, from the beginning" in fit_summary(first)[0]
    newest = max((tmp_path / "lightning_logs" / "version_0" / "checkpoints").iterdir(), key=lambda p: p.stat().st_mtime)
    torchrun_attempt(monkeypatch, 1)  # torchrun restarted the run: nothing else changes, no ckpt_path
    second = small_trainer(tmp_path, 2)
    second.fit(RegressionModule())
    said = capsys.readouterr().out
    assert f"attempt 1 of this run (restarted by its launcher): loaded checkpoint {newest}" in said, said
    assert f"attempt 1 of this run, resumed from {newest}" in fit_summary(second)[0]
    assert second.global_step == 2 * first.global_step  # went on from the first attempt's last step
    assert [p.name for p in (tmp_path / "lightning_logs").iterdir()] == ["version_0"]  # the run's one folder
    # an explicit ckpt_path wins over the newest checkpoint
    oldest = min((tmp_path / "lightning_logs" / "version_0" / "checkpoints").iterdir(), key=lambda p: p.stat().st_mtime)
    torchrun_attempt(monkeypatch, 2)
    third = small_trainer(tmp_path, 1, save_top_k=0)
    third.fit(RegressionModule(), ckpt_path=str(oldest))
    assert f"loaded checkpoint {oldest}" in capsys.readouterr().out


def test_the_first_attempt_starts_fresh_even_where_the_folder_holds_a_checkpoint(monkeypatch, tmp_path, capsys):
    from helpers.models import RegressionModule

    torchrun_attempt(monkeypatch, 0)
    before = small_trainer(tmp_path, 1, dirpath=tmp_path / "fixed")
    before.fit(RegressionModule())
    assert list((tmp_path / "fixed").iterdir())
    again = small_trainer(tmp_path, 1, dirpath=tmp_path / "fixed")  # a new run (attempt 0) in the same folder
    again.fit(RegressionModule())
    assert "first attempt of this run: starts from the beginning" in capsys.readouterr().out
    assert again.global_step == before.global_step > 0 and again.current_epoch == 1  # trained one whole epoch


def test_a_restarted_attempt_resumes_from_the_default_callbacks_one_file(monkeypatch, tmp_path, capsys):
    """No checkpoint callback of the user's: the default one writes Lightning's one ``epoch=E-step=S.ckpt`` and no
    ``last.ckpt`` (issue 38.1); a torchrun restart and a SLURM requeue still resume from it by themselves."""
    from helpers.models import RegressionModule

    def trainer(epochs: int) -> accelkit.Trainer:
        return accelkit.Trainer(accelerator="cpu", strategy="ddp", devices=1, max_epochs=epochs,
                                default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False,
                                logger="csv")

    torchrun_attempt(monkeypatch, 0)
    first = trainer(1)
    first.fit(RegressionModule())
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    only = [p.name for p in folder.iterdir()]
    assert only == [f"epoch=0-step={first.global_step}.ckpt"], only  # Lightning's default: one file, no last.ckpt
    torchrun_attempt(monkeypatch, 1)
    second = trainer(2)
    second.fit(RegressionModule())
    assert f"attempt 1 of this run (restarted by its launcher): loaded checkpoint {folder / only[0]}" in \
        capsys.readouterr().out
    assert second.global_step == 2 * first.global_step > 0


def test_a_requeued_slurm_job_resumes_by_itself(monkeypatch, tmp_path, capsys):
    from helpers.models import RegressionModule

    torchrun_attempt(monkeypatch, 0)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
        monkeypatch.delenv(name)
    for name, value in {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
                        "SLURM_NNODES": "1", "SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "train",
                        "SLURM_STEP_NODELIST": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    first = small_trainer(tmp_path, 1)
    first.fit(RegressionModule())
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # SLURM requeued the job
    resumed = small_trainer(tmp_path, 2)
    resumed.fit(RegressionModule())
    assert "attempt 1 of this run (restarted by its launcher): loaded checkpoint" in capsys.readouterr().out
    assert resumed.global_step == 2 * first.global_step > 0


def test_the_join_wait_of_a_restarted_attempt_says_so_and_not_stale_variables(monkeypatch, capfd):
    from accelkit.strategies.ddp import JOIN_WAIT_ENV

    torchrun_attempt(monkeypatch, 2)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv(JOIN_WAIT_ENV, "1")
    from helpers.models import RegressionModule

    trainer = accelkit.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1, logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, collective_timeout=4)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the store's timeout (rank 1 never comes): torch's error
        trainer.fit(RegressionModule())
    err = capfd.readouterr().err
    assert "has waited 1 s for all 2 processes" in err and "This is attempt 2 of a run its launcher restarts" in err
    assert "the variables are not stale" in err and "the variables are stale" not in err


def test_with_a_store_of_each_attempts_own_only_one_node_tells_its_attempt():
    """``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: no shared store to agree through, and each agent counts its own
    restarts, so over several nodes an environment that no strategy gave the attempt's own store to agree through
    (``store_opener``) claims no attempt (no process resumes where another would start fresh); a strategy does
    (the grow test below)."""
    from accelkit.environments.torchrun import TorchrunEnvironment

    env = {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "job",
           "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_USE_AGENT_STORE": "False"}
    assert TorchrunEnvironment(env).restart_attempt is None
    assert TorchrunEnvironment({**env, "LOCAL_WORLD_SIZE": "4"}).restart_attempt == 1
    assert TorchrunEnvironment({k: v for k, v in env.items() if k != "TORCHELASTIC_RUN_ID"}).restart_attempt is None


# ------------------------------------------------------------------ a lost peer: the survivor keeps the last step
def slurm_task(root: Path, rank: int, world: int, port: int, requeued: int, stop: str = "",
               timeout_s: float | None = None) -> subprocess.Popen:
    """One task of a requeued-SLURM-like job (the variables ``srun`` sets, one task per node, no ``srun``): a
    launcher that restarts the run (``SLURM_RESTART_COUNT``), so a lost peer makes the survivor keep its last
    completed step. Its output goes to ``root/<launcher>-<requeued>.out``; the fit is elastic_fit.py."""
    env = {k: v for k, v in child_env().items() if not k.startswith(("SLURM_", "TORCHELASTIC_", "GROUP_"))}
    name = "AB"[rank]
    env.update({"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_LOCALID": "0",
                "SLURM_NODEID": str(rank), "SLURM_NNODES": str(world), "SLURM_JOB_ID": "77",
                "SLURM_JOB_NAME": "train", "SLURM_STEP_NODELIST": "127.0.0.1", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "ELASTIC_TEST_LAUNCHER": name, "ELASTIC_TEST_STOP": stop,
                "STEP_SLEEP_S": "0"})
    if requeued:
        env["SLURM_RESTART_COUNT"] = str(requeued)
    if timeout_s is not None:
        env["ELASTIC_TEST_COLLECTIVE_TIMEOUT_S"] = str(timeout_s)
    root.mkdir(parents=True, exist_ok=True)
    out = open(root / f"{name}-{requeued}.out", "w")  # noqa: SIM115 - closed when the process ends (the child holds it)
    try:
        return subprocess.Popen([PYTHON, str(SCRIPT), str(root), "ddp"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        out.close()


def lose_a_peer(root: Path, stop: str) -> tuple[list[int], dict, str]:
    """A DDP job of two tasks where ``stop`` (``<launcher>:<step>:<KILL|TERM>``) happens, then its requeued attempt
    on one task to the end; returns the exit statuses, the survivor's checkpoint and what the tasks printed."""
    from accelkit.loops.survivor import SURVIVOR_FILE

    port = free_port()
    hung = stop.endswith(":STOP")  # task B stops itself: A fails at the collective timeout
    tasks = [slurm_task(root, rank, 2, port, 0, stop, timeout_s=15 if hung else None) for rank in (0, 1)]
    try:
        tasks[0].wait(timeout=BOUND_S / 2)
        if hung:
            tasks[1].kill()  # (stopped: SIGKILL ends it all the same)
        tasks[1].wait(timeout=BOUND_S / 2)
        path = root / "lightning_logs" / "version_0" / "checkpoints" / SURVIVOR_FILE
        assert path.is_file(), output(root)
        survivor = torch.load(path, weights_only=False)
        again = slurm_task(root, 0, 1, free_port(), 1)
        tasks.append(again)
        again.wait(timeout=BOUND_S / 2)
    finally:
        kill_all(root, tasks)
    return [task.returncode for task in tasks], survivor, "\n".join(p.read_text() for p in sorted(root.glob("*.out")))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["KILL", "TERM", "STOP"])
def test_a_lost_peer_leaves_the_last_completed_step_and_the_next_attempt_trains_at_most_one_step_again(tmp_path,
                                                                                                      how):
    """KILL: task B dies in step 5 (before its backward), and task A fails in that step's gradient all-reduce;
    TERM: task A is told to stop (its launcher's SIGTERM) in step 5, ends that step and stops, and B fails in the
    next one; STOP: task B hangs (SIGSTOP) in step 5, and A fails in that step's all-reduce at the collective
    timeout (15 s). The survivor A writes the last completed step alone (no collective) as survivor.ckpt, the newest
    checkpoint of the run's folder; the requeued attempt, on one task, resumes from it: it trains again at most the
    one step that was running, and every sample of both epochs once."""
    root = tmp_path / "run"
    statuses, survivor, said = lose_a_peer(root, ("A" if how == "TERM" else "B") + f":5:{how}")
    completed = 6 if how == "TERM" else 5  # steps whose optimizer step ended before the stop
    assert statuses[:2] != [0, 0] and statuses[2] == 0, said[-6000:]
    assert "wrote the last completed step (epoch 0, step " + f"{completed}," in said, said[-6000:]
    position = survivor["loops"]["position"]
    assert (survivor["global_step"], survivor["epoch"], position["batches"]) == (completed, 0, completed)
    assert survivor["loops"]["batches_that_stepped"] == completed
    rows = records_of_a_clean_run(root)
    assert min(r["step"] for r in rows if r["round"] == 1) == completed  # resumed there: the running step again
    lost = max(r["step"] for r in rows if r["round"] == 0) + 1 - completed
    assert lost <= 1 and (lost == 1 or how == "TERM"), lost  # at most the step running (B's, after A stopped)
    assert trained_once(kept(rows)) == {}, said[-6000:]
    assert "attempt 1 of this run (restarted by its launcher): loaded checkpoint" in said and "survivor.ckpt" in said


def test_the_survivor_never_replaces_a_checkpoint_a_callback_keeps(tmp_path, capsys):
    """A ModelCheckpoint whose own file is named survivor.ckpt keeps it: the survivor writes nothing and says why;
    next to another callback's files, it writes its own file and leaves theirs as they were."""
    from accelkit.callbacks import ModelCheckpoint
    from accelkit.loops import survivor
    from helpers.models import RegressionModule

    def fitted(callback: ModelCheckpoint) -> tuple[accelkit.Trainer, RegressionModule]:
        trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, callbacks=[callback], logger=False,
                                   enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
        module = RegressionModule()
        trainer.fit(module)
        return trainer, module

    trainer, module = fitted(ModelCheckpoint(dirpath=tmp_path / "a", filename="survivor", every_n_train_steps=1))
    theirs = tmp_path / "a" / survivor.SURVIVOR_FILE
    before = theirs.read_bytes()
    assert survivor.save_alone(trainer, module, "a test") is None
    assert theirs.read_bytes() == before
    assert f"{theirs} is a checkpoint ModelCheckpoint keeps" in capsys.readouterr().out
    trainer, module = fitted(ModelCheckpoint(dirpath=tmp_path / "b", every_n_train_steps=2, save_top_k=-1))
    files = {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    written = survivor.save_alone(trainer, module, "a test")
    assert written == tmp_path / "b" / survivor.SURVIVOR_FILE
    assert {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir() if p != written} == files
    assert torch.load(written, weights_only=False)["global_step"] == trainer.global_step > 0


def test_a_checkpoint_cadence_by_time_resumes_a_restarted_attempt(monkeypatch, tmp_path, capsys):
    """``ModelCheckpoint(train_time_interval=...)``, the cadence docs/elastic.rst recommends (Lightning has no
    ``every_n_seconds``), writes into the run's folder, where a restarted attempt finds its newest checkpoint."""
    from datetime import timedelta

    from accelkit.callbacks import ModelCheckpoint
    from helpers.models import RegressionModule

    def trainer(epochs: int) -> accelkit.Trainer:
        checkpoint = ModelCheckpoint(train_time_interval=timedelta(microseconds=1), save_top_k=-1)
        return accelkit.Trainer(accelerator="cpu", strategy="ddp", devices=1, max_epochs=epochs,
                                default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False,
                                logger="csv", callbacks=[checkpoint])

    torchrun_attempt(monkeypatch, 0)
    first = trainer(1)
    first.fit(RegressionModule())
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    assert len(list(folder.iterdir())) >= first.global_step > 1  # one per step (the interval is 1 microsecond)
    newest = max(folder.iterdir(), key=lambda p: p.stat().st_mtime)
    torchrun_attempt(monkeypatch, 1)
    second = trainer(2)
    second.fit(RegressionModule())
    assert f"attempt 1 of this run (restarted by its launcher): loaded checkpoint {newest}" in capsys.readouterr().out
    assert second.global_step == 2 * first.global_step


@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_last_completed_step_leaves_out_the_batch_running_and_resumes_as_never_stopped(tmp_path, accumulate):
    """What a survivor writes from inside a training step (where a collective fails: the gradient exchange of its
    backward) is the state after the last optimizer step that completed: the running batch, and with gradient
    accumulation the batches of its window that had not stepped, are not in the step counters nor in the samples
    trained. Resumed from it, the fit ends with the weights of a fit never stopped."""
    from accelkit.callbacks import ModelCheckpoint
    from accelkit.loops import survivor
    from helpers.models import RegressionModule

    failing_at = 5  # the batch running when the survivor writes (0-based, inside the first of 2 epochs of 8)

    class Failing(RegressionModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.current_epoch == 0 and batch_idx == failing_at:
                survivor.save_alone(self.trainer, self, "a test")
            return super().training_step(batch, batch_idx)

    def trainer(root: Path) -> accelkit.Trainer:
        return accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False, default_root_dir=root,
                                enable_progress_bar=False, enable_model_summary=False,
                                accumulate_grad_batches=accumulate,
                                callbacks=[ModelCheckpoint(dirpath=root / "checkpoints", every_n_epochs=5)])

    never_stopped = RegressionModule(batch_size=4)
    trainer(tmp_path / "reference").fit(never_stopped)
    trainer(tmp_path / "run").fit(Failing(batch_size=4))
    written = torch.load(tmp_path / "run" / "checkpoints" / survivor.SURVIVOR_FILE, weights_only=False)
    stepped = failing_at // accumulate  # the optimizer steps before the running batch (window) began
    position = written["loops"]["position"]
    assert (written["global_step"], position["epoch"], position["batches"]) == \
        (stepped, 0, stepped * accumulate), (written["global_step"], position)
    assert written["loops"]["batches_that_stepped"] == stepped
    assert position["ranks"][0]["samples"] == stepped * accumulate * 4  # the samples of the completed batches
    resumed = RegressionModule(batch_size=4)
    finish = trainer(tmp_path / "resumed")
    finish.fit(resumed, ckpt_path=tmp_path / "run" / "checkpoints" / survivor.SURVIVOR_FILE)
    assert finish.global_step == 16 // accumulate
    assert all(torch.equal(a, b) for a, b in zip(resumed.state_dict().values(), never_stopped.state_dict().values(),
                                                 strict=True))


def test_a_sigterm_to_a_one_process_attempt_saves_its_step_and_the_next_attempt_resumes_there(monkeypatch, tmp_path,
                                                                                              capsys):
    """Under a launcher that restarts the run (torchrun's agent stops its processes with SIGTERM before it restarts
    them), a DDP process ends the batch it is in and saves it (before: SIGTERM ended it at once, keeping only the
    last periodic checkpoint); the next attempt resumes from that step by itself."""
    from helpers.models import RegressionModule

    class Stopped(RegressionModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.global_step == 2:
                os.kill(os.getpid(), signal.SIGTERM)  # what torchrun's agent sends (past the checkpoint of step 2)
            return super().training_step(batch, batch_idx)

    torchrun_attempt(monkeypatch, 0)
    with pytest.raises(accelkit.errors.TrainingInterrupted, match="SIGTERM stopped training at epoch 0, step 3"):
        small_trainer(tmp_path, 2).fit(Stopped(n=64))
    saved = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "interrupted.ckpt"
    assert torch.load(saved, weights_only=False)["global_step"] == 3
    torchrun_attempt(monkeypatch, 1)
    resumed = small_trainer(tmp_path, 2)
    resumed.fit(RegressionModule(n=64))
    said = capsys.readouterr().out
    assert f"attempt 1 of this run (restarted by its launcher): loaded checkpoint {saved}" in said, said
    assert resumed.global_step == 16  # 2 epochs of 8 batches: none trained twice, none left out

def test_each_group_of_workers_an_agent_starts_tells_how_many_it_started_before(monkeypatch, tmp_path):
    """With a store of each attempt's own, a process tells a restarted attempt from the first by its agent's log
    folder (torch's own log specification, as torchrun's agent uses it): a restart on a node joining, which torch
    does not count in TORCHELASTIC_RESTART_COUNT, is told too; another agent (a node that just joined) starts at 0."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs

    from accelkit.environments import torchrun
    from accelkit.environments.torchrun import TorchrunEnvironment, earlier_worker_groups

    monkeypatch.setattr(torchrun, "MAX_ATTEMPTS", {})  # new worker processes: nothing agreed yet

    def start(specs: DefaultLogsSpecs, restarts: int) -> dict[int, dict[str, str]]:
        """What an agent does each time it starts its workers (two on its node): their variables."""
        time.sleep(0.05)  # (groups start seconds apart; a folder made again at once could share its time stamp)
        envs = {rank: {"TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_RESTART_COUNT": str(restarts)} for rank in (0, 1)}
        specs.reify(envs)
        return envs

    agent = DefaultLogsSpecs(log_dir=str(tmp_path))
    first = start(agent, 0)
    assert [earlier_worker_groups(env) for env in first.values()] == [0, 0]
    assert earlier_worker_groups(first[0]) == 0  # asked again in the same group
    grown = start(agent, 0)  # a node joined: the agent restarts its workers without counting a restart
    assert [earlier_worker_groups(env) for env in grown.values()] == [1, 1]
    # on one node that is the attempt; over several, the processes agree on the largest (the torchrun runs below)
    one_node = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", **grown[0]}
    assert TorchrunEnvironment(one_node).restart_attempt == 1
    assert TorchrunEnvironment({**one_node, "WORLD_SIZE": "4", "RANK": "2"}).restart_attempt is None  # no store
    assert [earlier_worker_groups(env) for env in start(agent, 1).values()] == [2, 2]  # a failure
    assert earlier_worker_groups(start(DefaultLogsSpecs(log_dir=str(tmp_path)), 0)[0]) == 0  # a new agent


def test_the_processes_of_a_grown_attempt_agree_it_is_a_restart_and_rank_zero_keeps_the_store(monkeypatch, tmp_path):
    """A grown job with a store of each attempt's own: rank 0's agent started a group before (it ran alone), rank
    1's agent is new, and neither counted a restart. Both processes (threads here) answer attempt 1, through the
    store rank 0 hosts at MASTER_ADDR:MASTER_PORT, which the process group then takes over."""
    import threading

    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs

    from accelkit.environments import torchrun
    from accelkit.environments.torchrun import TorchrunEnvironment
    from accelkit.strategies import rendezvous

    monkeypatch.setattr(torchrun, "MAX_ATTEMPTS", {})  # new worker processes: nothing agreed yet

    def group(specs: DefaultLogsSpecs) -> dict[str, str]:
        envs = {0: {"TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_RESTART_COUNT": "0"}}
        specs.reify(envs)
        return envs[0]

    alone = DefaultLogsSpecs(log_dir=str(tmp_path / "a"))
    first = TorchrunEnvironment({**group(alone), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
    assert first.restart_attempt == 0
    time.sleep(0.05)
    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    common = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    grown = [TorchrunEnvironment({**group(alone), **common, "RANK": "0"}),
             TorchrunEnvironment({**group(DefaultLogsSpecs(log_dir=str(tmp_path / "b"))), **common, "RANK": "1"})]
    for rank, env in enumerate(grown):
        env.store_opener = lambda rank=rank: rendezvous.agreement_store(rank, 2, 30.0, spans_machines=False)
    answers: list = [None, None]

    def ask(rank: int) -> None:
        answers[rank] = grown[rank].restart_attempt

    threads = [threading.Thread(target=ask, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert answers == [1, 1]
    hosted = rendezvous.HOSTED_EARLY[("127.0.0.1", port)]
    assert rendezvous.rendezvous_store(0, 2, 30.0, spans_machines=False) is hosted  # the process group's store
    assert ("127.0.0.1", port) not in rendezvous.HOSTED_EARLY


def test_the_agreement_on_the_attempt_waits_at_most_the_collective_timeout_and_says_why(monkeypatch):
    """Rank 1 of a restarted attempt whose rank 0 never comes (it died, or its node did): the wait for the
    attempt's agreement ends after the Trainer's collective timeout, not a fixed ten minutes, with what happened."""
    import torch.distributed as dist

    from accelkit.environments import torchrun
    from accelkit.environments.base import restart_attempt_of
    from accelkit.errors import WorkerError

    port = free_port()
    _agent = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # as torchrun's agent hosts it
    monkeypatch.setattr(torchrun, "AGREED_ATTEMPTS", {})
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                        "GROUP_WORLD_SIZE": "2", "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "job",
                        "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_USE_AGENT_STORE": "True",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    trainer = accelkit.Trainer(accelerator="cpu", strategy="ddp", devices=1, logger=False, collective_timeout=3)
    with pytest.raises(WorkerError, match=r"rank 1 waited 3 s \(the collective timeout.*global rank 0 never "
                       r"announced it.*did not start or died"):
        restart_attempt_of(trainer.strategy.cluster_environment)


# ---------------------------------------------------------------- shrink 3 -> 2, grow 1 -> 2, a restart loop that ends
def round_rows(root: Path, round_: int) -> list[dict]:
    return [r for r in records(root) if r["round"] == round_]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_three_launchers_lose_one_whole_and_the_two_left_train_every_sample_once(tmp_path, strategy):
    """Three launchers (``--nnodes=2:3``, the shared store, no num_nodes/ckpt_path/variable); one that neither binds
    the endpoint nor runs rank zero is killed whole mid-epoch: the two left restart on a world of 2, resume from the
    newest checkpoint by themselves (FSDP: resharded from 3 to 2) and end with exit status 0, every sample of both
    epochs trained exactly once."""
    root, port = tmp_path / "run", free_port()
    names, launchers = ["A", "B", "C"], []
    try:
        for name in names:  # A first: it binds the endpoint; the others join within last_call_timeout
            launchers.append(launcher(root, port, name, strategy, nnodes="2:3", last_call_s=20))
            if name == "A":
                bind_endpoint_first(launchers[0], root, port)
        deadline = time.monotonic() + BOUND_S
        wait_for(lambda: max((r["step"] for r in round_rows(root, 0)), default=-1) >= 4, root, launchers,
                 "round 0 reaching step 4", deadline)
        ranks = {r["rank"]: p.name.split("-", 1)[0] for p in (root / "records").glob("*-round0-*.jsonl")
                 for r in [json.loads(p.read_text().splitlines()[0])]}
        assert sorted(ranks) == [0, 1, 2], (ranks, output(root))
        victim = next(name for name in ("C", "B") if ranks[0] != name)  # never A (the endpoint) nor rank zero's
        os.killpg(launchers[names.index(victim)].pid, signal.SIGKILL)
        for pid in workers_of(root, victim):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        left = [proc for name, proc in zip(names, launchers, strict=True) if name != victim]
        for proc in left:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        kill_all(root, launchers)
    assert [proc.returncode for proc in left] == [0, 0], output(root)
    rows = records_of_a_clean_run(root)
    assert {row["round"]: row["world"] for row in rows} == {0: 3, 1: 2}, output(root)
    assert min(r["step"] for r in rows if r["round"] == 1) > 0  # resumed, not from the start
    assert trained_once(kept(rows)) == {}, output(root)
    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]


#: what growing needs in torch 2.9 (docs/elastic.rst, "Growing"): a store of each attempt's own
OWN_STORES = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_launcher_that_joins_grows_the_job_which_resumes_by_itself_every_sample_once(tmp_path, strategy):
    """Launcher A trains alone (world 1); launcher B starts mid-epoch: A's agent restarts its worker and the next
    attempt runs on a world of 2, tells that it is a restarted attempt (no failure was counted: each process's
    agent count is 0), resumes from the run's newest checkpoint in the same run folder and trains the rest of the
    epoch (FSDP: resharded from 1 to 2), every sample of both epochs once. No num_nodes, no ckpt_path; the variable
    torch needs to grow."""
    root, port = tmp_path / "run", free_port()
    first = launcher(root, port, "A", strategy, step_sleep_s=1.0, env_extra=OWN_STORES)  # B joins in epoch 0
    launchers, deadline = [first], time.monotonic() + BOUND_S
    try:
        wait_for(lambda: max((r["step"] for r in round_rows(root, 0)), default=-1) >= 4, root, launchers,
                 "round 0 reaching step 4", deadline)
        launchers.append(launcher(root, port, "B", strategy, env_extra=OWN_STORES))
        for proc in launchers:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        kill_all(root, launchers)
    assert [proc.returncode for proc in launchers] == [0, 0], output(root)
    rows = records_of_a_clean_run(root)
    assert {row["round"]: row["world"] for row in rows} == {0: 1, 1: 2}, output(root)
    resumed = min(r["step"] for r in rows if r["round"] == 1)
    last = max(r["step"] for r in rows if r["round"] == 0)
    if strategy == "ddp":  # the agent's SIGTERM to A's worker: it ends its step and saves it (interrupted.ckpt)
        assert last <= resumed <= last + 1, (last, resumed)
        assert "interrupted.ckpt" in output(root)
    else:  # sharded state: nothing written on the way out, the newest periodic checkpoint (every 3 steps)
        assert resumed > 0 and resumed % 3 == 0, resumed
    assert any(r["epoch"] == 0 for r in rows if r["round"] == 1), resumed  # resumed within the epoch it grew in
    assert trained_once(kept(rows)) == {}, output(root)
    said = output(root)
    assert "attempt 1 of this run (restarted by its launcher): loaded checkpoint" in said, said
    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]


@pytest.mark.slow
def test_a_restart_loop_that_always_fails_ends_with_the_last_failure_when_max_restarts_is_spent(tmp_path):
    """A fit that fails at step 2 in every attempt under ``--max-restarts=1``: the job ends (non-zero, within a
    generous bound) after two attempts, and torchrun's output names the failure of the last one."""
    root, port = tmp_path / "run", free_port()
    job = launcher(root, port, "A", nnodes="1", max_restarts=1, step_sleep_s=0.0, env_extra={"FAIL_AT_STEP": "2"})
    try:
        job.wait(timeout=BOUND_S)
    finally:
        kill_all(root, [job])
    said = output(root)
    assert job.returncode not in (0, None), said
    assert sorted({row["round"] for row in records(root)}) == [0, 1], said  # restarted once, then gave up
    assert "elastic_fit fails at step 2 on purpose" in said and "ChildFailedError" in said, said
    last = next((root / "records").glob("A-round1-*.jsonl")).stem.rsplit("pid", 1)[1]
    assert f"exitcode  : 1 (pid: {last})" in said, said  # torchrun's root cause: the last attempt's process


@pytest.mark.slow
def test_losing_the_launcher_that_hosts_the_rendezvous_store_ends_the_job_with_torchs_error(tmp_path):
    """Launcher A binds the endpoint (it hosts torch's rendezvous store); killed whole mid-epoch, launcher B cannot
    rendezvous again: torch's agent ends the job, non-zero, within a generous bound, saying it lost the store."""
    root, port = tmp_path / "run", free_port()
    first = launcher(root, port, "A")
    bind_endpoint_first(first, root, port)
    second = launcher(root, port, "B")
    launchers, deadline = [first, second], time.monotonic() + BOUND_S
    try:
        wait_for(lambda: max((r["step"] for r in round_rows(root, 0)), default=-1) >= 4, root, launchers,
                 "round 0 reaching step 4", deadline)
        os.killpg(first.pid, signal.SIGKILL)
        for pid in workers_of(root, "A"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        second.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        kill_all(root, launchers)
    said = (root / "B.out").read_text()
    assert second.returncode not in (0, None), said[-3000:]
    assert "RendezvousConnectionError" in said, said[-3000:]
