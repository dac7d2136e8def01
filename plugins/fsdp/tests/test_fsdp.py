"""The ``fsdp`` strategy on real CPU processes over gloo: equal to one process (and so to DDP), 1/N of its memory
per rank, gradient accumulation without syncs, bf16 mixed precision, refused options, and joining torchrun's
processes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fsdp_models import MLP, Block, Probe

import accelkit
from accelkit.errors import ConfigurationError
from accelkit.strategies.ddp import find_free_port
from accelkit_fsdp import FSDPStrategy
from helpers.compare import assert_same_weights
from helpers.guards import TESTS

HERE = Path(__file__).resolve().parent
QUIET = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
             enable_model_summary=False, limit_val_batches=0)


def fit(root: Path, strategy: object, devices: int, tag: str, epochs: int = 1, model: MLP | None = None,
        **kwargs: object) -> tuple[MLP, list[dict]]:
    """Fit an MLP; return it (holding the trained weights) and each rank's Probe record."""
    model = model or MLP()
    trainer = accelkit.Trainer(strategy=strategy, devices=devices, max_epochs=epochs, default_root_dir=root,
                               callbacks=[Probe(root, tag)], **QUIET, **kwargs)
    trainer.fit(model)
    return model, [torch.load(root / f"{tag}-rank{r}.pt", weights_only=True) for r in range(devices)]


def total(record: dict) -> int:
    return sum(record["peak"].values())


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory: pytest.TempPathFactory) -> tuple[MLP, list[dict]]:
    """One epoch of fsdp on 2 processes (Block units), shared as the reference of several tests."""
    return fit(tmp_path_factory.mktemp("fsdp2"), FSDPStrategy(auto_wrap_policy=[Block]), 2, "fsdp")


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[MLP, list[dict]]:
    """One process without fsdp on the same global batches (16 samples a step): the weights DDP trains on any
    number of processes (tests/test_ddp.py proves DDP equal to one process), and the bytes of one full copy, which
    every DDP rank holds."""
    return fit(tmp_path_factory.mktemp("one"), "auto", 1, "one")


@pytest.mark.slow
def test_fsdp_equals_one_process_with_one_nth_of_its_memory_per_rank(fsdp2, one_process):
    """At 2 processes. The same facts at 4 (a fourth of the memory per rank, 4 spawned ranks, training equal to the
    2-process run and so to one process) are checked on test_fsdp_checkpoints.py's 4-process run,
    test_resume_at_four_processes_equals_the_uninterrupted_two_process_run, rather than on a run of their own."""
    devices = 2
    reference, (single,) = one_process
    model, fsdp = fsdp2
    # The caller's module holds the trained full weights, equal to one process's (and so DDP's) on the same global
    # batches.
    assert all(not hasattr(p, "to_local") for p in model.parameters())
    assert_same_weights(model.state_dict(), reference.state_dict(), atol=1e-5)
    assert not torch.equal(model.head.weight, MLP().head.weight)  # training moved it
    assert [r["rank"] for r in fsdp] == list(range(devices))
    assert len({r["pid"] for r in fsdp}) == devices and {r["launcher"] for r in fsdp} == {"SpawnLauncher"}
    # Per-rank peak bytes of parameters, gradients and Adam state (local shards, measured during the steps), against
    # one full copy's (what one process, and every DDP rank, holds).
    full = total(single)
    for record in fsdp:
        for part in ("params", "grads", "optimizer"):
            assert 0 < record["peak"][part] <= single["peak"][part] / devices * 1.1, (part, record, single)
        assert total(record) == pytest.approx(full / devices, rel=0.1)
    assert sum(total(r) for r in fsdp) == pytest.approx(full, rel=0.01)  # the shards add up to one copy


@pytest.mark.slow  # from a plain process, fsdp starts its worker even for one device
def test_one_device_trains_the_weights_of_a_run_without_fsdp(tmp_path):
    """One process: fsdp builds its one-process group on a loopback store and trains as a run without it."""
    reference = MLP(optimizer="sgd", lr=0.05)
    accelkit.Trainer(devices=1, max_epochs=1, default_root_dir=tmp_path / "one", **QUIET).fit(reference)
    model, records = fit(tmp_path, "fsdp", 1, "single", model=MLP(optimizer="sgd", lr=0.05))
    assert len(records) == 1
    assert_same_weights(model.state_dict(), reference.state_dict(), atol=1e-6)


@pytest.mark.slow
def test_gradient_accumulation_skips_the_sync_and_matches_one_process(tmp_path):
    # 2 ranks x 2 accumulated batches of 4 = global batches of 16, as one process with batches of 16 (SGD).
    reference = MLP(optimizer="sgd", lr=0.05)
    accelkit.Trainer(devices=1, max_epochs=1, default_root_dir=tmp_path / "one", **QUIET).fit(reference)
    model, records = fit(tmp_path, "fsdp", 2, "accumulate", model=MLP(optimizer="sgd", lr=0.05, global_batch=8),
                         accumulate_grad_batches=2)
    assert_same_weights(model.state_dict(), reference.state_dict(), atol=1e-5)
    # Inside the accumulation window no gradient reaches the sharded parameters (no reduce-scatter ran);
    # at the window's end it does.
    for record in records:
        assert record["grads_after_backward"] == [False, True] * 4


@pytest.mark.slow
def test_bf16_mixed_computes_in_bfloat16_and_keeps_float32_shards(tmp_path, fsdp2):
    reference, _ = fsdp2
    model, records = fit(tmp_path, "fsdp", 2, "bf16", precision="bf16-mixed")
    for record in records:
        assert record["forward_dtypes"] == ["torch.bfloat16"]  # gathered parameters, during the forward
        assert record["param_dtypes"] == ["torch.float32"]  # the sharded parameters the optimizer steps
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert_same_weights(model.state_dict(), reference.state_dict(), atol=5e-2)
    pairs = zip(model.state_dict().values(), reference.state_dict().values(), strict=True)
    assert not all(torch.equal(a, b) for a, b in pairs)


def test_mixed_precision_policy_of_each_precision():
    strategy = FSDPStrategy()
    for name, param, reduce in (("bf16-mixed", torch.bfloat16, torch.float32),
                                ("16-mixed", torch.float16, torch.float32), ("32-true", None, None)):
        strategy.precision = type("P", (), {"name": name})()
        policy = strategy.mixed_precision_policy()
        assert (policy.param_dtype, policy.reduce_dtype) == (param, reduce)


def test_refused_options_name_what_works():
    with pytest.raises(ConfigurationError, match=r"unknown fsdp option\(s\) \['shard_grads'\].*auto_wrap_policy"):
        FSDPStrategy(shard_grads=True)
    with pytest.raises(ConfigurationError, match="names no importable class"):
        FSDPStrategy(auto_wrap_policy="fsdp_models:NoSuchBlock")
    with pytest.raises(ConfigurationError, match="not a torch.nn.Module subclass"):
        FSDPStrategy(activation_checkpointing=[int])
    with pytest.raises(ConfigurationError, match="parameter count >= 1"):
        FSDPStrategy(auto_wrap_policy=0)
    known = r"knows \['16-mixed', '32-true', 'bf16-mixed'\], not precision='64-true'"
    with pytest.raises(ConfigurationError, match=known):
        accelkit.Trainer(accelerator="cpu", strategy="fsdp", devices=2, precision="64-true", logger=False)
    with pytest.raises(ConfigurationError, match="start every node with torchrun"):
        accelkit.Trainer(accelerator="cpu", strategy="fsdp", devices=1, num_nodes=2, logger=False)


def test_auto_wrap_by_parameter_count_takes_children_before_parents():
    model = MLP(width=8, depth=2)
    units = FSDPStrategy(auto_wrap_policy=70)._units(model)
    # each block's Linear holds 72 parameters: the Linears become units, their Block parents then hold none new
    assert units == [model.blocks[1].linear, model.blocks[0].linear, model.inp]
    assert FSDPStrategy(auto_wrap_policy=(Block,))._units(model) == [model.blocks[1], model.blocks[0]]


@pytest.mark.slow
def test_activation_checkpointing_and_cpu_offload_train_like_the_default(tmp_path, fsdp2):
    reference, _ = fsdp2
    model, _ = fit(tmp_path, FSDPStrategy(auto_wrap_policy=[Block], activation_checkpointing=[Block],
                                          cpu_offload=True), 2, "options")
    assert_same_weights(model.state_dict(), reference.state_dict(), atol=1e-6)


@pytest.mark.slow
def test_torchrun_two_nodes_on_loopback_join_instead_of_spawning(tmp_path, fsdp2, prewarmed):
    reference, _ = fsdp2
    port = find_free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = str(HERE)
    # The two torchrun agents (one per "node") are forks of one program forked from the prewarmed interpreter
    # (helpers.prewarmed): torchrun's own code, each agent its own process; the workers they start are fresh
    # interpreters (torchrun's subprocesses), as on any machine.
    agents = f"""
import json, os, sys, traceback
from torch.distributed.run import main
pids = []
for rank in range(2):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            main(["--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                  "--master-port", "{port}", "--rdzv-backend", "static", {str(HERE / "torchrun_fsdp.py")!r},
                  {str(tmp_path)!r}, "2"])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    pids.append(pid)
print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]))
"""
    proc = prewarmed.run(["-c", agents], cwd=tmp_path, env=env, timeout=240)
    codes = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    assert codes == [0, 0], proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [torch.load(tmp_path / f"torchrun-rank{r}.pt", weights_only=True) for r in range(2)]
    assert [r["rank"] for r in records] == [0, 1] and {r["world_size"] for r in records} == {2}
    # joined: each rank is the process torchrun started (no worker of its own), under an ExternalLauncher
    assert {r["launcher"] for r in records} == {"ExternalLauncher"}
    assert records[0]["ppid"] != records[1]["ppid"]  # two torchrun agents, one per "node"
    assert_same_weights(torch.load(tmp_path / "torchrun-weights.pt", weights_only=True), reference.state_dict(),
                        atol=1e-5)


@pytest.mark.slow
def test_a_users_batch_sampler_is_sharded_keeping_its_batches(tmp_path, forked_python):
    """A loader built with ``batch_sampler=BatchSampler(RandomSampler(data), 8, False)`` over 20 samples, fitted
    under ``fsdp`` on 2 processes for 2 epochs (``helpers.samplers``' ``batch_sampler_fsdp``): each rank trains its
    10 as batches of 8 and 2, every sample once per epoch, and nothing warns about the batch sampler."""
    run = forked_python(f"""
        import json
        from helpers.samplers import record_two_rank_fit
        print(json.dumps(record_two_rank_fit({str(tmp_path)!r}, "batch_sampler_fsdp")))
        """, path=[TESTS], env={"CUDA_VISIBLE_DEVICES": ""})
    ranks = run["ranks"]
    assert [(r["strategy"], r["world_size"]) for r in ranks] == [("FSDPStrategy", 2)] * 2
    assert len({r["pid"] for r in ranks}) == 2 and sorted(ranks[0]["epochs"]) == ["0", "1"]
    for epoch in ("0", "1"):
        assert [r["sizes"][epoch] for r in ranks] == [[8, 2], [8, 2]]
        assert sorted(ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch]) == list(range(20))
    assert "batch_sampler" not in run["err"], run["err"][-3000:]


def test_16_mixed_is_refused_until_the_scaler_decides_for_every_rank():
    # float16 exists on cuda only; the strategy's own check is what a cuda run would meet
    from accelkit.precision import MixedPrecision
    from accelkit_fsdp.strategy import FSDPStrategy

    strategy = FSDPStrategy()
    precision = MixedPrecision()
    precision.name = "16-mixed"
    strategy.precision = precision
    problems = " ".join(strategy.validate())
    assert "16-mixed" in problems and "ShardedGradScaler" in problems and "bf16-mixed" in problems
