"""BaseFinetuning / BackboneFinetuning, GradientAccumulationScheduler and StochasticWeightAveraging: their
helpers, their argument checks, and what each does to a real fit on one process (references computed here with
plain torch). The Lightning-style programs in ``tests/conformance/`` (finetuning, accumulation, swa) run the
same callbacks on ``cpu`` and ``ddp_spawn``."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import SWALR, update_bn
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from accelkit import ConfigurationError
from accelkit.callbacks import (
    BackboneFinetuning,
    BaseFinetuning,
    Callback,
    GradientAccumulationScheduler,
    ModelCheckpoint,
    StochasticWeightAveraging,
)

SAMPLES, BATCH = 32, 8  # 4 batches per epoch


def dataset(seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, 4, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 1.0)


def loader() -> DataLoader:
    return DataLoader(dataset(), batch_size=BATCH)


class Net(accelkit.Module):
    """A backbone (with batch norm when ``bn``) and a head; the optimizer takes the trainable parameters."""

    def __init__(self, bn: bool = True, momentum: float = 0.0, scheduler: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        layers = [nn.Linear(4, 8)] + ([nn.BatchNorm1d(8)] if bn else []) + [nn.Tanh()]
        self.backbone = nn.Sequential(*layers)
        self.head = nn.Linear(8, 1)
        self.momentum, self.scheduler = momentum, scheduler

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> object:
        optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1,
                                    momentum=self.momentum)
        if self.scheduler:
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)]
        return optimizer


def trainer(tmp_path: Path, callbacks: list, max_epochs: int, **kwargs: object) -> accelkit.Trainer:
    kwargs.setdefault("enable_checkpointing", False)
    return accelkit.Trainer(max_epochs=max_epochs, callbacks=callbacks, accelerator="cpu", devices=1,
                            enable_progress_bar=False, enable_model_summary=False, logger=False,
                            num_sanity_val_steps=0, default_root_dir=tmp_path, **kwargs)


def weights(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key].float(), b[key].float(), atol=atol), (key, a[key], b[key])


class Groups(Callback):
    """Records, at each epoch end, the optimizer's groups (count and learning rates)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, list[float]]] = []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        groups = trainer.optimizers[0].param_groups
        self.seen.append((len(groups), [g["lr"] for g in groups]))


# =========================================================================== BaseFinetuning helpers
def test_freeze_keeps_batch_norm_trainable_unless_train_bn_is_false() -> None:
    net = Net()
    BaseFinetuning.freeze(net.backbone)
    linear, norm = net.backbone[0], net.backbone[1]
    assert not any(p.requires_grad for p in linear.parameters())
    assert all(p.requires_grad for p in norm.parameters()) and norm.track_running_stats
    BaseFinetuning.freeze(net.backbone, train_bn=False)
    assert not any(p.requires_grad for p in net.backbone.parameters())
    assert norm.track_running_stats is False  # a frozen batch norm stops tracking statistics
    assert list(BaseFinetuning.filter_params(net.backbone, requires_grad=False)) == list(net.backbone.parameters())
    BaseFinetuning.make_trainable(net.backbone)
    assert all(p.requires_grad for p in net.backbone.parameters()) and norm.track_running_stats


def test_flatten_modules_takes_modules_dicts_and_nested_lists_once() -> None:
    net = Net()
    flat = BaseFinetuning.flatten_modules([net.backbone, {"head": net.head}, [net.head]])
    assert flat == [net.backbone[0], net.backbone[1], net.backbone[2], net.head]
    with pytest.raises(TypeError, match="expected a torch.nn.Module or an iterable of modules, got int"):
        BaseFinetuning.flatten_modules([net.head, 3])


def test_unfreeze_and_add_param_group_divides_the_first_groups_lr() -> None:
    net = Net(bn=False)
    BaseFinetuning.freeze(net.backbone)
    optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, net.parameters()), lr=0.5)
    BaseFinetuning.unfreeze_and_add_param_group(net.backbone, optimizer, initial_denom_lr=5.0)
    assert len(optimizer.param_groups) == 2
    assert optimizer.param_groups[1]["lr"] == pytest.approx(0.1)
    assert optimizer.param_groups[1]["params"] == list(net.backbone.parameters())
    with pytest.raises(ValueError, match=r"initial_denom_lr=0.*must be > 0"):
        BaseFinetuning.unfreeze_and_add_param_group(net.head, optimizer, initial_denom_lr=0)


def test_parameters_already_optimized_are_skipped_with_a_warning_only_when_they_were_frozen() -> None:
    net = Net()
    BaseFinetuning.freeze(net.backbone)  # batch norm stays trainable, and the optimizer has it
    optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, net.parameters()), lr=0.1)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BaseFinetuning.unfreeze_and_add_param_group(net.backbone, optimizer, lr=0.01)
    assert optimizer.param_groups[1]["params"] == list(net.backbone[0].parameters())

    frozen = Net(bn=False)
    BaseFinetuning.freeze(frozen.backbone)
    everything = torch.optim.SGD(frozen.parameters(), lr=0.1)  # the mistake: frozen parameters optimized too
    with pytest.warns(UserWarning, match="2 of the 2 parameters to unfreeze are already in a parameter group"):
        BaseFinetuning.unfreeze_and_add_param_group(frozen.backbone, everything)
    assert len(everything.param_groups) == 1


def test_base_methods_must_be_overridden_and_subclasses_may_skip_init() -> None:
    class NoInit(BaseFinetuning):
        def __init__(self) -> None:  # as Lightning's older docs show: no super().__init__()
            self.milestone = 1

    callback = NoInit()
    with pytest.raises(NotImplementedError, match="must override freeze_before_training"):
        callback.freeze_before_training(Net())
    with pytest.raises(NotImplementedError, match="must override finetune_function"):
        callback.finetune_function(Net(), 0, torch.optim.SGD(Net().parameters(), lr=0.1))
    assert callback.state_dict() == {"internal_optimizer_metadata": {}}


def test_backbone_finetuning_checks_its_arguments_and_the_module() -> None:
    with pytest.raises(ConfigurationError) as info:
        BackboneFinetuning(unfreeze_backbone_at_epoch=-1, lambda_func=3, backbone_initial_ratio_lr=0,
                           backbone_initial_lr="x")
    text = str(info.value)
    for part in ("unfreeze_backbone_at_epoch=-1", "lambda_func=3", "backbone_initial_ratio_lr=0",
                 "backbone_initial_lr='x'"):
        assert part in text

    class NoBackbone(Net):
        def __init__(self) -> None:
            super().__init__()
            self.trunk = self.backbone
            self.backbone = None

    with pytest.raises(ConfigurationError, match=r"NoBackbone.backbone \(found NoneType\)"):
        BackboneFinetuning().freeze_before_training(NoBackbone())


# =========================================================================== BackboneFinetuning in a fit
def test_backbone_joins_the_optimizer_at_its_epoch_and_its_lr_grows(tmp_path: Path) -> None:
    net, groups = Net(), Groups()
    start = weights(net.backbone[0])
    finetuning = BackboneFinetuning(unfreeze_backbone_at_epoch=2, lambda_func=lambda epoch: 3.0)

    class BackboneFrozenUntil2(Callback):
        def on_train_epoch_end(self, trainer, pl_module) -> None:
            moved = not torch.equal(pl_module.backbone[0].weight, start["weight"])
            assert moved == (trainer.current_epoch >= 2), trainer.current_epoch

    trainer(tmp_path, [finetuning, groups, BackboneFrozenUntil2()], max_epochs=5).fit(net, loader())
    assert [count for count, _ in groups.seen] == [1, 1, 2, 2, 2]
    backbone_lrs = [lrs[1] for count, lrs in groups.seen if count == 2]
    # 0.1 x 0.1 at the milestone, x3 each epoch after it, capped at the head's 0.1 (should_align)
    assert backbone_lrs == pytest.approx([0.01, 0.03, 0.09])
    assert finetuning.previous_backbone_lr == pytest.approx(0.09)
    assert all(p.requires_grad for p in net.backbone.parameters())
    metadata = finetuning.state_dict()["internal_optimizer_metadata"]
    assert [group["params"] for group in metadata[0]][1] == ["backbone.0.weight", "backbone.0.bias"]


def test_a_resume_after_the_milestone_continues_with_the_grown_groups(tmp_path: Path) -> None:
    """The uninterrupted run and the run resumed from the checkpoint of epoch 2 (the backbone unfroze at epoch
    1) end with the same weights: the groups are rebuilt before the optimizer's momentum is loaded into them,
    and the backbone trains again after the resume."""
    def callbacks() -> list:
        return [BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 1.5)]

    full = Net(momentum=0.9)
    every_epoch = ModelCheckpoint(dirpath=tmp_path / "ckpts", filename="{epoch}", save_top_k=-1)
    trainer(tmp_path / "a", callbacks() + [every_epoch], max_epochs=4, enable_checkpointing=True).fit(full, loader())

    seen = {}

    class AtTrainStart(Callback):  # after the checkpoint's training state is restored
        def on_train_start(self, trainer, pl_module) -> None:
            optimizer = trainer.optimizers[0]
            seen["groups"] = len(optimizer.param_groups)
            seen["lr"] = optimizer.param_groups[1]["lr"]
            seen["momentum"] = all("momentum_buffer" in optimizer.state[p] for p in optimizer.param_groups[1]["params"])
            seen["trainable"] = all(p.requires_grad for p in pl_module.backbone.parameters())

    resumed = Net(momentum=0.9)
    trainer(tmp_path / "b", callbacks() + [AtTrainStart()], max_epochs=4).fit(
        resumed, loader(), ckpt_path=tmp_path / "ckpts" / "epoch=2.ckpt")
    assert seen == {"groups": 2, "lr": pytest.approx(0.1 * 0.1 * 1.5), "momentum": True, "trainable": True}
    assert_same(weights(resumed), weights(full))


def test_a_checkpoint_of_another_model_is_named(tmp_path: Path) -> None:
    callback = BackboneFinetuning(unfreeze_backbone_at_epoch=0)
    callback.load_state_dict({"internal_optimizer_metadata": {0: [
        {"lr": 0.1, "params": ["head.weight", "head.bias"]}, {"lr": 0.01, "params": ["trunk.0.weight"]}]},
        "previous_backbone_lr": 0.01})
    with pytest.raises(ValueError, match=r"name parameters \['trunk.0.weight'\] that Net does not have"):
        trainer(tmp_path, [callback], max_epochs=1).fit(Net(), loader())


# =========================================================================== GradientAccumulationScheduler
@pytest.mark.parametrize("scheduling, error, text", [
    ({}, TypeError, r"scheduling=\{\}\): the schedule is empty"),
    ([(0, 2)], TypeError, r"expected a dict \{epoch: factor\}"),
    ({-1: 2, "3": 2}, ConfigurationError, r"the epochs \[-1, '3'\] are not ints >= 0"),
    ({0: 0, 2: 1.5}, ConfigurationError, r"the factors \[0, 1.5\] are not ints >= 1"),
])
def test_accumulation_schedule_refuses_bad_entries(scheduling: object, error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        GradientAccumulationScheduler(scheduling)


def test_accumulation_factor_by_epoch() -> None:
    schedule = GradientAccumulationScheduler({2: 3, 5: 2})
    assert schedule.scheduling == {0: 1, 2: 3, 5: 2}
    assert [schedule.get_accumulate_grad_batches(e) for e in range(7)] == [1, 1, 3, 3, 3, 2, 2]
    assert schedule.going_to_accumulate_grad_batches()
    assert not GradientAccumulationScheduler({0: 1}).going_to_accumulate_grad_batches()


def test_the_schedule_decides_the_steps_per_epoch_and_the_weights_match_plain_torch(tmp_path: Path) -> None:
    """8 batches per epoch with factors 1, 2, 3 (the last window of an epoch is cut short), 4: the optimizer steps
    8, 4, 3, 2 times; the weights equal a plain torch loop accumulating the same way (loss / factor)."""
    data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=2)
    steps: dict[int, int] = {}

    class CountSteps(Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
            steps[trainer.current_epoch] = steps.get(trainer.current_epoch, 0) + 1

    net = Net(bn=False)
    reference = copy.deepcopy(net)
    schedule = GradientAccumulationScheduler({1: 2, 2: 3, 3: 4})
    fit = trainer(tmp_path, [schedule, CountSteps()], max_epochs=4)
    fit.fit(net, data)
    assert steps == {0: 8, 1: 4, 2: 3, 3: 2}
    assert fit.global_step == 17 and fit.accumulate_grad_batches == 4

    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for epoch in range(4):
        factor = schedule.get_accumulate_grad_batches(epoch)
        batches = list(data)
        for index, (x, y) in enumerate(batches):
            (F.mse_loss(reference(x), y) / factor).backward()
            if (index + 1) % factor == 0 or index == len(batches) - 1:
                optimizer.step()
                optimizer.zero_grad()
    assert_same(weights(net), weights(reference))


def test_the_scheduler_and_trainer_accumulation_are_not_combined(tmp_path: Path) -> None:
    fit = trainer(tmp_path, [GradientAccumulationScheduler({1: 2})], max_epochs=2, accumulate_grad_batches=3)
    with pytest.raises(ConfigurationError, match=r"Trainer\(accumulate_grad_batches=3\) and a "
                                                 r"GradientAccumulationScheduler both set the accumulation"):
        fit.fit(Net(), loader())


def test_a_second_fit_on_the_same_trainer_is_not_mistaken_for_a_trainer_setting(tmp_path: Path) -> None:
    fit = trainer(tmp_path, [GradientAccumulationScheduler({1: 2})], max_epochs=2)
    fit.fit(Net(), loader())
    assert fit.accumulate_grad_batches == 2
    fit.fit(Net(), loader())  # the 2 is the callback's own
    assert fit.global_step == 4 + 2


def test_the_scheduler_needs_automatic_optimization(tmp_path: Path) -> None:
    class Manual(Net):
        automatic_optimization = False

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()
            loss = super().training_step(batch, batch_idx)
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()

    with pytest.raises(RuntimeError, match="GradientAccumulationScheduler needs automatic optimization, but Manual"):
        trainer(tmp_path, [GradientAccumulationScheduler({1: 2})], max_epochs=2).fit(Manual(), loader())


def test_an_overridden_optimizer_step_is_warned_about(tmp_path: Path) -> None:
    class OwnStep(Net):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step(closure=optimizer_closure)

    with pytest.warns(UserWarning, match="OwnStep overrides optimizer_step, and the GradientAccumulationScheduler"):
        trainer(tmp_path, [GradientAccumulationScheduler({1: 2})], max_epochs=1).fit(OwnStep(), loader())


# =========================================================================== StochasticWeightAveraging
def test_swa_checks_its_arguments() -> None:
    with pytest.raises(ConfigurationError) as info:
        StochasticWeightAveraging(swa_lrs=[0.1, -1.0], swa_epoch_start=1.5, annealing_epochs=-2,
                                  annealing_strategy="exp", avg_fn=3, device="nowhere")
    text = str(info.value)
    for part in ("swa_epoch_start=1.5", "swa_lrs=[0.1, -1.0]", "annealing_epochs=-2", "annealing_strategy='exp'",
                 "avg_fn=3", "device='nowhere'"):
        assert part in text, part
    with pytest.raises(ConfigurationError, match=r"swa_epoch_start=0: an int must be >= 1"):
        StochasticWeightAveraging(0.1, swa_epoch_start=0)


class EpochStartWeights(Callback):
    """The weights at the start of every epoch, the learning rate of each epoch's first batch."""

    def __init__(self) -> None:
        self.weights: list[dict[str, torch.Tensor]] = []
        self.lrs: list[float] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.weights.append({k: v.detach().clone() for k, v in pl_module.named_parameters()})

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == 0:
            self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def swa_reference_lrs(epochs: int, start: int, swa_lr: float, anneal: int) -> list[float]:
    """The learning rates SWALR gives from epoch ``start`` on (plain torch), 0.1 before."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    lrs = [0.1] * start
    scheduler = SWALR(optimizer, swa_lr=swa_lr, anneal_epochs=anneal, anneal_strategy="cos")
    for _ in range(start, epochs):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def test_swa_swaps_in_the_average_of_the_epoch_start_weights(tmp_path: Path) -> None:
    net, seen = Net(bn=False), EpochStartWeights()
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=3, annealing_epochs=2)
    trainer(tmp_path, [swa, seen], max_epochs=6).fit(net, loader())
    assert swa.swa_start == 2 and swa.swa_end == 5 and int(swa.n_averaged) == 4
    averaged = {k: torch.stack([w[k] for w in seen.weights[2:]]).mean(0) for k in seen.weights[0]}
    assert_same({k: v.detach() for k, v in net.named_parameters()}, averaged)
    assert seen.lrs == pytest.approx(swa_reference_lrs(6, 2, 0.02, 2))


def test_swa_as_a_fraction_of_max_epochs_and_the_batch_norm_statistics(tmp_path: Path) -> None:
    """swa_epoch_start=0.5 of 4 epochs: the weights at the start of epochs 1-3 are averaged; the batch-norm
    statistics are those torch's update_bn computes for the averaged weights over the training data."""
    net, seen = Net(), EpochStartWeights()
    momentum = net.backbone[1].momentum
    trainer(tmp_path, [StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=0.5), seen], max_epochs=4).fit(
        net, loader())
    averaged = {k: torch.stack([w[k] for w in seen.weights[1:]]).mean(0) for k in seen.weights[0]}
    assert_same({k: v.detach() for k, v in net.named_parameters()}, averaged)
    reference = copy.deepcopy(net)
    update_bn([x for x, _ in loader()], reference)
    norm, expected = net.backbone[1], reference.backbone[1]
    assert torch.allclose(norm.running_mean, expected.running_mean, atol=1e-6)
    assert torch.allclose(norm.running_var, expected.running_var, atol=1e-6)
    assert int(norm.num_batches_tracked) == SAMPLES // BATCH
    assert norm.momentum == momentum  # given back after the pass


def test_swa_survives_a_resume_inside_the_averaging_window(tmp_path: Path) -> None:
    """Checkpoint after epoch 3 of 6 (averaging since epoch 2): the resumed fit continues the same average and
    the same SWALR schedule (the module's StepLR is replaced, not given SWALR's state)."""
    def swa() -> StochasticWeightAveraging:
        return StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=3, annealing_epochs=3)

    full = Net(scheduler=True, momentum=0.5)
    every_epoch = ModelCheckpoint(dirpath=tmp_path / "ckpts", filename="{epoch}", save_top_k=-1)
    trainer(tmp_path / "a", [swa(), every_epoch], max_epochs=6, enable_checkpointing=True).fit(full, loader())
    state = torch.load(tmp_path / "ckpts" / "epoch=3.ckpt", weights_only=False)["callbacks"]
    assert state["StochasticWeightAveraging"]["n_averaged"] == 2
    assert state["StochasticWeightAveraging"]["latest_update_epoch"] == 3

    resumed, callback = Net(scheduler=True, momentum=0.5), swa()
    fit = trainer(tmp_path / "b", [callback], max_epochs=6)
    fit.fit(resumed, loader(), ckpt_path=tmp_path / "ckpts" / "epoch=3.ckpt")
    assert int(callback.n_averaged) == 4
    assert isinstance(fit.lr_scheduler_configs[0].scheduler, SWALR)
    assert_same(weights(resumed), weights(full))


def test_swa_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    class TwoOptimizers(Net):
        automatic_optimization = False

        def training_step(self, batch, batch_idx):
            return None

        def configure_optimizers(self):
            return [torch.optim.SGD(self.head.parameters(), lr=0.1),
                    torch.optim.SGD(self.backbone.parameters(), lr=0.1)]

    with pytest.raises(ConfigurationError, match="needs automatic optimization"):
        trainer(tmp_path, [StochasticWeightAveraging(0.1)], max_epochs=2).fit(TwoOptimizers(), loader())
    with pytest.raises(ConfigurationError, match=r"needs Trainer\(max_epochs=N\) \(got max_epochs=-1\)"):
        trainer(tmp_path, [StochasticWeightAveraging(0.1)], max_epochs=-1, max_steps=3).fit(Net(), loader())
    with pytest.raises(ConfigurationError, match=r"gives 2 learning rates for the 1 parameter groups of SGD"):
        trainer(tmp_path, [StochasticWeightAveraging([0.1, 0.2], swa_epoch_start=1)], max_epochs=2).fit(
            Net(), loader())


def test_swa_warns_when_the_fit_stops_before_max_epochs(tmp_path: Path) -> None:
    net = Net(bn=False)
    with pytest.warns(UserWarning, match="training stopped at epoch 2 before max_epochs=4, so the averaged weights "
                                         "are not swapped in"):
        trainer(tmp_path, [StochasticWeightAveraging(0.1, swa_epoch_start=1)], max_epochs=4, max_steps=8).fit(
            net, loader())
    with pytest.warns(UserWarning, match=r"swa_epoch_start=9\) starts after the last epoch"):
        trainer(tmp_path, [StochasticWeightAveraging(0.1, swa_epoch_start=9)], max_epochs=2).fit(Net(), loader())
