"""The captured step, ``Trainer(compile_step=...)`` (issue 24, item 2): the training step compiled with
``torch.compile`` (inductor on the CPU here) trains as the eager step does, and what it cannot run is refused
before the fit starts, with a sentence naming it.

The compiled fits are expensive on a CPU (each compiles its forward/backward and optimizer graphs), so one
module-scoped fixture runs every configuration once, eagerly and captured, and the tests read its results.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit
from accelkit.errors import ConfigurationError
from accelkit.loops.captured import CALLBACK_HOOKS, MODULE_HOOKS, compile_options
from accelkit.precision import MixedPrecision
from accelkit.strategies.single_device import SingleDeviceStrategy
from helpers.models import quiet_trainer
from helpers.prewarmed import Prewarmed

STEPS = 50


def mlp_data(n: int, seed: int = 0) -> TensorDataset:
    """A fixed regression set for the small MLP."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(n, 1, generator=generator))


class MLPModule(accelkit.Module):
    """A 8-16-1 MLP logging its loss (per step and per epoch) and a second value derived from it.

    :param optimizer: ``"sgd"`` (momentum 0.9) or ``"adamw"``.
    :param scheduler: step a ``StepLR`` (gamma 0.9) after every optimizer step.
    :param batch_size: batch size of the training loader.
    """

    def __init__(self, optimizer: str = "sgd", scheduler: bool = False, batch_size: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.optimizer, self.scheduler, self.batch_size = optimizer, scheduler, batch_size
        self.lrs: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("twice", loss * 2, on_step=True, on_epoch=False, reduce_fx="max")
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self) -> Any:
        if self.optimizer == "sgd":
            opt: torch.optim.Optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        else:
            opt = torch.optim.AdamW(self.parameters(), lr=0.01, weight_decay=0.01)
        if not self.scheduler:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.95),
                                                   "interval": "step"}}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(mlp_data(400), batch_size=self.batch_size)


class StepLogger(accelkit.Callback):
    """Keeps every per-step value the loggers would get (``trainer.logged_metrics`` after each step)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.rows.append({k: float(v) for k, v in trainer.logged_metrics.items()})


#: name -> (optimizer, scheduler, Trainer arguments); each runs 50 optimizer steps
CONFIGS = {
    "sgd": ("sgd", False, {}),
    "sgd_clip_accumulate": ("sgd", False, {"gradient_clip_val": 0.5, "accumulate_grad_batches": 2}),
    "adamw": ("adamw", False, {}),
    "adamw_clip_accumulate_scheduler": ("adamw", True, {"gradient_clip_val": 0.05, "gradient_clip_algorithm": "value",
                                                       "accumulate_grad_batches": 2}),
}


def _fit(tmp: Path, name: str, compile_step: Any) -> dict[str, Any]:
    optimizer, scheduler, arguments = CONFIGS[name]
    module = MLPModule(optimizer, scheduler)
    steps = StepLogger()
    trainer = quiet_trainer(tmp, max_steps=STEPS, log_every_n_steps=1, callbacks=[steps], compile_step=compile_step,
                            enable_model_summary=False, **arguments)
    torch._dynamo.reset()  # each fit compiles from scratch: earlier fits' graphs count toward the recompile limit
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    trainer.fit(module)
    return {"weights": [p.detach().clone() for p in module.parameters()], "steps": trainer.global_step,
            "rows": steps.rows, "lrs": module.lrs,
            "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
            "graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every configuration fitted eagerly (``compile_step=False``) and captured (``compile_step=True``)."""
    tmp = tmp_path_factory.mktemp("captured")
    return {f"{name}/{mode}": _fit(tmp, name, mode == "captured")
            for name in CONFIGS for mode in ("eager", "captured")}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_captured_weights_equal_eager(runs: dict[str, dict[str, Any]], name: str) -> None:
    eager, captured = runs[f"{name}/eager"], runs[f"{name}/captured"]
    assert captured["graphs"] >= 2, "the captured fit compiled no graphs: it ran eagerly"
    assert eager["graphs"] == 0
    assert eager["steps"] == captured["steps"] == STEPS
    for e, c in zip(eager["weights"], captured["weights"], strict=True):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)
    assert not torch.equal(eager["weights"][0], MLPModule().net[0].weight.detach())  # it trained


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_captured_logged_values_equal_eager(runs: dict[str, dict[str, Any]], name: str) -> None:
    eager, captured = runs[f"{name}/eager"], runs[f"{name}/captured"]
    assert len(captured["rows"]) == len(eager["rows"]) and eager["rows"]
    for e, c in zip(eager["rows"], captured["rows"], strict=True):
        assert c.keys() == e.keys()
        assert c == pytest.approx(e, rel=1e-4, abs=1e-6)
    assert set(captured["metrics"]) >= {"train_loss_step", "train_loss_epoch", "twice"}
    assert captured["metrics"] == pytest.approx(eager["metrics"], rel=1e-4, abs=1e-6)


@pytest.mark.slow
def test_captured_scheduler_steps_as_eager(runs: dict[str, dict[str, Any]]) -> None:
    eager, captured = (runs[f"adamw_clip_accumulate_scheduler/{m}"] for m in ("eager", "captured"))
    assert captured["lrs"] == eager["lrs"]
    assert eager["lrs"][-1] == pytest.approx(0.01 * 0.95 ** STEPS)  # one scheduler step per optimizer step


# ------------------------------------------------------------------------------------------------- refusals
def _overriding(hook: str) -> MLPModule:
    cls = type(f"Overrides_{hook}", (MLPModule,), {hook: lambda self, *args, **kwargs: None})
    return cls()


@pytest.mark.parametrize("hook", MODULE_HOOKS)
def test_module_hook_refused_by_name(tmp_path: Path, hook: str) -> None:
    trainer = quiet_trainer(tmp_path, max_steps=1, compile_step=True)
    with pytest.raises(ConfigurationError, match=rf"overrides {hook}, which runs inside the training step"):
        trainer.fit(_overriding(hook))
    assert trainer.global_step == 0


@pytest.mark.parametrize("hook", CALLBACK_HOOKS)
def test_callback_hook_refused_by_name(tmp_path: Path, hook: str) -> None:
    callback = type(f"Watches_{hook}", (accelkit.Callback,), {hook: lambda self, *args: None})()
    trainer = quiet_trainer(tmp_path, max_steps=1, compile_step=True, callbacks=[callback])
    with pytest.raises(ConfigurationError, match=rf"callback Watches_{hook} overrides {hook}"):
        trainer.fit(MLPModule())


def test_manual_optimization_refused(tmp_path: Path) -> None:
    module = MLPModule()
    module.automatic_optimization = False
    with pytest.raises(ConfigurationError, match="uses manual optimization"):
        quiet_trainer(tmp_path, max_steps=1, compile_step=True).fit(module)


class LBFGSModule(MLPModule):
    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=2)


def test_an_optimizer_that_evaluates_its_closure_refused(tmp_path: Path) -> None:
    """LBFGS evaluates the loss several times per step (accelkit now steps it so, as Lightning); the captured step
    runs the loss once, so compile_step refuses it by name."""
    trainer = quiet_trainer(tmp_path, max_steps=1, compile_step=True)
    with pytest.raises(ConfigurationError, match=r"LBFGS\.step\(\) evaluates the loss several times"):
        trainer.fit(LBFGSModule())
    assert trainer.global_step == 0


class OwnStep(SingleDeviceStrategy):
    """A single-device strategy that steps the optimizer its own way."""

    def optimizer_step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step()


def test_strategy_that_changes_the_step_refused(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, max_steps=1, compile_step=True, strategy=OwnStep())
    with pytest.raises(ConfigurationError, match=r"strategy OwnStep \(it overrides optimizer_step\)"):
        trainer.fit(MLPModule())


def test_precision_with_a_scaler_refused(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, max_steps=1, compile_step=True,
                            plugins=[MixedPrecision(dtype=torch.float16, scaler=True)])
    with pytest.raises(ConfigurationError, match="with a gradient scaler"):
        trainer.fit(MLPModule())


def test_profiler_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="profiler=SimpleProfiler"):
        quiet_trainer(tmp_path, max_steps=1, compile_step=True, profiler="simple").fit(MLPModule())


def test_every_reason_reported_together(tmp_path: Path) -> None:
    callback = type("Watches", (accelkit.Callback,), {"on_after_backward": lambda self, *args: None})()
    trainer = quiet_trainer(tmp_path, max_steps=1, compile_step=True, callbacks=[callback])
    with pytest.raises(ConfigurationError) as info:
        trainer.fit(_overriding("on_before_backward"))
    assert len(info.value.problems) == 2


@pytest.mark.parametrize("value, words", [
    ("yes", "compile_step='yes' is not accepted: compile_step takes True, False, or a dict"),
    ({"mode": "reduce-overhead", "fulgraph": True}, "torch.compile does not take (fulgraph)"),
    ({"disable": True}, "pass compile_step=False for the eager step"),
])
def test_bad_compile_step_values_refused(tmp_path: Path, value: Any, words: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        quiet_trainer(tmp_path, compile_step=value)
    assert words in str(info.value)


def test_compile_step_values() -> None:
    assert compile_options(False) is None and compile_options(None) is None
    assert compile_options(True) == {}
    options = {"mode": "reduce-overhead", "fullgraph": True}
    assert compile_options(options) == options and compile_options(options) is not options


# ------------------------------------------------------------------------------------------------- benchmark
@pytest.mark.slow
def test_benchmark_runs_on_cpu_in_a_tiny_configuration(prewarmed: Prewarmed) -> None:
    """``benchmarks/bench_captured.py --tiny`` prints, for both workloads, the eager Trainer's and the captured
    step's ratio to the hand loop (on a CPU: that it runs, not a speed), and that the captured step compiles what
    the hand-compiled loop compiles. (The script runs forked from the prewarmed interpreter: its subject is the
    runs, not importing torch.)"""
    from helpers.guards import REPO, child_env

    script = REPO / "benchmarks" / "bench_captured.py"
    done = prewarmed.run([str(script), "--device", "cpu", "--tiny", "--rounds", "2", "--steps", "3", "--warmup", "2",
                          "--hand-compiled"], cwd=REPO, env=child_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("device: CPU;") and "2 rounds, order rotated" in lines[0]
    for label in ("tiny MLP 32-64-4, batch 64: hand loop", "1-layer transformer d32, seq 16, batch 4: hand loop"):
        at = next(i for i, line in enumerate(lines) if line.startswith(label))
        assert lines[at + 1].split()[0] == "accelkit" and "x the hand loop (rounds " in lines[at + 1]
        assert lines[at + 2].split()[:2] == ["accelkit", "compile_step=True"]
        assert "x the hand loop (rounds " in lines[at + 2]
        # what the captured step compiled is what the hand-compiled loop compiles (graphs, graph breaks), and
        # nothing is compiled during the timed steps
        compiled = {line.split(" compiled: ")[0].strip(): line.split(" compiled: ")[1]
                    for line in lines[at:at + 7] if " compiled: " in line}
        assert compiled["accelkit compile_step=True"] == compiled["hand, torch.compile()"]
        assert compiled["accelkit compile_step=True"].endswith("during the timed steps 0 frames compiled, 0 CUDA "
                                                                "graphs recorded")


# ------------------------------------------------------------------------------------------------- traced only
# torch.compile's "eager" backend traces the step as the captured step does but builds no kernels: quick checks of
# what the tracing must keep (the precision's autocast, self.log under fullgraph=True, a skipped batch).
TRACED = {"backend": "eager", "fullgraph": True}


@pytest.mark.slow
def test_precision_context_and_log_kept_in_one_graph(tmp_path: Path) -> None:
    results = []
    for compile_step in (False, TRACED):
        module = MLPModule("adamw")
        trainer = quiet_trainer(tmp_path, max_steps=5, precision="bf16-mixed", compile_step=compile_step,
                                enable_model_summary=False)
        trainer.fit(module)
        results.append(([p.detach().clone() for p in module.parameters()], dict(trainer.callback_metrics)))
    (eager, eager_metrics), (traced, traced_metrics) = results
    for e, t in zip(eager, traced, strict=True):
        torch.testing.assert_close(t, e)
    assert traced_metrics.keys() == eager_metrics.keys() and "train_loss_step" in traced_metrics
    for name, value in eager_metrics.items():
        torch.testing.assert_close(traced_metrics[name], value)


class CompiledRegions(accelkit.Callback):
    """From step ``start`` to the end of the fit: the compiled frames entered (torch.profiler's ``Torch-Compiled
    Region`` events) and the frames ``torch.compile`` compiled."""

    def __init__(self, start: int) -> None:
        self.start, self.regions, self.compiled = start, 0, 0
        self.profiler = torch.profiler.profile()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.start:
            self.compiled = -torch._dynamo.utils.counters["frames"]["total"]
            self.profiler.__enter__()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.profiler.__exit__(None, None, None)
        self.compiled += torch._dynamo.utils.counters["frames"]["total"]
        self.regions = sum(event.name.startswith("Torch-Compiled Region") for event in self.profiler.events())


def hand_compiled_counts(steps: int, start: int) -> tuple[float, int]:
    """The hand loop a user would compile (its loss and ``optimizer.step``, each with ``torch.compile``) on
    :class:`MLPModule`'s network and data: compiled frames entered per step after ``start``, and graph breaks."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    module = MLPModule("adamw")
    optimizer = module.configure_optimizers()
    loss_of = torch.compile(lambda x, y: F.mse_loss(module.net(x), y), **TRACED)
    step = torch.compile(optimizer.step, backend="eager")
    batches = iter(module.train_dataloader())

    def train(count: int) -> None:
        for _ in range(count):
            x, y = next(batches)
            loss = loss_of(x, y)
            optimizer.zero_grad()
            loss.backward()
            step()
    train(start)
    with torch.profiler.profile() as profiler:
        train(steps - start)
    regions = sum(event.name.startswith("Torch-Compiled Region") for event in profiler.events())
    return regions / (steps - start), sum(torch._dynamo.utils.counters["graph_break"].values())


@pytest.mark.slow
def test_as_many_compiled_frames_per_step_as_the_hand_compiled_loop(tmp_path: Path) -> None:
    """Per step the captured step enters the compiled frames a hand-compiled loop enters (its forward call and
    the optimizer's step: no frame of its own around them), breaks the graph where the hand loop does (in torch's
    optimizer only), and compiles nothing after its first steps."""
    hand_per_step, hand_breaks = hand_compiled_counts(13, 3)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    regions = CompiledRegions(3)
    trainer = quiet_trainer(tmp_path, max_steps=13, compile_step={"backend": "eager"}, callbacks=[regions],
                            enable_model_summary=False)
    trainer.fit(MLPModule("adamw"))
    assert regions.regions / 10 == hand_per_step
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == hand_breaks
    assert regions.compiled == 0


@pytest.mark.slow
def test_scheduler_without_clipping_steps_as_eager(tmp_path: Path) -> None:
    """Without clipping the optimizer's own ``step`` is compiled, the scheduler's wrapper around it included: the
    learning rates and weights are the eager fit's."""
    results = []
    for compile_step in (False, {"backend": "eager"}):
        torch._dynamo.reset()
        module = MLPModule("adamw", scheduler=True)
        quiet_trainer(tmp_path, max_steps=6, compile_step=compile_step, enable_model_summary=False).fit(module)
        results.append((module.lrs, [p.detach().clone() for p in module.parameters()]))
    (eager_lrs, eager), (lrs, weights) = results
    assert lrs == eager_lrs and len(lrs) == 6 and lrs[-1] < lrs[0]  # the scheduler stepped the rate
    for e, w in zip(eager, weights, strict=True):
        torch.testing.assert_close(w, e)


class SkipsABatch(MLPModule):
    """Returns ``None`` (Lightning's "skip this batch") for batch 1."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return None if batch_idx == 1 else super().training_step(batch, batch_idx)


@pytest.mark.slow
def test_skipped_batch_refused_by_name(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, max_steps=5, compile_step={"backend": "eager"}, enable_model_summary=False)
    with pytest.raises(RuntimeError, match=r"SkipsABatch.training_step returned None for batch 1: the captured step"):
        trainer.fit(SkipsABatch())
    assert trainer.global_step == 1


def test_accumulation_refused_where_graphs_replay(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, max_steps=1, accumulate_grad_batches=2, compile_step={"mode": "reduce-overhead"})
    with pytest.raises(ConfigurationError, match=r"accumulate_grad_batches=2 with compile_step=\{'mode': "
                                                 r"'reduce-overhead'\}: a mode that replays graphs"):
        trainer.fit(MLPModule())


# ------------------------------------------------------------------------------------------------- resuming
class OptimizerAtEnd(accelkit.Callback):
    """The optimizer as the fit leaves it: its groups' settings and where and how its step counters are kept."""

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        optimizer = trainer.optimizers[0]
        self.groups = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
        self.steps = [(float(s["step"]), s["step"].dtype, s["step"].device) for s in optimizer.state.values()]


def _captured_adamw_fit(tmp_path: Path, ckpt_path: Path | None = None, compile_step: Any = True,
                        accelerator: str = "cpu") -> dict[str, Any]:
    """8 steps of :class:`MLPModule` with AdamW, captured with inductor; a checkpoint every 4 steps."""
    torch._dynamo.reset()
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    module, end = MLPModule("adamw"), OptimizerAtEnd()
    saves = accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "saved", every_n_train_steps=4, save_top_k=-1)
    trainer = quiet_trainer(tmp_path, max_steps=8, compile_step=compile_step, callbacks=[end, saves],
                            enable_checkpointing=True, enable_model_summary=False, accelerator=accelerator)
    trainer.fit(module, ckpt_path=ckpt_path)
    return {"weights": [p.detach().clone() for p in module.parameters()], "groups": end.groups, "steps": end.steps,
            "graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before}


@pytest.fixture(scope="module")
def uninterrupted_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The uninterrupted captured AdamW fit both resume tests compare with (one fit: the same for both), and its
    step-4 checkpoint, which the tests read and never change."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    return _captured_adamw_fit(folder), next((folder / "saved").glob("*step=4.ckpt"))


@pytest.mark.slow
@pytest.mark.parametrize("written_by", ["this_fit", "a_fit_whose_optimizer_was_capturable"])
def test_a_resumed_captured_fit_equals_the_uninterrupted_one(
        tmp_path: Path, uninterrupted_fit: tuple[dict[str, Any], Path], written_by: str) -> None:
    """A captured fit resumed from its step-4 checkpoint ends as the uninterrupted fit: the same weights, the same
    graphs compiled, and its optimizer as a fresh fit's compiled step makes it (``capturable`` and the step
    counters), whatever the checkpoint's optimizer said: one written where the compiled step made AdamW
    capturable (a GPU) says ``capturable=True``, which a fresh fit here does not get."""
    uninterrupted, checkpoint = uninterrupted_fit
    if written_by != "this_fit":
        saved = torch.load(checkpoint, weights_only=False)
        for group in saved["optimizer_states"][0]["param_groups"]:
            group["capturable"] = True
        checkpoint = tmp_path / checkpoint.name  # a changed copy: the fixture's checkpoint stays as written
        torch.save(saved, checkpoint)
    resumed = _captured_adamw_fit(tmp_path / "resumed", checkpoint)
    assert resumed["graphs"] == uninterrupted["graphs"] >= 2
    for u, r in zip(uninterrupted["weights"], resumed["weights"], strict=True):
        torch.testing.assert_close(r, u, rtol=0, atol=0)
    assert resumed["groups"] == uninterrupted["groups"]
    assert resumed["steps"] == uninterrupted["steps"] and uninterrupted["steps"][0][0] == 8


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_a_captured_fit_resumed_from_an_eager_checkpoint_gets_capturable_adamw_on_a_gpu(tmp_path: Path) -> None:
    """On a GPU the compiled step makes a fresh AdamW capturable (its step counters on the device); a captured fit
    resumed from an eager fit's checkpoint (``capturable=False``, counters on the host) gets the same."""
    uninterrupted = _captured_adamw_fit(tmp_path / "uninterrupted", accelerator="cuda")
    _captured_adamw_fit(tmp_path / "eager", compile_step=False, accelerator="cuda")
    checkpoint = next((tmp_path / "eager" / "saved").glob("*step=4.ckpt"))
    assert not torch.load(checkpoint, weights_only=False)["optimizer_states"][0]["param_groups"][0]["capturable"]
    resumed = _captured_adamw_fit(tmp_path / "resumed", checkpoint, accelerator="cuda")
    assert uninterrupted["groups"][0]["capturable"] is True
    assert resumed["groups"] == uninterrupted["groups"]
    assert resumed["steps"] == uninterrupted["steps"] and uninterrupted["steps"][0][2].type == "cuda"
    assert resumed["graphs"] == uninterrupted["graphs"]
    for u, r in zip(uninterrupted["weights"], resumed["weights"], strict=True):
        torch.testing.assert_close(r, u, rtol=1e-4, atol=1e-5)
