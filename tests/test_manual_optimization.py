"""Manual optimization (issue 8, item 5), as Lightning documents it: ``automatic_optimization = False``,
``self.optimizers()``, ``self.lr_schedulers()``, ``self.manual_backward()`` (through the precision, with the
backward hooks), ``toggle_optimizer``/``untoggle_optimizer``, ``self.clip_gradients()``, ``global_step`` counting
``opt.step()`` calls, and a GAN-style two-optimizer step on two ``ddp_fork`` ranks.

Every test is a real fit on the CPU with tiny data; each would fail on the old behaviour (the Trainer ignored
``automatic_optimization`` and back-propagated the returned loss itself).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.module.optimizers import Optimizer as WrappedOptimizer  # noqa: E402
from helpers.guards import child_env  # noqa: E402
from helpers.models import WeightDump, quiet_trainer, regression_data  # noqa: E402
from helpers.prewarmed import Prewarmed  # noqa: E402

QUIET = dict(enable_model_summary=False, num_sanity_val_steps=0)


def loader(n: int = 16, batch_size: int = 4, seed: int = 0) -> DataLoader:
    return DataLoader(regression_data(n, seed=seed), batch_size=batch_size)


class Manual(accelkit.Module):
    """Manual optimization of a linear regression with SGD: one zero_grad/backward/step per batch."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.lr = lr
        self.records: list[dict[str, Any]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        x, y = batch
        loss = F.mse_loss(self(x), y)
        # What one backward of this loss gives, computed independently of the Trainer.
        expected = torch.autograd.grad(loss, [self.layer.weight], retain_graph=True)[0].clone()
        before = self.layer.weight.detach().clone()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.records.append({"expected": expected, "before": before,
                             "after_step": self.layer.weight.detach().clone()})
        return loss  # Lightning ignores it for optimization: it must not be back-propagated again

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class GradAfterBatch(accelkit.Callback):
    """Reads the gradient the Trainer leaves after each training batch."""

    def __init__(self) -> None:
        self.grads: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.grads.append(pl_module.layer.weight.grad.detach().clone())


def test_training_step_backpropagates_once(tmp_path):
    """The gradient after the batch is one backward of the loss (the old Trainer added a second one from the
    returned loss, doubling it), and the step is one SGD step with it."""
    model, spy = Manual(), GradAfterBatch()
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[spy], **QUIET)
    trainer.fit(model, loader())
    assert len(model.records) == len(spy.grads) == 4
    for record, grad in zip(model.records, spy.grads, strict=True):
        torch.testing.assert_close(grad, record["expected"], rtol=0, atol=1e-6)
        torch.testing.assert_close(record["after_step"], record["before"] - model.lr * record["expected"],
                                   rtol=0, atol=1e-6)
    # one opt.step() per batch: global_step counts them
    assert trainer.global_step == 4


def test_returned_loss_not_backpropagated_without_manual_backward(tmp_path):
    """A manual training_step that computes a loss but never calls manual_backward leaves no gradient and the
    weights untouched: the Trainer does not optimize on its own."""

    class Idle(Manual):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return F.mse_loss(self(x), y)

    model = Idle()
    initial = model.layer.weight.detach().clone()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader())
    assert model.layer.weight.grad is None
    assert torch.equal(model.layer.weight.detach(), initial)
    assert trainer.global_step == 0


class TwoOptimizers(accelkit.Module):
    """Two sub-networks with an optimizer each (and a scheduler each), stepped by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.a = nn.Linear(4, 1)
        self.b = nn.Linear(4, 1)
        self.seen: dict[str, Any] = {}

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        opts = self.optimizers()
        scheds = self.lr_schedulers()
        if batch_idx == 0 and self.current_epoch == 0:
            self.seen["opts"] = opts
            self.seen["scheds"] = scheds
            self.seen["raw"] = self.optimizers(use_pl_optimizer=False)
        opt_a, opt_b = opts
        loss_a = F.mse_loss(self.a(x), y)
        opt_a.zero_grad()
        self.manual_backward(loss_a)
        opt_a.step()
        loss_b = F.mse_loss(self.b(x), y)
        opt_b.zero_grad()
        self.manual_backward(loss_b)
        opt_b.step()
        if self.trainer.is_last_batch:
            for sched in scheds:
                sched.step()

    def configure_optimizers(self) -> Any:
        opt_a = torch.optim.SGD(self.a.parameters(), lr=0.1)
        opt_b = torch.optim.SGD(self.b.parameters(), lr=0.2)
        return [opt_a, opt_b], [torch.optim.lr_scheduler.StepLR(opt_a, 1, gamma=0.5),
                                torch.optim.lr_scheduler.StepLR(opt_b, 1, gamma=0.1)]


def test_optimizers_and_lr_schedulers_lists_and_global_step(tmp_path):
    model = TwoOptimizers()
    trainer = quiet_trainer(tmp_path, max_epochs=2, **QUIET)
    trainer.fit(model, loader())
    opts, scheds, raw = model.seen["opts"], model.seen["scheds"], model.seen["raw"]
    assert isinstance(opts, list) and len(opts) == 2
    assert all(isinstance(o, WrappedOptimizer) for o in opts)
    assert [o.optimizer for o in opts] == trainer.optimizers == raw
    assert opts[0].param_groups is trainer.optimizers[0].param_groups  # attribute access reaches the optimizer
    assert isinstance(scheds, list) and len(scheds) == 2
    assert all(isinstance(s, torch.optim.lr_scheduler.StepLR) for s in scheds)
    # Schedulers are stepped only by the user in manual optimization (once per epoch here, 2 epochs).
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** 2)
    assert trainer.optimizers[1].param_groups[0]["lr"] == pytest.approx(0.2 * 0.1 ** 2)
    # global_step counts every opt.step() call: 2 optimizers x 4 batches x 2 epochs (as in Lightning)
    assert trainer.global_step == 16


def test_single_optimizer_and_scheduler_are_not_lists(tmp_path):
    seen: dict[str, Any] = {}

    class One(Manual):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            seen["opt"], seen["sched"] = self.optimizers(), self.lr_schedulers()
            super().training_step(batch, batch_idx)

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=self.lr)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1)}

    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(One(), loader())
    assert isinstance(seen["opt"], WrappedOptimizer) and seen["opt"].optimizer is trainer.optimizers[0]
    assert isinstance(seen["sched"], torch.optim.lr_scheduler.StepLR)
    # not stepped by the Trainer in manual optimization
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1)


def test_training_step_without_batch_idx(tmp_path):
    """``def training_step(self, batch)`` is accepted (Lightning inspects the signature)."""

    class NoIdx(Manual):
        def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
            return super().training_step(batch, 0)

    model = NoIdx()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader())
    assert trainer.global_step == 4 and len(model.records) == 4


def test_training_step_without_batch_idx_automatic(tmp_path):
    class Auto(accelkit.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 1)
            self.calls = 0

        def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
            self.calls += 1
            x, y = batch
            return F.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Auto()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader())
    assert model.calls == 4 and trainer.global_step == 4


class BackwardHooks(accelkit.Callback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        self.calls.append("cb_before")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self.calls.append("cb_after")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.calls.append("cb_before_step")


def test_manual_backward_through_bf16_precision_calls_backward_hooks(tmp_path):
    class Mixed(Manual):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[Any] = []

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            x, y = batch
            out = self(x)
            self.calls.append(("forward_dtype", out.dtype))
            loss = F.mse_loss(out.float(), y)
            self.calls.append(("loss", loss.detach().clone()))
            opt.zero_grad()
            self.manual_backward(loss)
            self.calls.append(("grad", self.layer.weight.grad is not None))
            opt.step()

        def on_before_backward(self, loss: torch.Tensor) -> None:
            self.calls.append(("before", loss.detach().clone()))

        def on_after_backward(self) -> None:
            self.calls.append(("after", self.layer.weight.grad is not None))

    model, spy = Mixed(), BackwardHooks()
    trainer = quiet_trainer(tmp_path, max_epochs=1, precision="bf16-mixed", callbacks=[spy], **QUIET)
    trainer.fit(model, loader(8))
    kinds = [c[0] for c in model.calls]
    assert kinds == ["forward_dtype", "loss", "before", "after", "grad"] * 2
    assert model.calls[0][1] == torch.bfloat16  # the forward ran under the precision's autocast
    assert torch.equal(model.calls[1][1], model.calls[2][1])  # on_before_backward got the loss
    assert model.calls[3][1] is True  # the gradient exists in on_after_backward
    assert spy.calls == ["cb_before", "cb_after", "cb_before_step"] * 2
    assert trainer.global_step == 2


def test_manual_backward_in_automatic_optimization_is_an_error(tmp_path):
    class Wrong(accelkit.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.mse_loss(self.layer(x), y)
            self.manual_backward(loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with pytest.raises(Exception, match="automatic_optimization"):
        quiet_trainer(tmp_path, max_epochs=1, **QUIET).fit(Wrong(), loader())


class Toggling(TwoOptimizers):
    """GAN-style toggling: ``a.bias`` is frozen by the user before training and must stay frozen."""

    def __init__(self) -> None:
        super().__init__()
        self.a.bias.requires_grad_(False)
        self.states: list[dict[str, bool]] = []

    def _state(self, tag: str) -> dict[str, Any]:
        return {"tag": tag, **{n: p.requires_grad for n, p in self.named_parameters()}}

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        opt_a, opt_b = self.optimizers()
        self.toggle_optimizer(opt_a)
        self.states.append(self._state("a"))
        loss_a = F.mse_loss(self.a(x) + self.b(x), y)
        opt_a.zero_grad()
        b_grad = None if self.b.weight.grad is None else self.b.weight.grad.clone()
        self.manual_backward(loss_a)
        # b was frozen: loss_a added nothing to its gradient (left from b's own step of the previous batch)
        assert (self.b.weight.grad is None) if b_grad is None else torch.equal(self.b.weight.grad, b_grad)
        opt_a.step()
        self.untoggle_optimizer(opt_a)
        self.states.append(self._state("untoggled_a"))
        with self.toggled_optimizer(opt_b):
            self.states.append(self._state("b"))
            loss_b = F.mse_loss(self.b(x), y)
            opt_b.zero_grad()
            self.manual_backward(loss_b)
            opt_b.step()
        self.states.append(self._state("untoggled_b"))

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.SGD(self.b.parameters(), lr=0.1)]


def test_toggle_and_untoggle_optimizer_restore_requires_grad(tmp_path):
    model = Toggling()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader(8))
    original = {"a.weight": True, "a.bias": False, "b.weight": True, "b.bias": True}
    for state in model.states:
        tag = state.pop("tag")
        if tag == "a":
            assert state == {"a.weight": True, "a.bias": False, "b.weight": False, "b.bias": False}
        elif tag == "b":
            assert state == {"a.weight": False, "a.bias": False, "b.weight": True, "b.bias": True}
        else:
            assert state == original, tag
    assert len(model.states) == 8
    assert {n: p.requires_grad for n, p in model.named_parameters()} == original
    assert trainer.global_step == 4


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_clip_gradients_bounds_the_gradients(tmp_path, algorithm):
    bound = 0.01

    class Clipped(Manual):
        def __init__(self) -> None:
            super().__init__()
            self.raw: list[float] = []
            self.clipped: list[float] = []

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            x, y = batch
            loss = F.mse_loss(self(x), y)
            opt.zero_grad()
            self.manual_backward(loss)
            self.raw.append(self._measure())
            self.clip_gradients(opt, gradient_clip_val=bound, gradient_clip_algorithm=algorithm)
            self.clipped.append(self._measure())
            opt.step()

        def _measure(self) -> float:
            grads = [p.grad for p in self.parameters()]
            if algorithm == "norm":
                return float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads])))
            return float(max(g.abs().max() for g in grads))

    model = Clipped()
    quiet_trainer(tmp_path, max_epochs=1, **QUIET).fit(model, loader())
    assert len(model.clipped) == 4
    assert min(model.raw) > 10 * bound  # the data gives large gradients, so clipping has work to do
    assert all(c <= bound * (1 + 1e-4) for c in model.clipped), model.clipped
    if algorithm == "norm":  # norm clipping scales down to the bound exactly
        assert model.clipped == pytest.approx([bound] * 4, rel=1e-4)


def test_gradient_clip_val_with_manual_optimization_is_a_clear_error(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, gradient_clip_val=0.5, **QUIET)
    with pytest.raises(Exception, match="gradient_clip_val") as info:
        trainer.fit(Manual(), loader())
    assert "manual" in str(info.value).lower() or "automatic_optimization" in str(info.value)
    assert "clip_gradients" in str(info.value)


def test_accumulate_grad_batches_with_manual_optimization_is_a_clear_error(tmp_path):
    """Lightning refuses ``accumulate_grad_batches`` with manual optimization (the user accumulates)."""
    trainer = quiet_trainer(tmp_path, max_epochs=1, accumulate_grad_batches=2, **QUIET)
    with pytest.raises(Exception, match="accumulate_grad_batches"):
        trainer.fit(Manual(), loader())


# ------------------------------------------------------------------------------------------ GAN on two ranks
class TinyGAN(accelkit.Module):
    """Lightning's GAN recipe at toy size: a generator and a discriminator, two optimizers, toggling, and
    ``manual_backward`` for each. Each rank sees a different shard of the data, so only gradients averaged
    across ranks keep the replicas identical."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.generator = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 4))
        self.discriminator = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        real, _ = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.shape[0], 2, generator=torch.Generator().manual_seed(batch_idx))
        ones = torch.ones(real.shape[0], 1)
        zeros = torch.zeros(real.shape[0], 1)

        self.toggle_optimizer(opt_g)
        fake = self(z)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        d_loss = (F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
                  + F.binary_cross_entropy_with_logits(self.discriminator(self(z).detach()), zeros)) / 2
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def configure_optimizers(self) -> Any:
        return [torch.optim.Adam(self.generator.parameters(), lr=1e-2),
                torch.optim.Adam(self.discriminator.parameters(), lr=1e-2)]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(32), batch_size=4)


class ManualOnShards(Manual):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(32), batch_size=4)


class ManualBatchNorm(ManualOnShards):
    """Manual optimization with a BatchNorm layer: records its running mean as each step begins."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(4)
        self.seen_means: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        self.seen_means.append(self.norm.running_mean.clone())
        x, y = batch
        batch = (self.norm(x), y)
        return super().training_step(batch, batch_idx)

    def on_train_end(self) -> None:
        torch.save(torch.stack(self.seen_means), Path(self.trainer.default_root_dir) / f"means{self.global_rank}.pt")


def run_ddp_scenario(root: str, kind: str) -> None:
    """Run in a process of its own by the tests below (forked from the prewarmed interpreter, which ran nothing on a
    GPU: its ``ddp_fork`` workers are forks of it). The claims are DDP's gradient and buffer synchronization under
    manual optimization, not the start method: ``ddp_fork`` pickles the run, wraps the module in each worker and hands
    the results back as ``ddp_spawn`` does, without two fresh interpreters importing torch (about 6 CPU-s).

    ``kind="gan"``: the GAN with toggling, whose backward passes leave the other network's parameters without
    gradients, so DDP needs ``find_unused_parameters=True`` (in Lightning too). ``kind="batchnorm"``: one optimizer,
    every parameter used, on plain ``ddp_fork``, with a batch-norm layer whose statistics each rank records.
    """
    model = TinyGAN() if kind == "gan" else ManualBatchNorm()
    strategy = "ddp_fork_find_unused_parameters_true" if kind == "gan" else "ddp_fork"
    initial = {k: v.detach().clone() for k, v in model.named_parameters()}  # the weights, not the statistics
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=2, logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                               default_root_dir=root, callbacks=[WeightDump(root)])
    trainer.fit(model)
    moved = any(not torch.equal(initial[k], v) for k, v in model.named_parameters())
    Path(root, "result.json").write_text(json.dumps({"global_step": trainer.global_step, "moved": moved,
                                                     "metrics": sorted(trainer.callback_metrics)}))


def ddp_scenario(root: Path, kind: str, prewarmed: Prewarmed) -> dict[str, Any]:
    """The scenario's caller forked from the prewarmed interpreter; its two workers forked from the caller."""
    code = f"import test_manual_optimization as t; t.run_ddp_scenario({str(root)!r}, {kind!r})"
    result = prewarmed.run(["-c", code], cwd=root, env=child_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((root / "result.json").read_text())


def assert_ranks_identical(root: Path, steps: int, keys: Any = None) -> None:
    """Both ranks took ``steps`` steps and hold the same values of ``keys`` of their state dict (every key if None)."""
    ranks = [torch.load(root / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == steps
    for key in ranks[0]["state_dict"] if keys is None else keys:
        torch.testing.assert_close(ranks[1]["state_dict"][key], ranks[0]["state_dict"][key], rtol=0, atol=1e-6,
                                   msg=lambda m, key=key: f"{key} differs across ranks: {m}")


@pytest.fixture(scope="module")
def manual_on_ddp(tmp_path_factory, prewarmed) -> tuple[Path, dict[str, Any]]:
    """One manual-optimization fit on plain ``ddp_fork`` (two ranks, 4 batches x 2 epochs, a batch-norm layer),
    read by the two tests below: its folder (each rank's weights and batch-norm statistics) and its outcome."""
    root = tmp_path_factory.mktemp("manual_ddp")
    return root, ddp_scenario(root, "batchnorm", prewarmed)


@pytest.mark.slow
def test_manual_step_on_ddp_ranks_identical(manual_on_ddp):
    """manual_backward inside training_step (which DDP's forward runs) still all-reduces the gradients, and the
    next batch's forward works (Lightning prepares DDP's reducer for each manual backward): every parameter (the
    linear layer's and the batch-norm layer's) ends equal on both ranks, although each rank trains on its own shard.
    (The batch-norm statistics, buffers, are the next test's: the last step's forward updates each rank's own.)"""
    root, outcome = manual_on_ddp
    assert outcome["global_step"] == 8 and outcome["moved"]
    assert_ranks_identical(root, 8, keys=[name for name, _ in ManualBatchNorm().named_parameters()])


@pytest.mark.slow
def test_gan_two_optimizers_on_ddp_ranks_identical(tmp_path, prewarmed):
    outcome = ddp_scenario(tmp_path, "gan", prewarmed)
    # 32 samples / 2 ranks / batch 4 = 4 batches per epoch, 2 epochs, 2 opt.step() per batch
    assert outcome["global_step"] == 16
    assert outcome["moved"]
    assert {"g_loss", "d_loss"} <= set(outcome["metrics"])
    assert_ranks_identical(tmp_path, 16)


@pytest.mark.slow
def test_manual_ddp_broadcasts_buffers_before_each_step(manual_on_ddp):
    """The manual step does not run inside DDP's forward, so the strategy broadcasts rank 0's buffers before it,
    as DDP's forward does (broadcast_buffers=True): every step starts with equal batch-norm statistics on both
    ranks, although each rank normalises its own shard."""
    root, _ = manual_on_ddp
    means = [torch.load(root / f"means{r}.pt", weights_only=True) for r in range(2)]
    assert means[0].shape[0] == 8  # 4 batches x 2 epochs
    assert not torch.equal(means[0][1], means[0][0])  # the statistics move
    torch.testing.assert_close(means[1], means[0], rtol=0, atol=0)
