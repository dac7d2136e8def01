"""``accelkit.utilities`` as Lightning users import it (``grad_norm``, the rank-zero messages, ``CombinedLoader``, the
annotation types), the Module attributes Lightning offers (``on_gpu``, ``print``, ``freeze``, ``to_torchscript``,
``to_onnx``), ``ParallelStrategy`` and the Trainer forms ``fit(model, datamodule)`` and ``fit(torch.compile(model))``.
"""

from __future__ import annotations

import copy
import gc
import importlib.util
import logging
import math
import os
import re
import typing
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from accelkit.utilities import (
    AttributeDict,
    CombinedLoader,
    grad_norm,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
    seed_everything,
)
from accelkit.utilities import rank_zero as rank_zero_module
from helpers.models import PredictsInputs


def data(n: int = 16, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5]]))


def trainer(**kwargs: typing.Any) -> accelkit.Trainer:
    options = dict(accelerator="cpu", max_epochs=1, enable_progress_bar=False, logger=False,
                   enable_checkpointing=False, enable_model_summary=False, num_sanity_val_steps=0)
    options.update(kwargs)
    return accelkit.Trainer(**options)


class Regression(PredictsInputs, accelkit.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.example_input_array = torch.zeros(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture
def rank():
    """Set ``rank_zero_only.rank`` for a test and put it back."""
    before = rank_zero_only.rank

    def set_rank(value: int) -> None:
        rank_zero_only.rank = value

    yield set_rank
    rank_zero_only.rank = before


# ------------------------------------------------------------------- rank-zero messages
def test_rank_zero_warn_warns_on_rank_zero_only(rank):
    rank(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rank_zero_warn("careful", category=RuntimeWarning)
        rank_zero_deprecation("old name")
    assert [(str(w.message), w.category) for w in caught] == [("careful", RuntimeWarning),
                                                              ("old name", DeprecationWarning)]
    rank(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rank_zero_warn("careful")
        rank_zero_deprecation("old name")
    assert caught == []


def test_rank_zero_info_and_debug_log_on_rank_zero_only(rank):
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.DEBUG)
    log = rank_zero_module.log
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        rank(0)
        rank_zero_info("epoch %d done", 3)
        rank_zero_debug("details")
        rank(1)
        rank_zero_info("not from rank 1")
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert [(r.levelno, r.getMessage()) for r in records] == [(logging.INFO, "epoch 3 done"),
                                                              (logging.DEBUG, "details")]


RANK_ZERO_SCRIPT = """
import logging, sys
if sys.argv[1:] == ["configured"]:
    logging.basicConfig(level=logging.DEBUG, format="ROOT %(levelname)s %(message)s")
from {module} import rank_zero_debug, rank_zero_info, rank_zero_warn
rank_zero_info("info message")
rank_zero_warn("warn message")
rank_zero_debug("debug message")
"""


@pytest.mark.slow
def test_rank_zero_messages_print_what_lightnings_print(tmp_path, prewarmed):
    """Side by side with Lightning, a script's stderr: without logging configured, ``rank_zero_info`` prints the
    message alone (no ``basicConfig`` needed, as docs/utilities.rst said it was), ``rank_zero_warn`` a
    ``UserWarning``, ``rank_zero_debug`` nothing; with ``basicConfig(level=DEBUG)`` before the import, the
    messages take the program's format and ``rank_zero_debug`` still prints nothing (accelkit printed it). (The
    ``lightning`` package's own ``INFO: ...`` console line, a second copy, is left out of the comparison.)"""
    pytest.importorskip("lightning.pytorch", reason="compares with Lightning's rank_zero_* messages")
    from helpers.guards import child_env

    printed = {}
    for module in ("lightning.pytorch.utilities.rank_zero", "accelkit.utilities"):
        for setup in ("plain", "configured"):
            done = prewarmed.run(["-c", RANK_ZERO_SCRIPT.format(module=module), setup], cwd=tmp_path,
                                 env=child_env(), timeout=120)
            assert done.returncode == 0, done.stderr
            printed[module.split(".")[0], setup] = [line for line in done.stderr.splitlines()
                                                    if line.endswith(" message") and not line.startswith("INFO: ")
                                                    or line == "info message"]
    for setup in ("plain", "configured"):
        assert printed["accelkit", setup] == printed["lightning", setup], printed
    assert printed["accelkit", "plain"] == ["info message", "<string>:7: UserWarning: warn message"]
    assert printed["accelkit", "configured"] == ["ROOT INFO info message", "<string>:7: UserWarning: warn message"]


def test_rank_zero_only_runs_the_function_on_rank_zero_only(rank):
    calls: list[int] = []

    @rank_zero_only
    def answer() -> int:
        calls.append(1)
        return 42

    rank(1)
    assert answer() is None and calls == []
    rank(0)
    assert answer() == 42 and calls == [1]


def test_rank_zero_only_follows_the_rank_the_trainer_sets_in_each_run(rank):
    seen: list[int] = []

    class Spy(Regression):
        def on_train_start(self) -> None:
            seen.append(rank_zero_only.rank)

    rank(5)  # left over from elsewhere: the run sets its own
    trainer(limit_train_batches=1).fit(Spy(), DataLoader(data(), batch_size=4))
    assert seen == [0]


# ------------------------------------------------------------------- grad_norm
def test_grad_norm_gives_each_parameters_norm_and_the_total():
    module = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    module(torch.randn(5, 3)).sum().backward()
    module[2].bias.grad = None  # a parameter without a gradient is left out
    norms = grad_norm(module, norm_type=2)
    names = [name for name, p in module.named_parameters() if p.grad is not None]
    assert list(norms) == [f"grad_2.0_norm/{name}" for name in names] + ["grad_2.0_norm_total"]
    for name in names:
        expected = module.get_parameter(name).grad.norm(2)
        assert torch.allclose(norms[f"grad_2.0_norm/{name}"], expected)
    everything = torch.cat([module.get_parameter(n).grad.flatten() for n in names])
    assert torch.allclose(norms["grad_2.0_norm_total"], everything.norm(2))
    largest = grad_norm(module, "inf", group_separator=".")
    assert torch.allclose(largest["grad_inf_norm_total"], everything.abs().max())
    assert "grad_inf_norm.0.weight" in largest


def test_grad_norm_refuses_a_norm_type_that_is_not_positive_and_is_empty_without_gradients():
    module = nn.Linear(2, 2)
    assert grad_norm(module, 2) == {}
    for bad in (0, -1, "two", True):
        with pytest.raises(ValueError, match="norm type must be a positive number"):
            grad_norm(module, bad)


def test_grad_norm_logged_from_on_before_optimizer_step_reaches_the_metrics():
    class Logged(Regression):
        def on_before_optimizer_step(self, optimizer):
            self.log_dict(grad_norm(self.layer, norm_type=2))

    t = trainer(limit_train_batches=2)
    t.fit(Logged(), DataLoader(data(), batch_size=4))
    assert {"grad_2.0_norm/weight", "grad_2.0_norm/bias", "grad_2.0_norm_total"} <= set(t.callback_metrics)
    assert float(t.callback_metrics["grad_2.0_norm_total"]) > 0


# ------------------------------------------------------------------- CombinedLoader
def lightning_doc_iterables() -> dict[str, DataLoader]:
    return {"a": DataLoader(range(6), batch_size=4), "b": DataLoader(range(15), batch_size=5)}


@pytest.mark.parametrize("mode,length,last", [
    ("min_size", 2, {"a": [4, 5], "b": [5, 6, 7, 8, 9]}),
    ("max_size_cycle", 3, {"a": [0, 1, 2, 3], "b": [10, 11, 12, 13, 14]}),
    ("max_size", 3, {"a": None, "b": [10, 11, 12, 13, 14]}),
])
def test_combined_loader_modes_read_a_batch_of_each(mode, length, last):
    combined = CombinedLoader(lightning_doc_iterables(), mode)
    triples = list(combined)
    assert len(combined) == len(triples) == length
    assert [(i, d) for _, i, d in triples] == [(i, 0) for i in range(length)]
    batch = triples[-1][0]
    assert {k: None if v is None else v.tolist() for k, v in batch.items()} == last


def test_combined_loader_sequential_reads_one_after_the_other_with_its_index():
    combined = CombinedLoader(lightning_doc_iterables(), "sequential")
    triples = [(batch.tolist(), i, d) for batch, i, d in combined]
    assert len(combined) == 5
    assert [(i, d) for _, i, d in triples] == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1)]
    assert triples[2][0] == [0, 1, 2, 3, 4]
    combined.limits = [1, 2]
    assert len(combined) == 3 and [(i, d) for _, i, d in combined] == [(0, 0), (0, 1), (1, 1)]


def test_combined_loader_keeps_the_structure_and_replaces_its_loaders():
    a, b, c = DataLoader(range(4), batch_size=2), DataLoader(range(6), batch_size=2), DataLoader(range(2))
    nested = {"x": [a, b], "y": (c,)}
    combined = CombinedLoader(nested, "max_size_cycle")
    assert combined.iterables is nested and combined.flattened == [a, b, c]
    assert combined.sampler == {"x": [a.sampler, b.sampler], "y": (c.sampler,)}
    first = next(iter(combined))[0]
    assert isinstance(first["x"], list) and isinstance(first["y"], tuple) and first["y"][0].tolist() == [0]
    longer = DataLoader(range(10), batch_size=2)
    combined.flattened = [a, longer, c]
    assert combined.iterables["x"][1] is longer and len(combined) == 5
    with pytest.raises(ValueError, match="give one replacement for each"):
        combined.flattened = [a]
    with pytest.raises(ValueError, match="mode='bogus'"):
        CombinedLoader(nested, "bogus")
    with pytest.raises(TypeError, match="not an iterable of batches"):
        CombinedLoader({"a": a, "b": 3})


def test_combined_loader_without_lengths():
    def stream():
        yield from range(3)

    combined = CombinedLoader([DataLoader(range(4), batch_size=2), stream()], "min_size")
    assert len(combined) == 2  # the shortest known length
    with pytest.raises(TypeError, match="has no length"):
        len(CombinedLoader([DataLoader(range(4)), stream()], "max_size_cycle"))


class TwoSources(Regression):
    """Trains on a batch of two regression loaders at once (a dict of batches)."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[list[str]] = []

    def training_step(self, batch, batch_idx):
        self.keys.append(sorted(batch))
        return sum(F.mse_loss(self(x), y) for x, y in batch.values())


def test_fit_reads_a_dict_of_loaders_as_max_size_cycle_and_a_given_combined_loader_in_its_mode():
    model = TwoSources()
    t = trainer(max_epochs=2)
    t.fit(model, {"long": DataLoader(data(16), batch_size=4), "short": DataLoader(data(8, 1), batch_size=4)})
    assert t.num_training_batches == 4 and t.global_step == 8 and model.keys == [["long", "short"]] * 8
    model = TwoSources()
    t = trainer()
    t.fit(model, CombinedLoader({"long": DataLoader(data(16), batch_size=4),
                                 "short": DataLoader(data(8, 1), batch_size=4)}, "min_size"))
    assert t.num_training_batches == 2 and t.global_step == 2


def test_evaluation_reads_a_sequential_combined_loader_as_several_loaders():
    val = CombinedLoader({"clean": DataLoader(data(8), batch_size=4), "other": DataLoader(data(4, 3), batch_size=4)},
                         "sequential")
    t = trainer()
    results = t.validate(Regression(), val, verbose=False)
    assert [list(r) for r in results] == [["val_loss/dataloader_idx_0"], ["val_loss/dataloader_idx_1"]]
    t = trainer(max_epochs=1)
    t.fit(Regression(), DataLoader(data(), batch_size=4), val)
    assert t.num_val_batches == [2, 1]


def test_modes_the_loops_cannot_read_are_refused_with_the_reason():
    loaders = {"a": DataLoader(data(8), batch_size=4), "b": DataLoader(data(8), batch_size=4)}
    with pytest.raises(ValueError, match="mode='max_size_cycle', 'max_size' or 'min_size'"):
        trainer().fit(Regression(), CombinedLoader(loaders, "sequential"))
    with pytest.raises(ValueError, match=r"takes CombinedLoader\(mode='sequential'\) only, not mode='min_size'"):
        trainer().validate(Regression(), CombinedLoader(loaders, "min_size"))


# ------------------------------------------------------------------- seed_everything
SEED_SCRIPT = """
import json, os, sys, warnings
import {module} as L

def scenario(name, env, *args, **kwargs):
    for key in ("PL_GLOBAL_SEED", "ACCELKIT_SEED", "RANK"):
        os.environ.pop(key, None)
    os.environ.update(env)
    print("== " + name, file=sys.stderr, flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            seed = L.seed_everything(*args, **kwargs)
        except (TypeError, ValueError) as error:
            seed = "raised " + type(error).__name__
    for warning in caught:
        print("warned " + warning.category.__name__, file=sys.stderr, flush=True)
    print("returned", seed, "PL_GLOBAL_SEED", os.environ.get("PL_GLOBAL_SEED"), file=sys.stderr, flush=True)

scenario("given", {{}}, 42)
scenario("none", {{}})
scenario("from PL_GLOBAL_SEED", {{"PL_GLOBAL_SEED": "7"}})
scenario("a launcher's rank", {{"RANK": "1"}}, 3)
scenario("quiet", {{}}, 5, verbose=False)
scenario("a string", {{}}, "42")
scenario("not a number", {{}}, "abc")
scenario("below 0", {{}}, -1)
scenario("the largest", {{}}, 2**32 - 1)
scenario("above 2**32-1", {{}}, 2**32)
scenario("out of bounds in PL_GLOBAL_SEED", {{"PL_GLOBAL_SEED": "-5"}})
"""


@pytest.mark.slow
def test_seed_everything_prints_what_lightnings_prints(tmp_path, prewarmed):
    """Side by side with Lightning, as a script's stderr shows it: ``Seed set to N`` (at INFO, on the package's
    logger, printed where the program configured no logging), ``[rank: N]`` before it under a launcher, a warning
    when no seed was given or found, ``PL_GLOBAL_SEED`` read and set, nothing with ``verbose=False``."""
    pytest.importorskip("lightning.pytorch", reason="compares with Lightning's seed_everything")
    from helpers.guards import child_env

    printed = {}
    for module in ("lightning", "accelkit"):
        done = prewarmed.run(["-c", SEED_SCRIPT.format(module=module)], cwd=tmp_path, env=child_env(), timeout=120)
        assert done.returncode == 0, done.stderr
        printed[module] = [line for line in done.stderr.splitlines()
                           if line.startswith(("== ", "warned ", "returned ")) or "Seed set" in line]
    assert printed["accelkit"] == printed["lightning"], printed
    assert "[rank: 1] Seed set to 3" in printed["accelkit"] and "returned 7 PL_GLOBAL_SEED 7" in printed["accelkit"]
    assert "returned 42 PL_GLOBAL_SEED 42" in printed["accelkit"]
    assert printed["accelkit"].count("returned raised ValueError PL_GLOBAL_SEED None") == 3


def test_seed_everything_converts_and_bounds_the_seed_as_lightning_does(monkeypatch):
    """Lightning's ``int(seed)`` and its bounds (NumPy's 0..2**32-1), with accelkit's messages naming the value."""
    for name in ("ACCELKIT_SEED", "PL_GLOBAL_SEED"):
        monkeypatch.delenv(name, raising=False)
    assert seed_everything("42", verbose=False) == 42 and os.environ["PL_GLOBAL_SEED"] == "42"
    assert seed_everything(2**32 - 1, verbose=False) == 2**32 - 1
    with pytest.warns(UserWarning, match=r"seed_everything\(seed=4.7\) is not a whole number: seeding with "
                                         r"int\(4.7\) = 4, as Lightning does"):
        assert seed_everything(4.7, verbose=False) == 4
    with pytest.raises(ValueError, match=r"seed_everything\(seed='abc'\) is not an integer seed; pass a whole number "
                                         r"from 0 to 4294967295"):
        seed_everything("abc")
    for seed in (-1, 2**32):
        with pytest.raises(ValueError, match=f"got seed {seed}, out of bounds: a seed is from 0 to 4294967295"):
            seed_everything(seed)
    monkeypatch.delenv("ACCELKIT_SEED")
    monkeypatch.setenv("PL_GLOBAL_SEED", str(2**40))
    with pytest.raises(ValueError, match=f"got seed {2**40}, out of bounds.*came from ACCELKIT_SEED or PL_GLOBAL_SEED"):
        seed_everything()
    with pytest.raises(TypeError, match=r"seed_everything\(seed=True\) needs an int from 0 to 4294967295, not a bool"):
        seed_everything(True)


def test_seed_everything_logs_the_seed_at_info_on_the_accelkit_logger(caplog, monkeypatch):
    for name in ("ACCELKIT_SEED", "PL_GLOBAL_SEED", "RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PL_SEED_WORKERS", "0")
    monkeypatch.setenv("ACCELKIT_SEED_WORKERS", "0")
    with caplog.at_level(logging.INFO, logger="accelkit"):
        assert seed_everything(11) == 11
        seed_everything(12, verbose=False)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("accelkit.utilities.seed", logging.INFO, "Seed set to 11")]
    monkeypatch.setenv("PL_GLOBAL_SEED", "21")  # a Lightning program's environment keeps its meaning
    monkeypatch.delenv("ACCELKIT_SEED")
    assert seed_everything() == 21
    monkeypatch.setenv("ACCELKIT_SEED", "22")
    with pytest.warns(UserWarning, match="ACCELKIT_SEED='22' and PL_GLOBAL_SEED='23' differ: accelkit seeds with "
                                         "ACCELKIT_SEED's 22"):
        monkeypatch.setenv("PL_GLOBAL_SEED", "23")
        assert seed_everything() == 22


# ------------------------------------------------------------------- names and types
def test_the_lightning_utilities_names_import():
    import accelkit.utilities as utilities
    from accelkit.utilities import types

    for name in ("grad_norm", "rank_zero_info", "rank_zero_warn", "rank_zero_debug", "rank_zero_only",
                 "rank_zero_deprecation", "CombinedLoader", "AttributeDict", "seed_everything",
                 "move_data_to_device", "apply_to_collection"):
        assert name in utilities.__all__ and callable(getattr(utilities, name)), name
    assert AttributeDict(lr=0.1).lr == 0.1 and seed_everything(3) == 3
    for name in ("STEP_OUTPUT", "TRAIN_DATALOADERS", "EVAL_DATALOADERS", "OptimizerLRScheduler", "LRSchedulerConfig",
                 "LRSchedulerConfigType", "OptimizerLRSchedulerConfig", "LRSchedulerTypeUnion", "LRSchedulerPLType"):
        assert hasattr(types, name), name
    scheduler = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=1.0), 1)
    assert isinstance(scheduler, types.LRSchedulerTypeTuple) and isinstance(scheduler, types.LRScheduler)
    assert types.LRSchedulerConfig(scheduler).interval == "epoch"

    class Annotated(accelkit.Module):  # what Lightning users write in their signatures resolves
        def training_step(self, batch: typing.Any, batch_idx: int) -> types.STEP_OUTPUT: ...

        def configure_optimizers(self) -> types.OptimizerLRScheduler: ...

        def val_dataloader(self) -> types.EVAL_DATALOADERS: ...

    hints = typing.get_type_hints(Annotated.configure_optimizers, {"types": types})
    assert hints["return"] == types.OptimizerLRScheduler


def test_lr_scheduler_config_lives_in_utilities_types_and_names_the_keys_of_an_lr_scheduler_dict():
    from accelkit.module import optimizers
    from accelkit.utilities import types

    # Lightning's home of the class; the module that reads configure_optimizers names the same class
    assert types.LRSchedulerConfig.__module__ == "accelkit.utilities.types"
    assert optimizers.LRSchedulerConfig is types.LRSchedulerConfig

    class UnknownKey(accelkit.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(1, 1)

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1),
                                                       "every": 2}}

    accepted = "['scheduler', 'name', 'interval', 'frequency', 'monitor', 'strict']"
    with pytest.raises(ValueError, match=re.escape(f"unknown lr_scheduler key(s) ['every']; accepted: {accepted}")):
        optimizers.configure_optimizers(UnknownKey())


def test_apply_to_collection_and_move_data_to_device():
    from accelkit.utilities import apply_to_collection, move_data_to_device

    nested = {"a": torch.ones(2), "b": [1, torch.zeros(1)], "c": (torch.ones(1), "text")}
    doubled = apply_to_collection(nested, torch.Tensor, lambda t: t * 2)
    assert doubled["a"].tolist() == [2, 2] and doubled["b"][0] == 1 and doubled["c"][1] == "text"
    dropped = apply_to_collection([torch.ones(1), 5], int, lambda v: None, include_none=False)
    assert len(dropped) == 1
    assert move_data_to_device([torch.ones(1)], "cpu")[0].device.type == "cpu"


# ------------------------------------------------------------------- ParallelStrategy
def test_parallel_strategy_is_the_base_of_the_multi_process_strategies():
    from accelkit.strategies import DDPSpawnStrategy, DDPStrategy, ParallelStrategy, SingleDeviceStrategy

    assert issubclass(DDPStrategy, ParallelStrategy) and issubclass(DDPSpawnStrategy, ParallelStrategy)
    assert not issubclass(SingleDeviceStrategy, ParallelStrategy)
    spawn = accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False).strategy
    assert isinstance(spawn, ParallelStrategy) and spawn.num_processes == 2
    assert spawn.parallel_devices == [torch.device("cpu")] * 2
    single = accelkit.Trainer(accelerator="cpu", devices=1, logger=False).strategy
    assert not isinstance(single, ParallelStrategy)
    one = accelkit.Trainer(accelerator="cpu", devices=1, strategy="ddp", logger=False).strategy
    assert isinstance(one, ParallelStrategy) and one.num_processes == 1
    one.connect(one.accelerator, [0], 1, one.precision)
    assert one.reduce_boolean_decision(True) and not one.reduce_boolean_decision(False, all=False)


# ------------------------------------------------------------------- Module attributes
def test_on_gpu_is_false_on_the_cpu_in_and_out_of_a_run():
    seen: list[bool] = []

    class Asks(Regression):
        def on_train_start(self) -> None:
            seen.append(self.on_gpu)

    model = Asks()
    assert model.on_gpu is False and model.on_graphics_processor is False
    trainer(limit_train_batches=1).fit(model, DataLoader(data(), batch_size=4))
    assert seen == [False] and model.on_gpu is False


def test_on_gpu_asks_the_accelerator_classes_for_the_modules_device_type():
    from accelkit.accelerator import graphics_processor_device_types

    class MetaBoard(accelkit.Accelerator):  # a plugin's graphics processor, here on torch's "meta" device
        name = "meta_board"
        is_graphics_processor = True
        device_type = "meta"

    try:
        assert "meta" in graphics_processor_device_types()
        model = Regression().to("meta")
        assert model.on_gpu is True
        assert Regression().on_gpu is False
    finally:
        del MetaBoard
        gc.collect()
    assert "meta" not in graphics_processor_device_types()


def test_print_from_global_zero_only(capsys):
    class Prints(Regression):
        def on_train_start(self) -> None:
            self.print("from the module", self.global_rank)

    trainer(limit_train_batches=1).fit(Prints(), DataLoader(data(), batch_size=4))
    assert "from the module 0" in capsys.readouterr().out


def test_freeze_and_unfreeze():
    model = Regression()
    model.freeze()
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    model.unfreeze()
    assert model.training and all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("method", ["script", "trace"])
def test_to_torchscript_gives_the_same_outputs_and_saves(tmp_path, method):
    model = Regression()
    model.train()
    path = tmp_path / f"model-{method}.pt"
    scripted = model.to_torchscript(path, method=method)
    assert model.training, "the training mode is put back"
    x = torch.randn(4, 3)
    loaded = torch.jit.load(str(path))
    assert torch.allclose(loaded(x), model(x)) and torch.allclose(scripted(x), model(x))


def test_to_torchscript_trace_needs_an_input_and_a_known_method():
    model = Regression()
    model.example_input_array = None
    with pytest.raises(ValueError, match="example_input_array"):
        model.to_torchscript(method="trace")
    assert model.to_torchscript(method="trace", example_inputs=torch.zeros(1, 3)) is not None
    with pytest.raises(ValueError, match="use 'script' or 'trace'"):
        model.to_torchscript(method="compile")


@pytest.mark.skipif(importlib.util.find_spec("onnx") is not None, reason="onnx is installed here")
def test_to_onnx_without_onnx_names_the_package(tmp_path):
    with pytest.raises(ModuleNotFoundError, match="needs the 'onnx' package") as raised:
        Regression().to_onnx(tmp_path / "model.onnx")
    assert raised.value.name == "onnx"


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="onnx is not installed")
def test_to_onnx_writes_a_model(tmp_path):
    path = tmp_path / "model.onnx"
    Regression().to_onnx(path, dynamo=False)
    import onnx

    onnx.checker.check_model(onnx.load(str(path)))


# ------------------------------------------------------------------- Trainer forms
class Digits(accelkit.DataModule):
    def train_dataloader(self):
        return DataLoader(data(16), batch_size=4)

    def val_dataloader(self):
        return DataLoader(data(8, 1), batch_size=4)

    def test_dataloader(self):
        return DataLoader(data(8, 2), batch_size=4)

    def predict_dataloader(self):
        return DataLoader(data(8, 3), batch_size=4)


def test_a_datamodule_as_the_second_positional_argument_of_every_stage():
    model, dm = Regression(), Digits()
    t = trainer()
    t.fit(model, dm)
    assert t.datamodule is dm and t.global_step == 4
    assert "val_loss" in t.validate(model, dm, verbose=False)[0]
    assert "test_loss" in t.test(model, dm, verbose=False)[0]
    assert len(t.predict(model, dm)) == 2
    with pytest.raises(ValueError, match="pass it once"):
        t.fit(model, dm, datamodule=dm)


class Counting:
    """A torch.compile backend that counts the graphs it is given and runs them as they are."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list) -> typing.Callable:
        self.graphs += 1
        return graph.forward


def test_a_compiled_module_is_accepted_by_every_stage_and_runs_its_compiled_forward():
    backend = Counting()
    model = Regression()
    compiled = torch.compile(model, backend=backend)
    before = model.layer.weight.detach().clone()
    t = trainer()
    t.fit(compiled, Digits())
    assert backend.graphs >= 1, "the forward ran compiled"
    assert not torch.equal(before, model.layer.weight) and t.lightning_module is model
    assert "forward" not in model.__dict__, "the module's own forward is back after the run"
    assert "val_loss" in t.validate(compiled, Digits(), verbose=False)[0]
    assert "test_loss" in t.test(compiled, Digits(), verbose=False)[0]
    predictions = t.predict(compiled, Digits())
    assert torch.allclose(torch.cat(predictions), model(torch.cat([x for x, _ in DataLoader(data(8, 3))])))


def test_a_compiled_plain_torch_module_is_still_refused_with_the_reason():
    with pytest.raises(TypeError, match="needs an accelkit.Module, got Linear"):
        trainer().fit(torch.compile(nn.Linear(3, 1), backend="eager"), DataLoader(data(), batch_size=4))


@pytest.mark.slow  # more than a few seconds
def test_a_copy_of_a_module_with_a_compiled_forward_computes_with_its_own_weights():
    from accelkit.trainer.compiled import CompiledForward

    model = Regression()
    compiled = torch.compile(model, backend="eager")
    CompiledForward(compiled.dynamo_ctx).attach(model)
    twin = copy.deepcopy(model)  # what a weight-averaging callback does
    with torch.no_grad():
        twin.layer.weight.zero_()
        twin.layer.bias.fill_(1.0)
    x = torch.randn(2, 3)
    assert torch.equal(twin(x), torch.ones(2, 1)) and not torch.equal(model(x), torch.ones(2, 1))
    CompiledForward.detach(model)
    assert "forward" not in model.__dict__ and math.isfinite(float(model(x).sum()))


def test_rank_zero_warn_points_at_its_caller_and_rank_zero_only_returns_its_default(monkeypatch):
    import warnings

    from accelkit.utilities import rank_zero_only, rank_zero_warn

    def caller():
        rank_zero_warn("from the caller")  # the line the warning must name
        return caller.__code__.co_firstlineno + 1

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        line = caller()
    assert [(w.filename, w.lineno) for w in seen] == [(__file__, line)]
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert rank_zero_only(lambda: "ran", default="skipped")() == "skipped"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        caller()
    assert seen == []  # not rank 0: nothing is warned


# ------------------------------------------------------------------- rank_zero_only before any run
@pytest.mark.slow
@pytest.mark.parametrize("variable, value", [(None, None), ("RANK", "1"), ("LOCAL_RANK", "2"), ("SLURM_PROCID", "3"),
                                             ("JSM_NAMESPACE_RANK", "1")])
def test_rank_zero_only_has_the_launchers_rank_from_import(forked_python, variable, value):
    """As Lightning's, ``rank_zero_only.rank`` is set when accelkit is imported, from the first of ``RANK``,
    ``LOCAL_RANK``, ``SLURM_PROCID``, ``JSM_NAMESPACE_RANK`` (a start-up ``@rank_zero_only`` call works before any
    Trainer exists, and is skipped on a launcher's other ranks); ``lightning_utilities``' decorator, which programs
    written for Lightning import directly, gets the same rank; a run then sets the rank it knows (here 0). Forked
    from the prewarmed interpreter, which imported torch only: accelkit and lightning_utilities are imported here."""
    env = {name: "" for name in rank_zero_module.LAUNCHER_RANK_VARIABLES}
    if variable:
        env[variable] = value
    out = forked_python("""
        import json
        from torch.utils.data import DataLoader, TensorDataset
        import torch
        import accelkit
        from accelkit.utilities import rank_zero_only

        @rank_zero_only
        def log_hyperparameters():
            return "logged"

        seen = {"rank": rank_zero_only.rank, "call": log_hyperparameters()}
        try:
            from lightning_utilities.core.rank_zero import rank_zero_only as theirs
        except ImportError:
            theirs = None
        if theirs is not None:
            seen["theirs"] = theirs(log_hyperparameters.__wrapped__)()

        class Net(accelkit.Module):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)
            def training_step(self, batch, batch_idx):
                return self.layer(batch[0]).sum()
            def on_train_start(self):
                seen["in_run"] = rank_zero_only.rank
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
        accelkit.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False).fit(Net(), data)
        seen["after_run_theirs"] = theirs.rank if theirs is not None else 0
        print(json.dumps(seen))
    """, env=env)
    rank = int(value) if value else 0
    assert out["rank"] == rank
    assert out["call"] == ("logged" if rank == 0 else None)
    if importlib.util.find_spec("lightning_utilities") is not None:
        assert out["theirs"] == out["call"]
    assert out["in_run"] == 0 and out["after_run_theirs"] == 0
