"""accelkit.Fabric in one CPU process: composition, the wrappers, the step, collectives, logging, callbacks and
checkpoints (the multi-process behaviour is in test_fabric_processes.py)."""

from __future__ import annotations

import collections
import copy
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

import accelkit
from accelkit import Fabric
from accelkit.errors import ConfigurationError
from accelkit.fabric.wrappers import FabricDataLoader, FabricModule, FabricOptimizer
from accelkit.precision import MixedPrecision
from accelkit.strategies import SingleDeviceStrategy


def _data(n: int = 32) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


def _fabric(**kwargs: object) -> Fabric:
    return Fabric(accelerator="cpu", devices=1, **kwargs)


def test_fabric_is_exported_under_lightnings_names() -> None:
    import accelkit.fabric

    assert accelkit.Fabric is accelkit.fabric.Fabric
    assert accelkit.fabric.loggers.CSVLogger.__init__.__code__.co_varnames[1] == "root_dir"


def test_composition_is_the_trainers_own() -> None:
    with pytest.raises(ConfigurationError) as fabric_error:
        Fabric(accelerator="cpu", strategy="no_such_strategy")
    with pytest.raises(ConfigurationError) as trainer_error:
        accelkit.Trainer(accelerator="cpu", strategy="no_such_strategy")
    assert "no_such_strategy" in str(fabric_error.value)
    assert fabric_error.value.problems == trainer_error.value.problems
    fabric = _fabric(precision="bf16-mixed")
    assert fabric.device == torch.device("cpu") and fabric.world_size == 1 and fabric.global_rank == 0
    assert fabric.local_rank == 0 and fabric.node_rank == 0 and fabric.is_global_zero
    assert fabric.precision.name == "bf16-mixed" and fabric.strategy.precision is fabric.precision


def test_setup_wraps_module_and_shares_the_optimizers_parameter_groups() -> None:
    fabric = _fabric()
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)  # made before setup
    wrapped, fabric_optimizer = fabric.setup(model, optimizer)
    assert isinstance(wrapped, FabricModule) and wrapped.module is model
    assert isinstance(fabric_optimizer, FabricOptimizer) and isinstance(fabric_optimizer, torch.optim.SGD)
    assert wrapped.weight is model.weight
    wrapped.custom_flag = 3
    assert model.custom_flag == 3
    assert list(wrapped.state_dict()) == list(model.state_dict())
    loss = wrapped(torch.ones(2, 4)).sum()
    fabric.backward(loss)
    fabric_optimizer.step()
    scheduler.step()
    assert fabric_optimizer.param_groups[0]["lr"] == 0.5  # the scheduler's change, seen through the wrapper
    assert fabric_optimizer.param_groups is optimizer.param_groups
    with pytest.raises(ValueError, match="already set up"):
        fabric.setup(wrapped)


def test_a_fabric_loop_trains_as_a_hand_loop() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    reference = copy.deepcopy(model)
    data = _data()
    fabric = _fabric()
    wrapped, optimizer = fabric.setup(model, torch.optim.Adam(model.parameters(), lr=0.01))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=8))
    hand_optimizer = torch.optim.Adam(reference.parameters(), lr=0.01)
    for _ in range(2):
        for (x, y), (hx, hy) in zip(loader, DataLoader(data, batch_size=8), strict=True):
            fabric.backward(nn.functional.mse_loss(wrapped(x), y))
            optimizer.step()
            optimizer.zero_grad()
            nn.functional.mse_loss(reference(hx), hy).backward()
            hand_optimizer.step()
            hand_optimizer.zero_grad()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)


class _EpochRecorder(Sampler[int]):
    def __init__(self, n: int) -> None:
        self.n, self.epochs = n, []

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def test_setup_dataloaders_gives_the_sampler_each_epoch_and_moves_batches() -> None:
    fabric = _fabric()
    sampler = _EpochRecorder(8)
    loader = fabric.setup_dataloaders(DataLoader(_data(8), batch_size=4, sampler=sampler))
    assert isinstance(loader, FabricDataLoader) and len(loader) == 2 and loader.batch_size == 4
    for _ in range(3):
        batches = list(loader)
    assert sampler.epochs == [0, 1, 2]
    assert batches[0][0].device == fabric.device
    first, second = fabric.setup_dataloaders(DataLoader(_data(8)), DataLoader(_data(8)), move_to_device=False)
    assert first.device is None and second.device is None


def test_collectives_on_one_process_return_their_input() -> None:
    fabric = _fabric()
    tensor = torch.arange(3.0)
    assert fabric.all_gather(tensor) is tensor  # unchanged, as Lightning's (no new dimension)
    assert torch.equal(fabric.all_reduce(tensor, reduce_op="sum"), tensor)
    assert fabric.all_reduce(2.0).item() == 2.0
    assert fabric.broadcast({"a": 1}) == {"a": 1}
    with pytest.raises(ValueError, match="reduce_op='median'"):
        fabric.all_reduce(tensor, reduce_op="median")
    fabric.barrier()
    with fabric.rank_zero_first():
        pass


def test_call_passes_each_callback_the_keyword_arguments_it_takes() -> None:
    seen = []

    class Narrow:
        def on_epoch_end(self, loss: float) -> None:
            seen.append(("narrow", loss))

    class Wide:
        def on_epoch_end(self, **kwargs: object) -> None:
            seen.append(("wide", kwargs))

    fabric = _fabric(callbacks=[Narrow(), Wide(), object()])
    fabric.call("on_epoch_end", loss=1.5, epoch=2)
    fabric.call("on_unknown_hook", value=1)
    assert seen == [("narrow", 1.5), ("wide", {"loss": 1.5, "epoch": 2})]


def test_log_dict_writes_to_fabric_loggers_with_root_dir(tmp_path: Path) -> None:
    from accelkit.fabric.loggers import CSVLogger

    logger = CSVLogger(root_dir=tmp_path)
    fabric = _fabric(loggers=logger)
    assert fabric.logger is logger and fabric.loggers == [logger]
    fabric.log("loss", torch.tensor(0.5), step=0)
    fabric.log_dict({"loss": 0.25, "acc": 1.0}, step=1)
    logger.save()
    text = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text()
    assert text.splitlines()[0] == "acc,loss,step"
    assert "0.25" in text and "0.5" in text


class _Lit(accelkit.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: tuple) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss


def test_a_lightning_module_under_fabric_logs_and_prints_through_it(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    from accelkit.fabric.loggers import CSVLogger

    fabric = _fabric(loggers=CSVLogger(tmp_path))
    module = _Lit()
    wrapped = fabric.setup(module)
    assert module.fabric is fabric and module.logger is fabric.logger
    loss = wrapped.training_step(next(iter(DataLoader(_data(4), batch_size=4))))
    assert loss.ndim == 0
    module.print("hello from the module")
    fabric.logger.save()
    assert "train_loss" in (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text()
    assert "hello from the module" in capsys.readouterr().out


def _lightning_fabric(**kwargs: object) -> object:
    """Lightning Fabric 2.6's ``Fabric`` on one CPU process, to compare with (skipped where Lightning is missing)."""
    lightning_fabric = pytest.importorskip("lightning.fabric")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lightning_fabric.Fabric(accelerator="cpu", devices=1, **kwargs)


class _Scorer(nn.Module):
    """A module with a method besides ``forward`` that runs its layer (a loss computed outside the forward)."""

    not_a_method = 3

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def score(self, x: torch.Tensor) -> tuple[torch.Tensor, bool, torch.dtype, torch.dtype]:
        """The layer's output, whether autocast is on, the input's dtype, the output's dtype inside the method."""
        out = self.layer(x)
        return out, torch.is_autocast_enabled("cpu"), x.dtype, out.dtype


@pytest.mark.parametrize("precision", ["bf16-mixed", "64-true", "bf16-true"])
def test_the_forward_runs_under_the_precision_and_returns_the_default_dtype_as_lightnings(precision: str) -> None:
    """Inside the forward the precision's dtype; what it returns in float32 again (Lightning's ``convert_output``),
    the same values as Lightning Fabric's wrapper returns for the same weights."""
    torch.manual_seed(0)
    module = _Scorer()
    twin = copy.deepcopy(module)
    seen: list[torch.dtype] = []
    module.layer.register_forward_hook(lambda layer, args, out: seen.append(out.dtype))
    wrapped = _fabric(precision=precision).setup(module)
    theirs = _lightning_fabric(precision=precision).setup(twin)  # type: ignore[attr-defined]
    x = torch.randn(2, 4)
    out = wrapped(x)
    assert seen == [{"bf16-mixed": torch.bfloat16, "64-true": torch.float64, "bf16-true": torch.bfloat16}[precision]]
    assert out.dtype == torch.float32 and out.requires_grad
    torch.testing.assert_close(out, theirs(x), rtol=0, atol=0)


def test_the_fabric_s_autocast_init_tensor_and_init_module_use_the_precision() -> None:
    fabric = _fabric(precision="bf16-mixed")
    with fabric.autocast():
        assert (torch.ones(2, 4) @ torch.ones(4, 4)).dtype == torch.bfloat16
    true64 = _fabric(precision="64-true")
    module = true64.setup(nn.Linear(4, 4))
    assert module.weight.dtype == torch.float64
    with true64.init_tensor():
        assert torch.ones(1).dtype == torch.float64
    with true64.init_module():
        assert nn.Linear(2, 2).weight.dtype == torch.float64


def test_clip_gradients_returns_the_total_norm_and_refuses_both_or_neither() -> None:
    fabric = _fabric()
    model = nn.Linear(4, 1)
    wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    fabric.backward(wrapped(torch.full((2, 4), 10.0)).sum())
    expected = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    norm = fabric.clip_gradients(wrapped, optimizer, max_norm=1.0)
    torch.testing.assert_close(norm, expected)
    after = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(after, torch.tensor(1.0), atol=1e-4, rtol=0)
    assert fabric.clip_gradients(wrapped, optimizer, clip_val=0.01) is None
    assert max(p.grad.abs().max().item() for p in model.parameters()) <= 0.01 + 1e-7
    with pytest.raises(ValueError, match="exactly one"):
        fabric.clip_gradients(wrapped, optimizer)


def _refusals(wrapped: object) -> dict[str, type]:
    """The exception class ``mark_forward_method`` raises for each wrong argument."""
    found = {}
    for label, argument in [("unknown", "no_such_method"), ("attribute", "not_a_method"), ("submodule", "layer"),
                            ("forward", "forward"), ("int", 3)]:
        with pytest.raises(Exception) as caught:
            wrapped.mark_forward_method(argument)  # type: ignore[attr-defined]
        found[label] = type(caught.value)
    return found


@pytest.mark.parametrize("precision", ["bf16-mixed", "64-true"])
def test_mark_forward_method_runs_the_method_under_the_precision_and_refuses_as_lightning(precision: str) -> None:
    """A marked method runs as the forward: its input converted, its body under autocast, its floating output in
    float32 again; unmarked, it is the module's own method. The wrong arguments are refused with Lightning
    Fabric's exception classes (``AttributeError`` for a name that is no method of the module)."""
    wrapped = _fabric(precision=precision).setup(_Scorer())
    x = torch.ones(2, 4)
    as_weights = x.to(wrapped.module.layer.weight.dtype)  # not marked: the method itself, as Lightning's
    out, autocast, input_dtype, inner_dtype = wrapped.score(as_weights)
    assert (autocast, input_dtype, out.dtype) == (False, as_weights.dtype, as_weights.dtype)
    wrapped.mark_forward_method("score")
    out, autocast, input_dtype, inner_dtype = wrapped.score(x)
    if precision == "bf16-mixed":
        assert (autocast, input_dtype, inner_dtype) == (True, torch.float32, torch.bfloat16)
    else:
        assert (autocast, input_dtype, inner_dtype) == (False, torch.float64, torch.float64)
    assert out.dtype == torch.float32  # Lightning's convert_output, as after the forward
    other = _fabric(precision=precision).setup(_Scorer())
    other.mark_forward_method(other.module.score)  # the bound method, as Lightning accepts it
    assert other.score(x)[2] == input_dtype
    theirs = _lightning_fabric(precision=precision).setup(_Scorer())  # type: ignore[attr-defined]
    assert _refusals(wrapped) == _refusals(theirs) == {
        "unknown": AttributeError, "attribute": AttributeError, "submodule": AttributeError, "forward": ValueError,
        "int": TypeError}


class _SecondNodeStrategy(SingleDeviceStrategy):
    """One process per node, this one on the second node (global rank 1, local rank 0); it records its barriers."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    @property
    def world_size(self) -> int:
        return 2

    @property
    def global_rank(self) -> int:
        return 1

    def barrier(self, name: str | None = None) -> None:
        self.events.append(f"barrier {name}")


@pytest.mark.parametrize("local", [True, False])
def test_rank_zero_first_lets_the_first_process_of_the_node_or_of_the_run_go_first(local: bool) -> None:
    """``local=True``: the node's first process (local rank 0, here on the second node) runs the block, then waits
    for the others; ``local=False``: as global rank 1 it waits for global rank 0 before the block (Lightning's
    order). On one plain process the block just runs, and an error in it propagates."""
    events: list[str] = []
    fabric = Fabric(accelerator="cpu", devices=1, strategy=_SecondNodeStrategy(events))
    assert (fabric.global_rank, fabric.local_rank) == (1, 0)
    with fabric.rank_zero_first(local=local):
        events.append("block")
    expected = ["block", "barrier rank_zero_first"] if local else ["barrier rank_zero_first", "block"]
    assert events == expected
    single = _fabric()
    ran = []
    with single.rank_zero_first(local=local):
        ran.append(single.local_rank)
    assert ran == [0]
    with pytest.raises(KeyError, match="missing"), single.rank_zero_first(local=local):
        raise KeyError("missing")


def _train(wrapped: object, optimizer: object, backward: object) -> None:
    data = _data(16)
    for x, y in DataLoader(data, batch_size=4):
        backward(nn.functional.mse_loss(wrapped(x), y))  # type: ignore[operator]
        optimizer.step()  # type: ignore[attr-defined]
        optimizer.zero_grad()  # type: ignore[attr-defined]


def test_setup_module_then_setup_optimizers_trains_as_setup_and_as_lightnings() -> None:
    """The optimizer made from the set-up module's parameters and set up afterwards: the same weights as ``setup``
    with both, and as Lightning Fabric's ``setup_module``/``setup_optimizers``; one optimizer comes back alone,
    several as a tuple, none or one already set up is refused (as Lightning's, ``ValueError``)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    together_model, lightning_model = copy.deepcopy(model), copy.deepcopy(model)
    fabric = _fabric()
    wrapped = fabric.setup_module(model)
    optimizer = fabric.setup_optimizers(torch.optim.Adam(wrapped.parameters(), lr=0.01))
    assert isinstance(optimizer, FabricOptimizer)
    _train(wrapped, optimizer, fabric.backward)
    together = _fabric()
    together_wrapped, together_optimizer = together.setup(together_model,
                                                          torch.optim.Adam(together_model.parameters(), lr=0.01))
    _train(together_wrapped, together_optimizer, together.backward)
    lightning = _lightning_fabric()
    theirs = lightning.setup_module(lightning_model)  # type: ignore[attr-defined]
    _train(theirs, lightning.setup_optimizers(torch.optim.Adam(theirs.parameters(), lr=0.01)),  # type: ignore[attr-defined]
           lightning.backward)  # type: ignore[attr-defined]
    for mine, same, lightnings in zip(model.parameters(), together_model.parameters(), lightning_model.parameters(),
                                      strict=True):
        torch.testing.assert_close(mine, same, rtol=0, atol=0)
        torch.testing.assert_close(mine, lightnings, rtol=0, atol=0)
    pair = fabric.setup_optimizers(torch.optim.SGD(wrapped.parameters(), lr=0.1),
                                   torch.optim.SGD(wrapped.parameters(), lr=0.1))
    assert isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(o, FabricOptimizer) for o in pair)
    with pytest.raises(ValueError, match="at least one optimizer"):
        fabric.setup_optimizers()
    with pytest.raises(ValueError, match="set up each optimizer once"):
        fabric.setup_optimizers(optimizer)


def _scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_fabric_tensorboard_logger_writes_events_under_root_dir_as_lightnings(tmp_path: Path) -> None:
    """``accelkit.fabric.loggers.TensorBoardLogger(root_dir=...)``: ``fabric.log`` and ``log_dict`` reach it, as
    event files in ``<root_dir>/lightning_logs/version_0``, the folder Lightning Fabric's logger writes, with the
    same scalars."""
    lightning_loggers = pytest.importorskip("lightning.fabric.loggers")
    from accelkit.fabric.loggers import TensorBoardLogger

    folders = {}
    for side, logger_class, make in [("accelkit", TensorBoardLogger, _fabric),
                                     ("lightning", lightning_loggers.TensorBoardLogger, _lightning_fabric)]:
        root = tmp_path / side
        logger = logger_class(root_dir=root)
        fabric = make(loggers=logger)
        assert fabric.logger is logger  # type: ignore[attr-defined]
        fabric.log("loss", torch.tensor(0.5), step=0)  # type: ignore[attr-defined]
        fabric.log_dict({"loss": 0.25, "acc": 1.0}, step=1)  # type: ignore[attr-defined]
        logger.finalize("success")
        events = sorted(root.rglob("events.out.tfevents.*"))
        assert len(events) == 1 and Path(logger.log_dir) == events[0].parent
        folders[side] = (events[0].parent.relative_to(root), _scalars(events[0].parent))
    assert folders["accelkit"] == folders["lightning"] == (
        Path("lightning_logs", "version_0"), {"loss": [(0, 0.5), (1, 0.25)], "acc": [(1, 1.0)]})


@pytest.mark.parametrize("norm_type", [float("inf"), 1.0, 2.0])
def test_clip_gradients_norm_type_gives_torch_s_norm_and_clipping_and_lightnings(norm_type: float) -> None:
    """``clip_gradients(max_norm=, norm_type=)``: the total norm and the clipped gradients of torch's
    ``clip_grad_norm_`` over the same gradients, and the norm Lightning Fabric returns."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    reference, lightning_model = copy.deepcopy(model), copy.deepcopy(model)
    x = torch.randn(8, 4) * 10
    fabric = _fabric()
    wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    fabric.backward(wrapped(x).sum())
    norm = fabric.clip_gradients(wrapped, optimizer, max_norm=0.5, norm_type=norm_type)
    reference(x).sum().backward()
    expected = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5, norm_type=norm_type)
    torch.testing.assert_close(norm, expected)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad)
    lightning = _lightning_fabric()
    theirs_wrapped, theirs_optimizer = lightning.setup(  # type: ignore[attr-defined]
        lightning_model, torch.optim.SGD(lightning_model.parameters(), lr=0.1))
    lightning.backward(theirs_wrapped(x).sum())  # type: ignore[attr-defined]
    torch.testing.assert_close(norm, lightning.clip_gradients(  # type: ignore[attr-defined]
        theirs_wrapped, theirs_optimizer, max_norm=0.5, norm_type=norm_type))


def test_clip_gradients_refuses_a_nan_gradient_unless_error_if_nonfinite_is_false() -> None:
    """A NaN gradient: ``RuntimeError`` by default (torch's, as Lightning's); with ``error_if_nonfinite=False`` the
    NaN norm comes back and nothing is raised."""
    fabric = _fabric()
    model = nn.Linear(4, 1)
    wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    fabric.backward(wrapped(torch.ones(2, 4)).sum())
    model.weight.grad[0, 0] = float("nan")
    with pytest.raises(RuntimeError, match="non-finite"):
        fabric.clip_gradients(wrapped, optimizer, max_norm=1.0)
    with pytest.raises(RuntimeError, match="non-finite"):
        fabric.clip_gradients(wrapped, optimizer, max_norm=1.0, norm_type=float("inf"))
    norm = fabric.clip_gradients(wrapped, optimizer, max_norm=1.0, error_if_nonfinite=False)
    assert norm is not None and torch.isnan(norm)


def test_a_loss_that_bypassed_the_gradient_scaler_is_refused() -> None:
    fabric = _fabric(plugins=[MixedPrecision(dtype="bfloat16", scaler=True)])
    model = nn.Linear(4, 1)
    wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    wrapped(torch.ones(2, 4)).sum().backward()  # not fabric.backward: the scaler never saw it
    with pytest.raises(RuntimeError, match=r"fabric.backward\(loss\)"):
        optimizer.step()
    optimizer.zero_grad()
    before = model.weight.detach().clone()
    fabric.backward(wrapped(torch.ones(2, 4)).sum())
    optimizer.step()
    assert not torch.equal(before, model.weight)


class _TwoProcessStrategy(SingleDeviceStrategy):
    """A strategy that reports two processes and has no way to skip a gradient sync."""

    @property
    def world_size(self) -> int:
        return 2


def test_no_backward_sync_warns_when_the_strategy_cannot_skip_the_sync() -> None:
    fabric = Fabric(accelerator="cpu", devices=1, strategy=_TwoProcessStrategy())
    wrapped = fabric.setup(nn.Linear(2, 1))
    with pytest.warns(UserWarning, match="cannot skip the gradient synchronisation"):
        with fabric.no_backward_sync(wrapped):
            pass
    single = _fabric()
    one = single.setup(nn.Linear(2, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with single.no_backward_sync(one):  # one process: nothing to skip, nothing to say
            pass
    with pytest.raises(TypeError, match="set up with Fabric.setup"):
        single.no_backward_sync(nn.Linear(2, 1))


class _SpawningStrategy(SingleDeviceStrategy):
    """A strategy that starts its workers from a function and is no data-parallel one (as an XLA plugin's)."""

    def create_launcher(self) -> object:
        from accelkit.strategies.launchers import SpawnLauncher

        return SpawnLauncher(2)


def test_launch_on_spawn_strategies_needs_a_function_and_ddp_needs_launch() -> None:
    with pytest.raises(TypeError, match="launch\\(function\\)"):
        Fabric(accelerator="cpu", devices=1, strategy=_SpawningStrategy()).launch()
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    with pytest.raises(RuntimeError, match="call fabric.launch\\(\\) first"):
        fabric.setup(nn.Linear(2, 1))
    with pytest.raises(TypeError, match="first parameter for the Fabric"):
        _fabric().launch(lambda: None)


def test_launch_without_a_function_is_refused_where_the_program_is_no_script_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A program run as a module (``python -m pytest``: ``__main__`` is not the user's script) or without a script
    file (``python -c``, a notebook, an xdist worker): running ``__main__`` again in each worker would be wrong, so
    ``launch()`` names ``launch(function)`` instead. ``__main__`` is set here: the real one depends on how pytest
    was started."""
    import importlib.machinery
    import types

    as_module = types.ModuleType("__main__")
    as_module.__spec__ = importlib.machinery.ModuleSpec("pytest", None)
    as_module.__file__ = __file__
    monkeypatch.setitem(sys.modules, "__main__", as_module)
    with pytest.raises(TypeError, match="runs as the module 'pytest' .*python -m.*call fabric.launch\\(function\\)"):
        Fabric(accelerator="cpu", devices=1, strategy=_SpawningStrategy()).launch()
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # python -c: no file, no spec
    with pytest.raises(TypeError, match="has no script file .*python -c.*call fabric.launch\\(function\\)"):
        Fabric(accelerator="cpu", devices=1, strategy=_SpawningStrategy()).launch()


def test_a_script_run_again_in_a_worker_adopts_the_workers_run(tmp_path: Path) -> None:
    """What each worker of ``launch()`` without a function runs (``script_replicas.run_script``): the script as
    ``__main__``, whose ``Fabric(...)`` takes the worker's set-up run and whose ``launch()`` returns at once."""
    from accelkit.fabric import script_replicas

    outer = _fabric()
    outer.setup_environment()
    script = tmp_path / "train.py"
    script.write_text(
        "from pathlib import Path\n"
        "from accelkit import Fabric\n"
        "from accelkit.fabric import script_replicas\n"
        "fabric = Fabric(accelerator='cpu', devices=1)\n"
        "assert fabric.strategy is script_replicas.current().strategy\n"
        "assert fabric.launch() is None\n"
        "assert __name__ == '__main__'\n"
        f"Path({str(tmp_path / 'ran')!r}).write_text(str(fabric.global_rank))\n")
    script_replicas.run_script(outer, str(script))
    assert (tmp_path / "ran").read_text() == "0"
    assert script_replicas.current() is None  # only while the script runs

    script.write_text("from accelkit import Fabric\nFabric(accelerator='cpu', devices=1, precision='bf16-mixed')\n")
    with pytest.raises(ConfigurationError,
                       match=r"(?s)precision='bf16-mixed'\) in a worker, but the launching process had None.*same"):
        script_replicas.run_script(outer, str(script))
    script.write_text("import sys\nsys.exit(0)\n")
    script_replicas.run_script(outer, str(script))  # a clean exit ends the worker's script quietly
    script.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match="exited with status 3 in worker 0"):
        script_replicas.run_script(outer, str(script))


def test_save_and_load_round_trip_with_filter_and_strict(tmp_path: Path) -> None:
    fabric = _fabric()
    model = nn.Linear(4, 2)
    wrapped, optimizer = fabric.setup(model, torch.optim.Adam(model.parameters()))
    fabric.backward(wrapped(torch.ones(1, 4)).sum())
    optimizer.step()
    path = tmp_path / "state.ckpt"
    fabric.save(path, {"model": wrapped, "optimizer": optimizer, "step": 7})
    saved = torch.load(path, weights_only=True)
    assert set(saved) == {"model", "optimizer", "step"} and saved["step"] == 7
    assert list(tmp_path.iterdir()) == [path]  # written atomically: no temporary left beside it

    other = nn.Linear(4, 2)
    loading = _fabric()
    other_wrapped, other_optimizer = loading.setup(other, torch.optim.Adam(other.parameters()))
    state = {"model": other_wrapped, "optimizer": other_optimizer, "step": 0}
    rest = loading.load(path, state)
    assert rest == {} and state["step"] == 7
    torch.testing.assert_close(other.weight, model.weight)
    assert other_optimizer.state_dict()["state"][0]["step"] == 1

    fabric.save(tmp_path / "weights.ckpt", {"model": wrapped}, filter={"model": lambda k, v: "weight" in k})
    assert list(torch.load(tmp_path / "weights.ckpt", weights_only=True)["model"]) == ["weight"]
    with pytest.raises(KeyError, match="missing"):
        fabric.load(path, {"model": other_wrapped, "missing": 1})
    assert set(fabric.load(path, {"model": other_wrapped, "missing": 1}, strict=False)) == {"optimizer", "step"}
    assert set(fabric.load(path)) == {"model", "optimizer", "step"}


class _Arbitrary:
    """An object a weights-only load refuses to unpickle."""


def test_load_refuses_pickled_objects_unless_told_and_load_raw_reads_a_state_dict(tmp_path: Path) -> None:
    from accelkit.checkpoint.files import UnsafeCheckpointError

    fabric = _fabric()
    model = nn.Linear(2, 2)
    wrapped = fabric.setup(model)
    fabric.save(tmp_path / "unsafe.ckpt", {"model": wrapped, "extra": _Arbitrary()})
    with pytest.raises(UnsafeCheckpointError):
        fabric.load(tmp_path / "unsafe.ckpt")
    assert isinstance(fabric.load(tmp_path / "unsafe.ckpt", weights_only=False)["extra"], _Arbitrary)

    torch.save(nn.Linear(2, 2).state_dict(), tmp_path / "raw.pt")
    fabric.load_raw(tmp_path / "raw.pt", wrapped)
    torch.testing.assert_close(model.weight, torch.load(tmp_path / "raw.pt")["weight"])


def test_an_argument_that_disagrees_with_accelkit_run_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELKIT_FABRIC_PRECISION", "bf16-mixed")
    assert Fabric(accelerator="cpu", devices=1).precision.name == "bf16-mixed"  # the default takes the option
    with pytest.raises(ConfigurationError, match=r"Fabric\(precision='64-true'\) conflicts with `accelkit run "
                                                 r"--precision bf16-mixed`"):
        Fabric(accelerator="cpu", devices=1, precision="64-true")


def test_accumulate_steps_once_per_window_and_at_the_epochs_end() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    reference = copy.deepcopy(model)
    data = _data(10)  # 5 batches of 2: windows of 2, 2 and the epoch's last batch alone
    fabric = _fabric()
    wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=2))
    norms = []
    for x, y in loader:
        with fabric.accumulate(wrapped, every=2):
            fabric.backward(nn.functional.mse_loss(wrapped(x), y))
            norms.append(fabric.clip_gradients(wrapped, optimizer, max_norm=100.0))
            optimizer.step()
            optimizer.zero_grad()
    assert [n is not None for n in norms] == [False, True, False, True, True]
    hand = torch.optim.SGD(reference.parameters(), lr=0.1)
    batches = list(DataLoader(data, batch_size=2))
    for window in (batches[0:2], batches[2:4], batches[4:5]):
        for x, y in window:
            (nn.functional.mse_loss(reference(x), y) / 2).backward()
        hand.step()
        hand.zero_grad()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)
    with pytest.raises(ValueError, match="every=0"):
        with fabric.accumulate(wrapped, every=0):
            pass


@pytest.mark.parametrize("order_from", ["loader_generator", "global_seed"])
def test_a_saved_loader_resumes_mid_epoch_where_it_stopped(tmp_path: Path, order_from: str) -> None:
    data = TensorDataset(torch.arange(12.0).unsqueeze(1))

    def run(fabric: Fabric, loader: FabricDataLoader, epochs: int, stop_after: int | None = None) -> list[float]:
        seen = []
        for _ in range(epochs):
            for (x,) in loader:
                seen.append(x[0, 0].item())
                if stop_after is not None and len(seen) == stop_after:
                    fabric.save(tmp_path / "mid.ckpt", {"loader": loader})
                    return seen
        return seen

    def fresh() -> tuple[Fabric, FabricDataLoader]:
        fabric = _fabric()
        torch.manual_seed(3)
        generator = torch.Generator().manual_seed(3) if order_from == "loader_generator" else None
        return fabric, fabric.setup_dataloaders(DataLoader(data, batch_size=3, shuffle=True, generator=generator))

    fabric, loader = fresh()
    uninterrupted = run(fabric, loader, 3)
    fabric, loader = fresh()
    first = run(fabric, loader, 3, stop_after=6)  # the second batch of the second epoch
    fabric, loader = fresh()
    fabric.load(tmp_path / "mid.ckpt", {"loader": loader})
    position = loader.state_dict()
    assert (position["epoch"], position["batches_done"]) == (1, 2)
    rest = []
    for _ in range(2):
        rest += [x[0, 0].item() for (x,) in loader]
    if order_from == "loader_generator":  # the loader's own generator: every later epoch's order too
        assert first + rest[:len(uninterrupted) - len(first)] == uninterrupted
    else:  # the global random state decides the later epochs (the program's to save): the resumed epoch is exact
        assert first + rest[:2] == uninterrupted[:8]


def test_a_save_that_fails_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    fabric = _fabric()
    wrapped = fabric.setup(nn.Linear(2, 2))
    path = tmp_path / "state.ckpt"
    fabric.save(path, {"model": wrapped, "step": 1})
    with pytest.raises(Exception, match="lambda|pickle|Can't"):
        fabric.save(path, {"model": wrapped, "step": 2, "unpicklable": lambda: None})
    assert fabric.load(path)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.ckpt"]


def test_the_distributed_shuffle_is_seeded_by_seed_everything_as_lightnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning Fabric's distributed sampler takes ``seed_everything``'s seed: the same order per rank and epoch."""
    from torch.utils.data.distributed import DistributedSampler

    for name in ("ACCELKIT_SEED", "ACCELKIT_SEED_WORKERS", "PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.delenv(name, raising=False)  # seed_everything sets them; put back as found after the test

    fabric = Fabric(accelerator="cpu", devices=1, strategy=_TwoProcessStrategy())  # reports rank 0 of 2
    data = TensorDataset(torch.arange(20))
    fabric.seed_everything(7)
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=4, shuffle=True))
    reference = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=7)
    for epoch in range(2):
        reference.set_epoch(epoch)
        assert [int(i) for (batch,) in loader for i in batch] == list(reference)


def _functions_called(run: object) -> set[str]:
    """The qualified names of the Python functions ``run()`` calls (``sys.setprofile``: what ran, not how long)."""
    import sys

    called: set[str] = set()

    def profile(frame: object, event: str, arg: object) -> None:
        if event == "call":
            called.add(frame.f_code.co_qualname)  # type: ignore[attr-defined]

    sys.setprofile(profile)
    try:
        run()  # type: ignore[operator]
    finally:
        sys.setprofile(None)
    return called


def _steady_steps(fabric: Fabric) -> tuple[set[str], list[torch.Tensor]]:
    """What a second epoch of a Fabric loop calls, and the weights it ends with."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loader = fabric.setup_dataloaders(DataLoader(_data(), batch_size=8))

    def epoch() -> None:
        for x, y in loader:
            optimizer.zero_grad()
            fabric.backward(nn.functional.mse_loss(wrapped(x), y))
            optimizer.step()

    epoch()  # the first epoch decides the plain calls
    return _functions_called(epoch), [p.detach().clone() for p in model.parameters()]


class _CustomStepStrategy(SingleDeviceStrategy):
    """A strategy that customises every part of the step (records each call, then does the default)."""

    calls: list[str]

    def batch_to_device(self, batch: object) -> object:
        self.calls.append("batch_to_device")
        return super().batch_to_device(batch)

    def backward(self, loss: torch.Tensor) -> None:
        self.calls.append("backward")
        super().backward(loss)

    def reduce_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append("reduce_gradients")

    def step_end(self) -> None:
        self.calls.append("step_end")


def test_the_plain_step_calls_no_default_method_of_the_strategy_or_the_precision() -> None:
    # the plain precision on one process: forward, backward, step and the batch transfer come down to the module's,
    # the tensor's and the optimizer's own calls; the default methods in between (which only pass them on) and the
    # wrapper's own forward frame are not run every step (bench_fabric.py --only counts: their instructions)
    called, plain_weights = _steady_steps(_fabric())
    passed_on = {"Strategy.backward", "Precision.backward", "Precision.scale_loss", "Strategy.optimizer_step",
                 "Precision.optimizer_step", "Strategy.reduce_gradients", "Strategy.step_end",
                 "Strategy.batch_to_device", "move_to_device", "FabricModule.forward",
                 "FabricModule._run", "Precision.convert_input", "Precision.forward_context",
                 # nor Fabric's own general paths: the wrappers' step and zero_grad are the optimizer's
                 "Fabric.optimizer_step", "Fabric._backward", "Fabric._full_step", "FabricOptimizer.zero_grad"}
    assert not called & passed_on, sorted(called & passed_on)
    assert {"FabricOptimizer.step", "Fabric.backward", "FabricDataLoader.__iter__"} <= called
    # a strategy that customises them gets each call, every step, and the same training
    strategy = _CustomStepStrategy()
    strategy.calls = []
    custom_called, custom_weights = _steady_steps(Fabric(accelerator="cpu", devices=1, strategy=strategy))
    assert {"_CustomStepStrategy.batch_to_device", "_CustomStepStrategy.backward",
            "_CustomStepStrategy.reduce_gradients", "_CustomStepStrategy.step_end"} <= custom_called
    steps = 2 * len(_data()) // 8
    assert {name: strategy.calls.count(name) for name in set(strategy.calls)} == {
        "batch_to_device": steps, "backward": steps, "reduce_gradients": steps, "step_end": steps}
    for plain, custom in zip(plain_weights, custom_weights, strict=True):
        torch.testing.assert_close(plain, custom)


def test_the_wrapped_module_keeps_its_hooks_and_the_precision_s_conversion() -> None:
    fabric = _fabric()
    wrapped = fabric.setup(nn.Linear(4, 1))
    seen: list[str] = []
    wrapped.register_forward_pre_hook(lambda module, args: seen.append("pre"))
    wrapped.register_forward_hook(lambda module, args, out: seen.append("post"))
    wrapped(torch.ones(2, 4))
    assert seen == ["pre", "post"]  # hooks on the wrapper run, as on any nn.Module
    assert wrapped.forward(torch.ones(2, 4)).shape == (2, 1)
    # a precision that converts inputs: the forward goes through it (no plain call)
    true64 = _fabric(precision="64-true")
    inner = nn.Linear(4, 1)
    inputs: list[torch.dtype] = []
    inner.register_forward_pre_hook(lambda module, args: inputs.append(args[0].dtype))
    module = true64.setup(inner)
    assert module(torch.ones(1, 4, dtype=torch.float32)).dtype == torch.float32 and inputs == [torch.float64]


def _calls_counted(run: object) -> collections.Counter[str]:
    """How many times ``run()`` calls each Python function, by qualified name (``sys.setprofile``)."""
    import sys

    calls: collections.Counter[str] = collections.Counter()

    def profile(frame: object, event: str, arg: object) -> None:
        if event == "call":
            calls[frame.f_code.co_qualname] += 1  # type: ignore[attr-defined]

    sys.setprofile(profile)
    try:
        run()  # type: ignore[operator]
    finally:
        sys.setprofile(None)
    return calls


def test_the_plain_wrapper_runs_nn_module_s_call_machinery_as_often_as_a_hand_loop() -> None:
    # with the plain precision the wrapper's call goes to the strategy's wrapper without a second pass through
    # nn.Module.__call__ (bench_fabric.py --only counts: its instructions); the user's module still runs its own
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    hand = copy.deepcopy(model)
    fabric = _fabric()
    wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loader = fabric.setup_dataloaders(DataLoader(_data(), batch_size=8))
    hand_optimizer = torch.optim.SGD(hand.parameters(), lr=0.1)
    hand_loader = DataLoader(_data(), batch_size=8)

    def fabric_epoch() -> None:
        for x, y in loader:
            optimizer.zero_grad()
            fabric.backward(nn.functional.mse_loss(wrapped(x), y))
            optimizer.step()

    def hand_epoch() -> None:
        for x, y in hand_loader:
            hand_optimizer.zero_grad()
            nn.functional.mse_loss(hand(x), y).backward()
            hand_optimizer.step()

    fabric_epoch()
    hand_epoch()
    ours, theirs = _calls_counted(fabric_epoch), _calls_counted(hand_epoch)
    for name in ("Module._call_impl", "Module._wrapped_call_impl", "Optimizer.zero_grad"):
        assert ours[name] == theirs[name] == len(hand_loader), (name, ours[name], theirs[name])
    for mine, reference in zip(model.parameters(), hand.parameters(), strict=True):
        torch.testing.assert_close(mine, reference)


def test_the_plain_wrapper_keeps_global_hooks_backward_hooks_and_compile() -> None:
    fabric = _fabric()
    wrapped = fabric.setup(nn.Linear(4, 1))
    seen: list[object] = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: seen.append(module))
    try:
        wrapped(torch.ones(2, 4))
    finally:
        handle.remove()
    assert seen == [wrapped.module, wrapped]  # a global hook sees the wrapper, as any nn.Module called
    wrapped(torch.ones(2, 4))
    assert len(seen) == 2
    wrapped.register_full_backward_hook(lambda module, grad_in, grad_out: seen.append("backward"))
    fabric.backward(wrapped(torch.ones(2, 4, requires_grad=True)).sum())
    # (the hook's flag is the wrapper's own: set on the user's module before, the hook never ran)
    assert seen[-1] == "backward" and type(wrapped) is FabricModule and wrapped.module._is_full_backward_hook is None
    other = fabric.setup(nn.Linear(4, 1))
    other.compile(backend="eager")  # (not called here: compiling the wrapper's call is another matter)
    assert type(other) is FabricModule and other._compiled_call_impl is not None  # what nn.Module.__call__ calls


def test_a_scheduler_built_on_the_wrapper_steps_with_the_accumulation_window() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    reference = copy.deepcopy(model)
    fabric = _fabric()
    wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)  # patches the wrapper's step
    loader = fabric.setup_dataloaders(DataLoader(_data(16), batch_size=4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when the scheduler steps before the optimizer has
        for x, y in loader:
            with fabric.accumulate(wrapped, every=2):
                fabric.backward(nn.functional.mse_loss(wrapped(x), y))
                optimizer.step()
                optimizer.zero_grad()
                if not fabric.accumulating:
                    scheduler.step()
    hand = torch.optim.SGD(reference.parameters(), lr=0.1)
    hand_scheduler = torch.optim.lr_scheduler.StepLR(hand, step_size=1, gamma=0.5)
    batches = list(DataLoader(_data(16), batch_size=4))
    for window in (batches[0:2], batches[2:4]):
        for x, y in window:
            (nn.functional.mse_loss(reference(x), y) / 2).backward()
        hand.step()
        hand.zero_grad()
        hand_scheduler.step()
    assert optimizer.param_groups[0]["lr"] == hand.param_groups[0]["lr"] == 0.025
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)


def test_the_loader_s_position_counts_each_batch_while_it_is_used() -> None:
    fabric = _fabric()
    loader = fabric.setup_dataloaders(DataLoader(_data(24), batch_size=4))
    for index, _ in enumerate(loader):
        assert loader.state_dict()["batches_done"] == index + 1
    assert loader.state_dict()["batches_done"] == 6
    for index, _ in enumerate(loader):  # the next epoch, left after 2 batches
        if index == 1:
            break
    assert loader.state_dict() == {"epoch": 1, "batches_done": 2, "epoch_start": loader.state_dict()["epoch_start"]}


def test_at_last_batch_is_true_while_the_last_batch_is_used_and_false_after_the_epoch() -> None:
    fabric = _fabric()
    loader = fabric.setup_dataloaders(DataLoader(_data(24), batch_size=8))
    assert loader.at_last_batch is False
    flags = []
    for _ in loader:
        flags.append(loader.at_last_batch)
    assert flags == [False, False, True] and loader.at_last_batch is False
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    assert loader.at_last_batch is True  # an epoch left at its last batch (not exhausted) is still there
    unsized = fabric.setup_dataloaders(DataLoader(torch.utils.data.IterableDataset.__new__(_Stream), batch_size=2))
    assert [unsized.at_last_batch for _ in unsized] == [False, False]  # no length: never known to be the last


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(torch.arange(4.0))
