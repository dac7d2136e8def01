"""Every LightningModule and Callback hook is called in Lightning 2.x's order, with Lightning's arguments.

The expected sequences below are built from what Lightning itself records in
``tests/tests_pytorch/models/test_hooks.py`` (``test_trainer_model_hook_system_fit``, ``..._eval``,
``..._predict``, ``..._fit_no_val_and_resume_max_epochs``) and from its loops (``loops/fit_loop.py``,
``loops/training_epoch_loop.py``, ``loops/evaluation_loop.py``, ``loops/prediction_loop.py``,
``loops/optimization/automatic.py``, ``plugins/precision/precision.py``, ``trainer/trainer.py::_run``), Lightning
2.6. The entries are in call (entry) order: Lightning's test appends after a hook returns, so there a caller such
as ``optimizer_step`` appears after the hooks its closure runs; here it comes first. Methods of ``nn.Module``
that Lightning's test also records (``zero_grad``, ``train``, ``forward``) are not hooks and are not recorded.

Rule (``trainer/call.py``): the callbacks' hook runs right before the Module's hook of the same name, except
``on_train_epoch_end`` (monitoring callbacks such as ModelCheckpoint run after the Module) and the checkpoint
hooks (see :func:`save_checkpoint` and :func:`test_resume_loads_checkpoint_hooks_in_lightning_order`).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from helpers.guards import TESTS, child_env, hang_guard  # noqa: E402
from helpers.hook_recorder import HookLog, HookRecorderCallback, HookRecorderModule, call  # noqa: E402
from helpers.requirements import requires_torch_xla  # noqa: E402

CB = "Callback."
QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False)


# ---------------------------------------------------------------------------------------------- expectations
def both(name: str, **args: Any) -> list[str]:
    """The callbacks' hook, then the Module's, with the same identifying arguments (``trainer/call.py``)."""
    return [call(CB + name, **args), call(name, **args)]


def run_start(stage: str, prepare_data: bool = True, dm: bool = False) -> list[str]:
    """``Trainer._run``: ``configure_callbacks`` (``_attach_model_callbacks``), ``prepare_data`` (only on local
    rank 0; issue 8 runs it once per node before spawning, so spawned workers never call it; the DataModule's
    first, ``data_connector.prepare_data``), ``setup`` of the DataModule, the callbacks, the Module
    (``call._call_setup_hook``), ``configure_model`` (Lightning calls it when overridden, as here)."""
    seq = [call("configure_callbacks")]
    if prepare_data:
        seq += [*([call("DataModule.prepare_data")] if dm else []), call("prepare_data")]
    return seq + [*([call("DataModule.setup", stage=stage)] if dm else []), *both("setup", stage=stage),
                  call("configure_model")]


def run_end(stage: str, dm: bool = False) -> list[str]:
    """``call._call_teardown_hook``: the DataModule's ``teardown``, the callbacks', the Module's."""
    return [*([call("DataModule.teardown", stage=stage)] if dm else []), *both("teardown", stage=stage)]


def loader(name: str, dm: bool = False) -> str:
    """A ``*_dataloader`` call: the DataModule's when one is given, else the Module's."""
    return call(f"DataModule.{name}" if dm else name)


def transfer(device: str, dataloader_idx: int = 0) -> list[str]:
    """The batch-transfer hooks, which run BEFORE ``on_*_batch_start`` (``training_epoch_loop.advance``,
    ``evaluation_loop._evaluation_step``; the docs' pseudo-code, which shows them after, is simplified)."""
    return [call("on_before_batch_transfer", dataloader_idx=dataloader_idx),
            call("transfer_batch_to_device", device=device, dataloader_idx=dataloader_idx),
            call("on_after_batch_transfer", dataloader_idx=dataloader_idx)]


def train_batch(epoch: int, i: int, device: str, *, steps: bool = True, zero_grad: bool = True,
                epoch_scheduler: bool = False, clip: tuple[Any, Any] = (None, None)) -> list[str]:
    """One automatically optimized batch (test_hooks.py ``_auto_train_batch``).

    ``optimizer_step`` runs the closure inside ``optimizer.step``: ``training_step``, then on the first batch of
    an accumulation window ``on_before_zero_grad``/``optimizer_zero_grad``, then the backward hooks
    (``automatic.py::Closure.closure``); after the closure ``on_before_optimizer_step`` and
    ``configure_gradient_clipping`` with the Trainer's values as keywords (``precision.py::_after_closure``).
    A batch that only accumulates calls the closure without ``optimizer_step`` (``_AutomaticOptimization.run``).
    Epoch-interval schedulers step on the last batch, before ``on_train_batch_end``
    (``training_epoch_loop.advance``)."""
    closure = [call("training_step", batch_idx=i)]
    if zero_grad:
        closure += [*both("on_before_zero_grad"), call("optimizer_zero_grad", epoch=epoch, batch_idx=i)]
    closure += [*both("on_before_backward"), call("backward"), *both("on_after_backward")]
    seq = [*transfer(device), *both("on_train_batch_start", batch_idx=i)]
    if steps:
        seq += [call("optimizer_step", epoch=epoch, batch_idx=i, closure=True), *closure,
                *both("on_before_optimizer_step"),
                call("configure_gradient_clipping", gradient_clip_val=clip[0], gradient_clip_algorithm=clip[1])]
    else:
        seq += closure
    if epoch_scheduler:
        seq.append(call("lr_scheduler_step", scheduler="StepLR", metric=None))
    return seq + both("on_train_batch_end", outputs=["loss"], batch_idx=i)


def manual_batch(i: int, device: str) -> list[str]:
    """One manually optimized batch (test_hooks.py ``_manual_train_batch``) of :class:`ManualModule`: the hooks
    ``manual_backward`` and ``opt.step(closure)`` call inside ``training_step``; the closure runs before
    ``on_before_optimizer_step`` (``precision.py::_wrap_closure``)."""
    return [*transfer(device), *both("on_train_batch_start", batch_idx=i), call("training_step", batch_idx=i),
            *both("on_before_backward"), call("backward"), *both("on_after_backward"), call("closure"),
            *both("on_before_optimizer_step"), *both("on_train_batch_end", outputs=["loss"], batch_idx=i)]


def eval_loop(stage: str, batches: int, device: str, save: list[str] = ()) -> list[str]:
    """A validation or test run (``evaluation_loop.py``; test_hooks.py ``_eval_epoch``/``_eval_batch`` and
    ``test_trainer_model_hook_system_eval``). ``on_*_model_train`` is called because the recorder overrides it
    (Lightning calls it only when overridden). One loader: no ``dataloader_idx`` argument. ``save``: what a
    ModelCheckpoint saving in ``on_validation_end`` calls, between the recording callback's ``on_validation_end``
    and the Module's: every callback runs before the Module there (``_on_evaluation_end``)."""
    step, key = ("validation_step", ["x"]) if stage == "validation" else ("test_step", ["y"])
    seq = [call(f"on_{stage}_model_eval"), *both(f"on_{stage}_start"), *both(f"on_{stage}_epoch_start")]
    for i in range(batches):
        seq += [*transfer(device), *both(f"on_{stage}_batch_start", batch_idx=i), call(step, batch_idx=i),
                *both(f"on_{stage}_batch_end", outputs=key, batch_idx=i)]
    return seq + [*both(f"on_{stage}_epoch_end"), call(f"{CB}on_{stage}_end"), *save, call(f"on_{stage}_end"),
                  call(f"on_{stage}_model_train")]


def save_checkpoint(dm: bool = False) -> list[str]:
    """``checkpoint_connector.dump_checkpoint``: every callback's ``state_dict``, the DataModule's ``state_dict``,
    then callbacks' ``on_save_checkpoint``, then the Module's (test_hooks.py: ``Callback.state_dict``,
    ``Callback.on_save_checkpoint``, ``on_save_checkpoint``)."""
    return [call(CB + "state_dict"), *([call("DataModule.state_dict")] if dm else []),
            call(CB + "on_save_checkpoint"), call("on_save_checkpoint")]


def expected_fit(device: str = "cpu", *, epochs: int = 2, first_epoch: int = 0, train_batches: int = 2,
                 val_batches: int = 1, sanity_steps: int = 2, prepare_data: bool = True, accumulate: int = 1,
                 clip: tuple[Any, Any] = (None, None), stop_at: tuple[int, int] | None = None,
                 resumed: bool = False, manual: bool = False, dm: bool = False,
                 save_after_validation: bool = False) -> list[str]:
    """``Trainer.fit`` (test_hooks.py ``test_trainer_model_hook_system_fit``), with a ModelCheckpoint that saves
    at the end of each training epoch in which a step happened (``ModelCheckpoint.on_train_epoch_end``,
    ``_should_skip_saving_checkpoint``)."""
    seq = run_start("fit", prepare_data, dm)
    if resumed:
        # Module first, then callbacks, then their load_state_dict (test_..._resume_max_epochs)
        seq += [call("on_load_checkpoint"), call(CB + "on_load_checkpoint"),
                call(CB + "load_state_dict", state={"recorded": True})]
    seq += [call("configure_optimizers"), *both("on_fit_start")]
    if sanity_steps and val_batches:
        # Trainer._run_sanity_check: a callback-only hook around a validation run of min(steps, batches)
        # batches, without on_validation_model_zero_grad. Skipped only when the loops restart mid-epoch: a
        # checkpoint of a finished epoch is "not actually restarting" (FitLoop.restarting setter)
        seq += [call(CB + "on_sanity_check_start"), loader("val_dataloader", dm),
                *eval_loop("validation", min(sanity_steps, val_batches), device), call(CB + "on_sanity_check_end")]
    seq.append(loader("train_dataloader", dm))
    if val_batches and not sanity_steps:
        seq.append(loader("val_dataloader", dm))  # fit_loop.on_run_start loads them when the sanity check did not
    seq += both("on_train_start")
    for epoch in range(first_epoch, epochs):
        seq += both("on_train_epoch_start")
        stopped = stepped = False
        for i in range(train_batches):
            last = i == train_batches - 1
            if stop_at == (epoch, i):
                # on_train_batch_start returned -1: the rest of the epoch is skipped, no validation; since
                # Lightning 2.6 (PR #21307) epoch-interval schedulers still step (training_epoch_loop.advance)
                seq += [*transfer(device), *both("on_train_batch_start", batch_idx=i),
                        call("lr_scheduler_step", scheduler="StepLR", metric=None)]
                stopped = True
                break
            if manual:  # no lr_scheduler_step: _update_learning_rates returns under manual optimization
                seq += manual_batch(i, device)
                stepped = True
                continue
            steps = (i + 1) % accumulate == 0 or last
            seq += train_batch(epoch, i, device, steps=steps, zero_grad=i % accumulate == 0, epoch_scheduler=last,
                               clip=clip)
            stepped = stepped or steps
        if val_batches and not stopped:
            # training_epoch_loop.on_advance_end: the last batch always steps, so zero_grad then validation
            save = save_checkpoint(dm) if save_after_validation and stepped else []
            seq += [call("on_validation_model_zero_grad"), *eval_loop("validation", val_batches, device, save)]
        # fit_loop.on_advance_end: non-monitoring callbacks, the Module, then ModelCheckpoint (which saves)
        seq += [call(CB + "on_train_epoch_end"), call("on_train_epoch_end")]
        if stepped and not save_after_validation:  # no save when no step happened since the last save
            seq += save_checkpoint(dm)
    return seq + [*both("on_train_end"), *both("on_fit_end"), *run_end("fit", dm)]


def expected_eval(verb: str, device: str = "cpu", batches: int = 1, prepare_data: bool = True) -> list[str]:
    """``Trainer.validate``/``test`` (test_hooks.py ``test_trainer_model_hook_system_eval``)."""
    stage, loader = {"validate": ("validation", "val"), "test": ("test", "test")}[verb]
    return [*run_start(verb, prepare_data), call(f"{loader}_dataloader"), *eval_loop(stage, batches, device),
            *both("teardown", stage=verb)]


def expected_predict(device: str = "cpu", batches: int = 1, prepare_data: bool = True) -> list[str]:
    """``Trainer.predict`` (test_hooks.py ``test_trainer_model_hook_system_predict``): no ``on_predict_model_train``
    (not a Lightning 2.x hook)."""
    seq = [*run_start("predict", prepare_data), call("predict_dataloader"), call("on_predict_model_eval"),
           *both("on_predict_start"), *both("on_predict_epoch_start")]
    for i in range(batches):
        seq += [*transfer(device), *both("on_predict_batch_start", batch_idx=i), call("predict_step", batch_idx=i),
                *both("on_predict_batch_end", outputs="Tensor", batch_idx=i)]
    return seq + [*both("on_predict_epoch_end"), *both("on_predict_end"), *both("teardown", stage="predict")]


def assert_sequence(actual: list[str], expected: list[str], problems: list[str] = ()) -> None:
    """Equal sequences, else a unified diff of the two; and no argument problems noted by the recorder."""
    diff = "\n".join(difflib.unified_diff(expected, actual, "Lightning", "accelkit", n=2, lineterm=""))
    assert actual == expected, f"hook order differs from Lightning's:\n{diff}"
    assert not problems, problems


# ---------------------------------------------------------------------------------------------- runs
def trainer(tmp_path: Path, log: HookLog, **kwargs: Any) -> accelkit.Trainer:
    """A quiet 2-epoch CPU Trainer with the recording callback and a ModelCheckpoint of Lightning's defaults (the
    Trainer's own default checkpoint is a design choice of ours; this one pins Lightning's timing)."""
    from accelkit.callbacks import ModelCheckpoint

    args = dict(accelerator="cpu", devices=1, max_epochs=2, default_root_dir=tmp_path, **QUIET)
    args.update(kwargs)
    return accelkit.Trainer(callbacks=[HookRecorderCallback(log), ModelCheckpoint(dirpath=tmp_path / "ckpt")],
                            **args)


def test_fit_single_process(tmp_path):
    log = HookLog()
    trainer(tmp_path, log).fit(HookRecorderModule(log))
    assert_sequence(log.calls, expected_fit(), log.problems)
    # the callback's state_dict went into the checkpoint under its state key
    ckpt = torch.load(next((tmp_path / "ckpt").glob("*.ckpt")), weights_only=True)
    assert {"recorded": True} in ckpt["callbacks"].values()


@pytest.mark.parametrize("base", ["lightning.pytorch", "pytorch_lightning"])
def test_a_lightning_callback_runs_its_hooks_in_lightning_order(tmp_path, base):
    """A callback written for Lightning (deriving from Lightning's ``Callback``, as libraries' callbacks do) is
    accepted and called exactly where an accelkit Callback is, with the Trainer and the user's Module."""
    lightning_callback = pytest.importorskip(base).Callback
    methods = {k: v for k, v in vars(HookRecorderCallback).items() if not k.startswith("__") or k == "__init__"}
    recorder = type("LightningHookRecorder", (lightning_callback,), methods)
    assert not issubclass(recorder, accelkit.Callback)
    log = HookLog()
    from accelkit.callbacks import ModelCheckpoint

    run = accelkit.Trainer(callbacks=[recorder(log), ModelCheckpoint(dirpath=tmp_path / "ckpt")], accelerator="cpu",
                           devices=1, max_epochs=2, default_root_dir=tmp_path, **QUIET)
    run.fit(HookRecorderModule(log))
    assert_sequence(log.calls, expected_fit(), log.problems)
    ckpt = torch.load(next((tmp_path / "ckpt").glob("*.ckpt")), weights_only=True)
    assert {"recorded": True} in ckpt["callbacks"].values()


@pytest.mark.parametrize("verb", ["validate", "test", "predict"])
def test_evaluate_single_process(tmp_path, verb):
    log = HookLog()
    getattr(trainer(tmp_path, log), verb)(HookRecorderModule(log))
    expected = expected_predict() if verb == "predict" else expected_eval(verb)
    assert_sequence(log.calls, expected, log.problems)


def test_accumulate_grad_batches(tmp_path):
    """3 batches, accumulate 2: batch 0 accumulates (zero_grad, no optimizer_step), batch 1 steps (no zero_grad),
    batch 2 steps because it is the last of the epoch (``_should_accumulate``) and zeroes (2 % 2 == 0). Clipping
    values reach ``configure_gradient_clipping`` as given. No sanity check: the val loader loads at train start."""
    log = HookLog()
    trainer(tmp_path, log, max_epochs=1, accumulate_grad_batches=2, num_sanity_val_steps=0,
            gradient_clip_val=0.5, gradient_clip_algorithm="value").fit(HookRecorderModule(log, train_batches=3))
    expected = expected_fit(epochs=1, train_batches=3, sanity_steps=0, accumulate=2, clip=(0.5, "value"))
    assert_sequence(log.calls, expected, log.problems)
    assert sum(c.startswith("optimizer_step(") for c in log.calls) == 2


class WarmupModule(HookRecorderModule):
    """An LR warm-up in an ``optimizer_step`` override (Lightning's documented example): ``lr = 0.01 * (step+1)``."""

    def __init__(self, log: HookLog) -> None:
        super().__init__(log)
        self.seen_lrs: list[float] = []

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        self._log("optimizer_step", epoch=epoch, batch_idx=batch_idx, closure=callable(optimizer_closure))
        for group in optimizer.param_groups:
            group["lr"] = 0.01 * (self.trainer.global_step + 1)
        optimizer.step(closure=optimizer_closure)

    def on_before_optimizer_step(self, optimizer):
        super().on_before_optimizer_step(optimizer)
        self.seen_lrs.append(optimizer.param_groups[0]["lr"])


def test_overridden_optimizer_step(tmp_path):
    log = HookLog()
    model = WarmupModule(log)
    start = model.layer.weight.detach().clone()
    trainer(tmp_path, log).fit(model)
    assert_sequence(log.calls, expected_fit(), log.problems)
    # the override ran before the closure's hooks, on every step, and the steps happened
    assert model.seen_lrs == pytest.approx([0.01, 0.02, 0.03, 0.04])
    assert not torch.equal(start, model.layer.weight.detach())


def test_on_train_batch_start_minus_one_ends_the_epoch(tmp_path):
    """-1 at epoch 0, batch 1 of 3: that batch gets only its transfer and start hooks, epoch 0 has no validation,
    epoch 1 runs whole (Lightning: "skip training for the rest of the current epoch")."""
    log = HookLog()
    model = HookRecorderModule(log, train_batches=3, stop_at=(0, 1))
    fitted = trainer(tmp_path, log)
    fitted.fit(model)
    assert_sequence(log.calls, expected_fit(train_batches=3, stop_at=(0, 1)), log.problems)
    assert fitted.global_step == 4


class ManualModule(HookRecorderModule):
    """Manual optimization as in test_hooks.py: zero_grad, manual_backward, ``opt.step(closure)``."""

    def __init__(self, log: HookLog) -> None:
        super().__init__(log)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        self._log("training_step", batch_idx=batch_idx)
        opt = self.optimizers()
        opt.zero_grad()
        loss = self._loss(batch)
        self.manual_backward(loss)
        opt.step(closure=lambda: self._log("closure"))
        return {"loss": loss.detach()}


def test_manual_optimization_skips_the_automatic_hooks(tmp_path):
    """test_hooks.py ``_manual_train_batch``: no optimizer_step, optimizer_zero_grad, on_before_zero_grad,
    configure_gradient_clipping, lr_scheduler_step; ``manual_backward`` calls the backward hooks and
    ``opt.step`` calls the closure then ``on_before_optimizer_step``."""
    log = HookLog()
    trainer(tmp_path, log).fit(ManualModule(log))
    assert_sequence(log.calls, expected_fit(manual=True), log.problems)


def test_resume_loads_checkpoint_hooks_in_lightning_order(tmp_path):
    """``_restore_modules_and_callbacks`` after ``configure_model`` and before ``configure_optimizers``: the
    Module's ``on_load_checkpoint``, the callbacks', then their ``load_state_dict``. From the checkpoint of a
    finished epoch the sanity check still runs."""
    first = HookLog()
    trainer(tmp_path, first, max_epochs=1).fit(HookRecorderModule(first))
    ckpt = next((tmp_path / "ckpt").glob("*.ckpt"))
    log = HookLog()
    trainer(tmp_path / "resumed", log, max_epochs=2).fit(HookRecorderModule(log), ckpt_path=ckpt)
    assert_sequence(log.calls, expected_fit(first_epoch=1, resumed=True), log.problems)


def test_checkpoint_saved_after_validation_runs_before_the_modules_on_validation_end(tmp_path):
    """``ModelCheckpoint(save_on_train_epoch_end=False)`` saves in its ``on_validation_end``, which runs with the
    other callbacks BEFORE the Module's ``on_validation_end`` (only ``on_train_epoch_end`` puts monitoring
    callbacks after the Module: ``fit_loop.on_advance_end``); never during the sanity check."""
    from accelkit.callbacks import ModelCheckpoint

    log = HookLog()
    accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=2, default_root_dir=tmp_path, **QUIET,
                     callbacks=[HookRecorderCallback(log),
                                ModelCheckpoint(dirpath=tmp_path / "ckpt", save_on_train_epoch_end=False)]
                     ).fit(HookRecorderModule(log))
    assert_sequence(log.calls, expected_fit(save_after_validation=True), log.problems)


def test_datamodule_hooks_interleave_as_in_lightning(tmp_path):
    """A DataModule's hooks come first among equals: ``prepare_data`` and ``setup`` before the Module's and the
    callbacks', ``teardown`` before theirs; its loaders replace the Module's; its ``state_dict`` goes into each
    checkpoint between the callbacks' ``state_dict`` and ``on_save_checkpoint`` (test_hooks.py
    ``test_trainer_datamodule_hook_system``, ``checkpoint_connector.dump_checkpoint``). The Module's batch-transfer
    hooks still run: the DataModule does not override them (``_DataHookSelector``)."""
    from helpers.hook_recorder import HookRecorderDataModule

    log = HookLog()
    model = HookRecorderModule(log)
    trainer(tmp_path, log).fit(model, datamodule=HookRecorderDataModule(log, model))
    assert_sequence(log.calls, expected_fit(dm=True), log.problems)


def test_exception_calls_on_exception_and_no_teardown(tmp_path):
    """An error in ``training_step``: the callbacks' and the DataModule's ``on_exception``, then the error
    propagates; no ``on_train_end``, ``on_fit_end`` nor ``teardown`` hook (``call._call_and_handle_interrupt``,
    ``_interrupt``)."""
    from helpers.hook_recorder import HookRecorderDataModule

    log = HookLog()
    model = HookRecorderModule(log, fail_at=(0, 1))
    with pytest.raises(ValueError, match="deliberate failure"):
        trainer(tmp_path, log).fit(model, datamodule=HookRecorderDataModule(log, model))
    full = expected_fit(dm=True)
    failing_step = full.index(call("training_step", batch_idx=1)) + 1
    expected = [*full[:failing_step], call(CB + "on_exception", exception="ValueError"),
                call("DataModule.on_exception", exception="ValueError")]
    assert_sequence(log.calls, expected, log.problems)


# ---------------------------------------------------------------------------------------------- ddp_spawn
def spawned(tmp_path: Path, verb: str) -> tuple[HookLog, dict[int, dict[str, Any]]]:
    """Run ``verb`` on ddp_spawn with 2 CPU processes; the launching process's log and each rank's dump."""
    dump = tmp_path / f"{verb}-ranks"
    dump.mkdir()
    log = HookLog(dump)
    with hang_guard(180):
        getattr(trainer(tmp_path / verb, log, devices=2, strategy="ddp_spawn"), verb)(HookRecorderModule(log))
    return log, HookLog.read_dumps(dump)


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["fit", "validate", "test", "predict"])
def test_ddp_spawn_every_rank_in_lightning_order(tmp_path, verb):
    """Every rank runs the whole sequence (each rank's batch_idx counts its own shard); ``prepare_data`` runs
    once, in the launching process, before spawning (issue 8; Lightning: local rank 0 only)."""
    parent, ranks = spawned(tmp_path, verb)
    if verb == "fit":
        expected = expected_fit(prepare_data=False)
    elif verb == "predict":
        expected = expected_predict(prepare_data=False)
    else:
        expected = expected_eval(verb, prepare_data=False)
    assert sorted(ranks) == [0, 1]
    assert ranks[0]["pid"] != ranks[1]["pid"]
    for rank in (0, 1):
        assert_sequence(ranks[rank]["calls"], expected, ranks[rank]["problems"])
    # Lightning wraps the module in DistributedDataParallel only to fit (no gradients to reduce otherwise)
    wrapped = "DistributedDataParallel" if verb == "fit" else "HookRecorderModule"
    assert [ranks[rank]["facts"]["model"] for rank in (0, 1)] == [wrapped, wrapped]
    # Lightning's spawn launcher sends back weights, callback_metrics and ModelCheckpoint's best path only: no
    # callback hook runs in the launching process (multiprocessing.py::_collect_rank_zero_results)
    assert_sequence(parent.calls, [call("prepare_data")], parent.problems)


# ---------------------------------------------------------------------------------------------- XLA
@pytest.mark.slow
@pytest.mark.xla
@requires_torch_xla
def test_fit_on_xla_single_device(tmp_path, prewarmed):
    """The same fit on one XLA device (PJRT on the CPU), in a process of its own (forked from the ``prewarmed``
    interpreter, which never imports torch_xla): batches go to ``xla``."""
    env = child_env()
    for key in ("XRT_TPU_CONFIG", "TPU_NUM_DEVICES", "ACCELKIT_DISABLE_PLUGIN_AUTOLOAD"):
        env.pop(key, None)
    env.update({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1"})
    out = tmp_path / "xla.json"
    code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); from helpers.hook_recorder import main; main()"
    proc = prewarmed.run(["-c", code, "fit-xla", str(out)], cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    result = __import__("json").loads(out.read_text())
    assert result["strategy"] == "XLASingleStrategy"
    assert_sequence(result["calls"], expected_fit("xla"), result["problems"])
