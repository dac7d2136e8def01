"""Data-parallel runs on the CPU (gloo): real processes (spawned workers, torchrun "nodes", failures, a checkpoint
saved after a spawned fit) and a process group the user made before fit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.strategies.ddp import find_free_port  # noqa: E402
from helpers.compare import assert_same_weights  # noqa: E402
from helpers.guards import PYTHON, TESTS, child_env, hang_guard, wait_gone  # noqa: E402
from helpers.models import RegressionModule, WeightDump, quiet_trainer  # noqa: E402

QUIET = dict(accelerator="cpu", logger=False, enable_checkpointing=False)


@pytest.fixture(scope="module")
def single_process(tmp_path_factory) -> tuple[dict[str, torch.Tensor], int]:
    """Weights and step count after one process trains 2 epochs on global batches of 8 (the union of two ranks'
    batches of 4): one fit, the reference of every multi-process run of this module (none changes it)."""
    model = RegressionModule(batch_size=8)
    trainer = accelkit.Trainer(devices=1, max_epochs=2, enable_progress_bar=False,
                               default_root_dir=tmp_path_factory.mktemp("single"), **QUIET)
    trainer.fit(model)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, trainer.global_step


@pytest.mark.slow
def test_ddp_spawn_two_processes_match_single_process(tmp_path, capfd, monkeypatch, single_process):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the workers' default share of the cores is checked below
    expected, single_steps = single_process
    initial = {k: v.clone() for k, v in RegressionModule().state_dict().items()}
    capfd.readouterr()

    model = RegressionModule(batch_size=4)
    # Validation off in this run: its bar, nested under the epoch bar, would split the epoch bar's line in two.
    trainer = accelkit.Trainer(devices=2, strategy="ddp_spawn", max_epochs=2, enable_progress_bar=True,
                               limit_val_batches=0, default_root_dir=tmp_path / "ddp", callbacks=[WeightDump(tmp_path)],
                               **QUIET)
    with hang_guard(120):
        trainer.fit(model)
    out = capfd.readouterr().out  # the bar draws on standard output, as Lightning's

    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    assert ranks[0]["pid"] != ranks[1]["pid"]
    # The workers share the host's cores instead of each spinning up one thread per core.
    threads = max(1, os.cpu_count() // 2)
    assert [r["threads"] for r in ranks] == [threads, threads]
    # Both replicas end bit-identical (same all-reduced gradients applied to the same broadcast weights).
    for key in ranks[0]["state_dict"]:
        assert torch.equal(ranks[0]["state_dict"][key], ranks[1]["state_dict"][key]), key
    # ... equal to one process over the same global batches ...
    assert_same_weights(ranks[0]["state_dict"], expected, atol=1e-5)
    assert not torch.allclose(expected["layer.weight"], initial["layer.weight"])  # training moved the weights
    # ... and the trained weights came back to the caller's model, with the step count.
    assert_same_weights(model.state_dict(), ranks[0]["state_dict"], atol=0)
    assert not model.layer.weight.is_shared()  # workers got copies, not views of the caller's memory
    assert trainer.global_step == single_steps == 8
    assert "train_loss_epoch" in trainer.callback_metrics
    # sync_dist reduces epoch values over both ranks; without it rank 0 reports its own.
    assert trainer.callback_metrics["rank_mean"] == pytest.approx(0.5)
    assert trainer.callback_metrics["rank_max"] == 1.0
    assert trainer.callback_metrics["rank_local"] == 0.0
    # Only global rank 0 draws a progress bar: one bar line per epoch.
    epoch0_lines = [line for line in out.split("\n") if "Epoch 0" in line]
    assert len(epoch0_lines) == 1, out
    assert len([line for line in out.split("\n") if "Epoch 1" in line]) == 1, out
    # The caller's Trainer saves a checkpoint after the spawned fit with the run's optimizer state (one optimizer,
    # its settings) and step count: what the workers handed back, not an empty state.
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    saved = torch.load(tmp_path / "after.ckpt", weights_only=True)
    assert len(saved["optimizer_states"]) == 1 and saved["optimizer_states"][0]["param_groups"][0]["lr"] == model.lr
    assert saved["global_step"] == trainer.global_step > 0


@pytest.mark.slow
def test_a_second_fit_of_one_trainer_that_launches_workers_goes_on_with_a_warning_naming_lightnings_refusal(
        tmp_path, forked_python, single_process):
    """Lightning refuses a second ``fit`` of one Trainer under a spawning strategy (``NotImplementedError``: a new
    Trainer and ``fit(ckpt_path=...)``). accelkit runs it, going on from the first fit's counters as a second fit
    in one process does (the same weights as one longer fit: plain SGD carries no state between the two), and
    says so with a warning naming Lightning's refusal; a deliberate difference, in the migration guide's ``fit`` row.
    The two fits are ``ddp_fork`` fits in a program forked from the prewarmed interpreter: what is checked is the
    caller's, for every strategy that launches workers (``Strategy.launches_workers``), whatever their start method
    (``test_ddp_spawn_two_processes_match_single_process`` hands a spawned fit's state back)."""
    expected, single_steps = single_process
    result = forked_python(f"""
        import json, warnings
        import torch
        import accelkit
        from helpers.models import RegressionModule

        model = RegressionModule(batch_size=4)
        trainer = accelkit.Trainer(devices=2, strategy="ddp_fork", max_epochs=1, enable_progress_bar=False,
                                   limit_val_batches=0, default_root_dir={str(tmp_path / "ddp")!r}, **{QUIET!r})
        trainer.fit(model)
        first = [trainer.current_epoch, trainer.global_step]
        trainer.max_epochs = 2
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(model)
        torch.save(model.state_dict(), {str(tmp_path / "weights.pt")!r})
        print(json.dumps({{"first": first, "second": [trainer.current_epoch, trainer.global_step],
                          "warned": [str(w.message) for w in caught if issubclass(w.category, UserWarning)]}}))
        """, path=[TESTS], env={"CUDA_VISIBLE_DEVICES": ""})
    assert result["first"] == [1, 4]
    refusal = (r"fit\(\) again on this Trainer with strategy='ddp_fork', which starts worker processes: Lightning "
               r"refuses this \(NotImplementedError.*accelkit goes on from epoch 1, step 4")
    assert [w for w in result["warned"] if re.search(refusal, w)], result["warned"]
    assert tuple(result["second"]) == (2, single_steps) == (2, 8)
    assert_same_weights(torch.load(tmp_path / "weights.pt", weights_only=True), expected, atol=1e-5)


@pytest.mark.slow
def test_torchrun_two_nodes_on_loopback_match_single_process(tmp_path, single_process):
    expected, _ = single_process
    port = find_free_port()
    script = TESTS / "helpers" / "torchrun_fit.py"
    commands = [
        [PYTHON, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank),
         "--master-addr", "127.0.0.1", "--master-port", str(port), "--rdzv-backend", "static",
         str(script), str(tmp_path), "2"]
        for rank in range(2)
    ]
    procs = [subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for cmd in commands]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=90)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(outputs)

    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    for key in ranks[0]["state_dict"]:
        assert torch.equal(ranks[0]["state_dict"][key], ranks[1]["state_dict"][key]), key
    assert_same_weights(ranks[0]["state_dict"], expected, atol=1e-5)
    assert ranks[0]["global_step"] == 8


@pytest.mark.slow
def test_worker_failure_raises_worker_error_with_traceback_and_leaves_no_processes(tmp_path, prewarmed):
    proc = prewarmed.run([str(TESTS / "helpers" / "fail_fit.py"), str(tmp_path)], cwd=tmp_path, env=child_env(),
                         timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    caught = [line for line in proc.stdout.splitlines() if line.startswith(("CAUGHT", "NO ERROR"))]
    assert caught == ["CAUGHT accelkit.errors.WorkerError"], proc.stdout + proc.stderr
    # The worker's own exception and its traceback travel to the caller.
    assert "ValueError: deliberate failure on rank 1 at batch 1" in proc.stdout
    assert "Traceback" in proc.stdout and "training_step" in proc.stdout
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(2)]
    assert wait_gone(pids) == [], f"worker processes {pids} outlived the failed run"


def test_a_process_group_the_user_made_survives_fit(tmp_path):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{find_free_port()}", rank=0, world_size=1)
    try:
        quiet_trainer(tmp_path, strategy="ddp", max_epochs=1).fit(RegressionModule())
        assert dist.is_initialized()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_a_precision_that_recasts_parameters_after_ddp_wrapped_them_is_refused(tmp_path, forked_python):
    # two ddp_fork workers, in a process forked from the prewarmed interpreter: the check is each worker's, whichever
    # way it started (the WorkerError and its message are the launcher's, the same under ddp_spawn)
    error = forked_python(f"""
        import json
        import accelkit
        from helpers.models import RegressionModule
        from helpers.precisions import CastAfterStep

        trainer = accelkit.Trainer(devices=2, strategy="ddp_fork", max_steps=3, enable_progress_bar=False,
                                   enable_model_summary=False, plugins=[CastAfterStep()],
                                   default_root_dir={str(tmp_path)!r}, **{QUIET!r})
        try:
            trainer.fit(RegressionModule())
        except accelkit.WorkerError as exc:
            print(json.dumps(str(exc)))
        else:
            print(json.dumps(None))
        """, path=[TESTS], env={"CUDA_VISIBLE_DEVICES": ""})
    assert error is not None, "no WorkerError"
    assert ("precision 'cast-after-step' (CastAfterStep) cast parameter 'layer.weight' from float32 to float64 after "
            "the module was wrapped in DistributedDataParallel, whose gradient all-reduce holds the parameters as they "
            "were, so the 2 processes would train apart; a precision may convert parameters only in convert_module, "
            "which runs before the strategy wraps the module (docs/plugins.rst, 'Precision')") in error


@pytest.mark.slow
def test_a_ddp_subclass_reaches_the_wrapper_to_register_a_comm_hook(tmp_path, forked_python):
    """A subclass of a DDP strategy registers a communication hook on the wrapper in ``setup_module``, in each worker.
    The subclass forks its workers (``ddp_fork``, in a program forked from the prewarmed interpreter): the hook is
    registered by the strategy in each worker whichever way it started, without 2 fresh worker interpreters."""
    initial = RegressionModule().state_dict()
    steps = forked_python(f"""
        import json
        import accelkit
        from accelkit.strategies.ddp import DDPForkStrategy
        from helpers.models import RegressionModule, WeightDump
        from helpers.strategies import CommHookDDPSpawn

        class CommHookDDPFork(CommHookDDPSpawn, DDPForkStrategy):  # the hook's setup_module, fork's launch
            pass

        strategy = CommHookDDPFork(comm_hook="helpers.strategies:zero_gradients", find_unused_parameters=False)
        trainer = accelkit.Trainer(devices=2, strategy=strategy, max_steps=3, enable_progress_bar=False,
                                   enable_model_summary=False, callbacks=[WeightDump({str(tmp_path)!r})],
                                   default_root_dir={str(tmp_path)!r}, **{QUIET!r})
        trainer.fit(RegressionModule())
        print(json.dumps(trainer.global_step))
        """, path=[TESTS], env={"CUDA_VISIBLE_DEVICES": ""})
    assert steps == 3
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert [r["global_step"] for r in ranks] == [3, 3]
    assert ranks[0]["pid"] != ranks[1]["pid"]  # two workers
    for rank in ranks:  # the hook's zero gradients were applied: nothing moved
        assert_same_weights(rank["state_dict"], initial, atol=0)


def _route_traced(router, batch, trace):
    """One training step through ``router`` with ``trace`` as the Python trace function; its output."""
    sys.settrace(trace)
    try:
        return router("training_step", batch, 0)
    finally:
        sys.settrace(None)


def test_the_step_router_reaches_the_module_without_nn_module_getattr():
    """The wrapper DDP holds routes every training step to the module: that costs no ``nn.Module.__getattr__`` per
    step (the module is also a plain attribute), and the module stays a registered submodule (DDP reduces its
    parameters' gradients)."""
    from accelkit.strategies import StepRouter

    module = RegressionModule()
    router = StepRouter(module)
    assert list(router.parameters()) == list(module.parameters())
    batch = (torch.randn(4, 1), torch.randn(4, 1))
    module.training_step = lambda batch, batch_idx: batch[0].sum()  # no Trainer here: no self.log
    getattr_calls = []

    def trace(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "__getattr__" and \
                frame.f_back.f_code is StepRouter.forward.__code__:
            getattr_calls.append(frame.f_locals.get("name"))
        return None

    out = _route_traced(router, batch, trace)
    assert out == batch[0].sum()
    assert getattr_calls == [], getattr_calls


def test_the_step_router_is_called_without_nn_module_call_machinery_until_it_has_a_hook():
    """DDP calls the router once per step: that goes straight to the module's method, without
    ``nn.Module.__call__``'s hook machinery; a hook registered on the router runs from then on."""
    from accelkit.strategies import StepRouter

    module = RegressionModule()
    module.training_step = lambda batch, batch_idx: batch[0].sum()  # no Trainer here: no self.log
    router = StepRouter(module)
    batch = (torch.randn(4, 1), torch.randn(4, 1))
    machinery = {torch.nn.Module._call_impl.__code__, torch.nn.Module._wrapped_call_impl.__code__}
    entered = []

    def trace(frame, event, arg):
        if event == "call" and frame.f_code in machinery and frame.f_locals.get("self") is router:
            entered.append(frame.f_code.co_name)

    out = _route_traced(router, batch, trace)
    assert out == batch[0].sum()
    assert entered == [], entered
    seen = []
    router.register_forward_pre_hook(lambda _router, args: seen.append(args[0]))
    assert router("training_step", batch, 0) == batch[0].sum()
    assert seen == ["training_step"]



def test_the_step_router_merges_keyword_arguments_only_when_a_call_has_some():
    """A step's call through the router, as DDP's ``forward`` makes it (``router(*inputs, **kwargs)``, no keyword
    argument), runs at most 12 Python instructions in the router (13 when every call merged its keyword
    arguments); a call with keyword arguments (an evaluation step's ``dataloader_idx``) still passes them."""
    from accelkit.strategies import StepRouter
    from helpers.instructions import instructions

    module = RegressionModule()
    module.training_step = lambda batch, batch_idx: batch[0].sum()  # no Trainer here: no self.log
    module.validation_step = lambda batch, batch_idx, dataloader_idx=0: (batch_idx, dataloader_idx)
    router = StepRouter(module)
    batch, inputs, kwargs = (torch.ones(2), torch.zeros(2)), ("training_step",), {}
    assert instructions(lambda: router(*inputs, batch, 0, **kwargs), within="accelkit/strategies/base.py") <= 12
    assert router("training_step", batch, 0) == 2.0
    assert router("validation_step", batch, 3, dataloader_idx=1) == (3, 1)


NOTEBOOK_PROGRAM = '''
import atexit, sys, torch
sys.path.insert(0, {tests!r})
import accelkit
from helpers.models import RegressionModule

class DefinedHere(RegressionModule):  # a class of __main__ with no file: what a notebook cell defines
    pass

atexit.register(print, "CALLER ATEXIT")  # the caller's handler: runs once, in the caller, not in the workers
for strategy in {strategies!r}:
    model = DefinedHere()
    before = model.layer.weight.detach().clone()
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=1, logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model)
    print("FIT OK", strategy, trainer.global_step, not torch.equal(before, model.layer.weight))
'''


@pytest.mark.slow
def test_ddp_fork_trains_a_module_defined_where_no_file_holds_it(tmp_path, prewarmed):
    """A module defined in a notebook (``__main__`` without a file): ``ddp_spawn`` cannot import it in a fresh
    interpreter, ``ddp_fork`` forks the caller, trains it on two processes and hands the weights back; so does
    ``ddp_notebook`` (Lightning's name for it), one fit after the other in the same program (one program, where
    each name had one of its own)."""
    program = NOTEBOOK_PROGRAM.format(tests=str(TESTS), strategies=["ddp_fork", "ddp_notebook"])
    with hang_guard(240):  # python -c PROGRAM: its __main__ has no file, as a notebook's
        done = prewarmed.run(["-c", program], cwd=tmp_path, env=child_env(), timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    for strategy in ("ddp_fork", "ddp_notebook"):  # 2 batches per rank, weights handed back
        assert f"FIT OK {strategy} 2 True" in done.stdout, done.stdout + done.stderr
    assert done.stdout.count("CALLER ATEXIT") == 1, done.stdout


@pytest.mark.slow
def test_ddp_spawn_cannot_import_a_module_defined_where_no_file_holds_it(tmp_path, prewarmed):
    """Why ``ddp_fork`` exists: the same program under ``ddp_spawn`` fails, saying what its worker could not do."""
    program = NOTEBOOK_PROGRAM.format(tests=str(TESTS), strategies=["ddp_spawn"])
    with hang_guard(240):
        done = prewarmed.run(["-c", program], cwd=tmp_path, env=child_env(), timeout=180)
    assert done.returncode != 0 and "FIT OK" not in done.stdout
    assert "DefinedHere" in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("caller", ["warm", "cold"])
def test_ddp_fork_workers_of_a_caller_running_its_thread_pool_run_one_thread_instead_of_hanging(caller, tmp_path):
    """``OMP_NUM_THREADS=2``: a worker forked from a caller whose intra-op thread pool is up (a parallel tensor
    operation ran in it, as in a notebook) hangs in its first parallel operation with two threads (OpenMP is not
    fork-safe): it ran until the collective timeout before. It now runs one thread, with a warning saying why and
    what gives more; a caller that ran no parallel operation keeps two threads per worker and gets no warning."""
    env = {**child_env(), "OMP_NUM_THREADS": "2"}
    done = subprocess.run([PYTHON, str(TESTS / "helpers" / "fork_threads_fit.py"), caller], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    if caller == "warm":
        assert result["threads"] == [1, 1]
        assert len(result["warned"]) == 1 and "each forked worker runs 1 intra-op thread instead of 2" in \
            result["warned"][0] and "strategy='ddp_spawn'" in result["warned"][0]
    else:
        assert result == {"threads": [2, 2], "warned": []}
