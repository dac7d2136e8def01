"""Callbacks written for Lightning run on accelkit's Trainer (issue 22, item 3).

Libraries ship callbacks deriving from ``lightning.pytorch.Callback`` (or ``pytorch_lightning.Callback``):
optuna-integration's pruning callback, Lightning's own callback classes used as a library's. With ``lightning``
installed, accelkit's Trainer accepts them and calls their hooks where it calls its own callbacks' (the order is
checked by ``test_hook_order.py::test_a_lightning_callback_runs_its_hooks_in_lightning_order``), with its Trainer
and the user's Module. What such a callback asks that accelkit lacks fails with a sentence naming the attribute.
The core never imports Lightning: it tells such a callback from its class's MRO module names.

The tests with real libraries fit in this process (one CPU device); the conformance scripts
``optuna_pruning.py`` and ``lightning_callbacks.py`` run the same under ``ddp_spawn``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.errors import ConfigurationError  # noqa: E402
from helpers.models import RegressionModule, quiet_trainer, regression_data  # noqa: E402

pl = pytest.importorskip("lightning.pytorch", reason="these tests need lightning installed")


def loader() -> DataLoader:
    return DataLoader(regression_data(16), batch_size=4)


class Asks(pl.Callback):
    """A Lightning callback that reads ``trainer.<name>`` when training starts."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        getattr(trainer, self.name)


def test_other_objects_are_still_refused_naming_them(tmp_path):
    with pytest.raises(ConfigurationError, match=r"callbacks=\[5\] \(list\) is not accepted: callbacks takes an "
                                                r"accelkit.Callback \(or, with lightning installed, a "
                                                r"lightning.pytorch Callback\)"):
        quiet_trainer(tmp_path, callbacks=[5])
    # a string is the name of a callback a plugin provides (issue 26): an unknown one is named as such
    with pytest.raises(ConfigurationError, match="callback 'early' is not a registered callback"):
        quiet_trainer(tmp_path, callbacks=["early"])


def test_a_lightning_callback_gets_accelkits_trainer_and_module(tmp_path):
    seen: dict[str, Any] = {}

    class Reads(pl.Callback):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            seen.update(trainer=trainer, module=pl_module, epoch=trainer.current_epoch,
                        loss=float(trainer.callback_metrics["train_loss"]), rank=trainer.global_rank)

    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=Reads())
    module = RegressionModule()
    trainer.fit(module, loader())
    assert seen["trainer"] is trainer and seen["module"] is module
    assert (seen["epoch"], seen["rank"]) == (1, 0) and seen["loss"] > 0


@pytest.mark.parametrize(("name", "expected"), [
    ("_logger_connector", "accelkit's Trainer has no attribute '_logger_connector': it is a private part of "
                          "Lightning's Trainer"),
    ("curent_epoch", "accelkit's Trainer has no attribute 'curent_epoch'; did you mean 'current_epoch'?"),
])
def test_what_accelkit_lacks_fails_with_a_sentence_naming_it(tmp_path, name, expected):
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[Asks(name)])
    with pytest.raises(AttributeError) as info:
        trainer.fit(RegressionModule(), loader())
    assert str(info.value).startswith(expected), str(info.value)


@pytest.mark.parametrize(("name", "make", "needs"), [
    ("LearningRateMonitor", lambda: pl.callbacks.LearningRateMonitor(), "the fit loop, trainer.fit_loop"),
    ("StochasticWeightAveraging", lambda: pl.callbacks.StochasticWeightAveraging(swa_lrs=0.01),
     "the fit loop, trainer.fit_loop"),
    ("GradientAccumulationScheduler", lambda: pl.callbacks.GradientAccumulationScheduler({0: 1, 1: 2}),
     "the LightningModule class"),
    ("DeviceStatsMonitor", lambda: pl.callbacks.DeviceStatsMonitor(), "the logger connector"),
    ("ThroughputMonitor", lambda: pl.callbacks.ThroughputMonitor(batch_size_fn=len), "the precision plugin"),
])
def test_lightnings_own_callbacks_that_need_its_trainer_are_refused_when_the_trainer_is_made(tmp_path, name, make,
                                                                                             needs):
    """Lightning's own classes that read Lightning's Trainer internals failed in the middle of the fit with an
    AttributeError (or Lightning's own "Expected a parent"); they are refused at once, naming accelkit's callback of
    the same name, or, for ThroughputMonitor, that accelkit has none. A subclass is refused the same way."""
    callback = make()
    with pytest.raises(ConfigurationError) as info:
        quiet_trainer(tmp_path, callbacks=[callback])
    text = str(info.value)
    assert text.startswith(f"callbacks: {name} is Lightning's own lightning.pytorch.callbacks."), text
    assert f"needs a part of Lightning's Trainer that accelkit's does not have ({needs}" in text, text
    if name == "ThroughputMonitor":
        assert "There is no accelkit ThroughputMonitor yet" in text, text
    else:
        assert text.endswith(f"Use accelkit's, with the same arguments: from accelkit.callbacks import {name}."), text
        assert hasattr(accelkit.callbacks, name)
    subclass = type(f"My{name}", (type(callback),), {})
    with pytest.raises(ConfigurationError, match=rf"^callbacks: My{name} is Lightning's own"):
        quiet_trainer(tmp_path, callbacks=[subclass.__new__(subclass)])


def test_a_property_failing_inside_keeps_its_own_error(tmp_path):
    class Broken(accelkit.Trainer):
        @property
        def broken(self) -> Any:
            return self.run_state.no_such_thing

    with pytest.raises(AttributeError, match="no_such_thing"):
        Broken(accelerator="cpu", devices=1, logger=False).broken


def test_the_accelerator_connector_answers_only_is_distributed(tmp_path):
    trainer = quiet_trainer(tmp_path)
    assert trainer._accelerator_connector.is_distributed is False
    with pytest.raises(AttributeError, match=r"trainer._accelerator_connector.strategy is a private part of "
                                             r"Lightning's Trainer that accelkit does not have"):
        trainer._accelerator_connector.strategy


@pytest.mark.slow
def test_the_core_never_imports_lightning(run_python):
    """A fit with accelkit's own callbacks leaves ``lightning`` and ``pytorch_lightning`` unimported."""
    found = run_python("""
        import json, sys
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        import accelkit
        from accelkit.callbacks import EarlyStopping

        class Net(accelkit.Module):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)
            def training_step(self, batch, batch_idx):
                loss = self.layer(batch[0]).pow(2).mean()
                self.log("train_loss", loss)
                return loss
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
        trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False,
                                   enable_checkpointing=False, enable_progress_bar=False,
                                   callbacks=[EarlyStopping("train_loss", check_on_train_epoch_end=True)])
        trainer.fit(Net(), data)
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("lightning", "pytorch_lightning"))))
    """)
    assert found == []


@pytest.mark.slow
def test_optuna_pruning_callback_reports_and_prunes(tmp_path):
    """optuna-integration's ``PyTorchLightningPruningCallback``, unchanged: a study of two trials, the first
    reports each epoch's ``val_loss`` and completes, the second (a learning rate of 0) is pruned at epoch 0."""
    optuna = pytest.importorskip("optuna")
    integration = pytest.importorskip("optuna_integration")
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial: Any) -> float:
        lr = trial.suggest_float("lr", 0.0, 0.1)
        module = RegressionModule(lr=lr)
        callback = integration.PyTorchLightningPruningCallback(trial, monitor="val_loss")
        trainer = quiet_trainer(tmp_path, max_epochs=3, num_sanity_val_steps=0, callbacks=[callback])
        trainer.fit(module, loader(), loader())
        return float(trainer.callback_metrics["val_loss"])

    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0))
    study.enqueue_trial({"lr": 0.1})
    study.enqueue_trial({"lr": 0.0})
    study.optimize(objective, n_trials=2)
    first, second = study.trials
    assert first.state == optuna.trial.TrialState.COMPLETE
    assert sorted(first.intermediate_values) == [0, 1, 2]
    assert first.value == pytest.approx(first.intermediate_values[2])
    assert second.state == optuna.trial.TrialState.PRUNED
    assert sorted(second.intermediate_values) == [0]


@pytest.mark.slow
def test_lightnings_early_stopping_and_backbone_finetuning_as_library_callbacks(tmp_path):
    """Two of Lightning's callback classes, used as a third-party library's: ``EarlyStopping`` stops a fit whose
    ``val_loss`` does not improve, and ``BackboneFinetuning`` keeps ``backbone`` frozen, then adds it to the
    optimizer at the epoch it names."""
    from lightning.pytorch.callbacks import BackboneFinetuning, EarlyStopping

    class WithBackbone(RegressionModule):
        def __init__(self, lr: float) -> None:
            super().__init__(lr=lr)
            self.backbone = torch.nn.Linear(4, 4)
            self.frozen_at: list[bool] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(self.backbone(x))

        def on_train_epoch_start(self) -> None:
            self.frozen_at.append(not any(p.requires_grad for p in self.backbone.parameters()))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=self.lr)

    stop = EarlyStopping(monitor="val_loss", patience=2)
    flat = quiet_trainer(tmp_path, max_epochs=10, num_sanity_val_steps=0, callbacks=[stop])
    flat.fit(WithBackbone(lr=0.0), loader(), loader())
    assert (stop.stopped_epoch, flat.current_epoch) == (2, 3)

    module = WithBackbone(lr=0.05)
    finetune = quiet_trainer(tmp_path, max_epochs=3, num_sanity_val_steps=0,
                             callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=2)])
    finetune.fit(module, loader(), loader())
    assert module.frozen_at == [True, True, False]
    assert len(finetune.optimizers[0].param_groups) == 2


def test_a_library_checkpoint_or_early_stopping_runs_after_the_modules_epoch_end_as_in_lightning(tmp_path):
    """Lightning's loops run callbacks deriving from its ``Checkpoint`` or ``EarlyStopping`` after the Module's
    ``on_train_epoch_end`` (so they see what it logged there), other callbacks before it."""
    order: list[str] = []

    class LibraryCheckpoint(pl.callbacks.Checkpoint):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            order.append("checkpoint")

    class LibraryStopping(pl.callbacks.EarlyStopping):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            order.append("early_stopping")

    class Plain(pl.Callback):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            order.append("plain")

    class Logs(RegressionModule):
        def on_train_epoch_end(self) -> None:
            order.append("module")

    # (a checkpoint callback with enable_checkpointing=False is refused, as in Lightning)
    trainer = quiet_trainer(tmp_path, max_epochs=1, enable_checkpointing=True,
                            callbacks=[LibraryCheckpoint(), LibraryStopping(monitor="x"), Plain()])
    trainer.fit(Logs(), loader())
    # Lightning 2.6.6 gives this order (its checkpoint callbacks run last: it moves them to the end of the list)
    assert order == ["plain", "module", "early_stopping", "checkpoint"]


@pytest.mark.slow
def test_lightnings_model_checkpoint_keeps_its_top_k_and_resumes_from_last(tmp_path):
    """Lightning's own ``ModelCheckpoint`` as a library callback: it drops a checkpoint it no longer keeps through
    ``trainer.strategy.remove_checkpoint`` (accelkit's strategies lacked it: the second epoch failed with an
    AttributeError), keeps the best and the last, is the run's checkpoint callback (accelkit added its default one
    beside it, writing a second set of files), runs last, and a fit resumes from its ``ckpt_path="last"``."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    keep = ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_loss", save_top_k=1, save_last=True)
    trainer = quiet_trainer(tmp_path, max_epochs=3, num_sanity_val_steps=0, enable_checkpointing=True,
                            callbacks=[keep])
    trainer.fit(RegressionModule(lr=0.05), loader(), loader())
    best = Path(keep.best_model_path)
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == sorted([best.name, "last.ckpt"])
    assert best.name == "epoch=2-step=12.ckpt", keep.best_k_models  # the loss falls: each epoch's replaced the last

    resumed = quiet_trainer(tmp_path, max_epochs=4, num_sanity_val_steps=0, enable_checkpointing=True,
                            callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_loss", save_last=True)])
    resumed.fit(RegressionModule(lr=0.05), loader(), loader(), ckpt_path="last")
    assert (resumed.current_epoch, resumed.global_step) == (4, 16)
    # the library's callback is the run's only checkpoint callback, as in Lightning: no default one beside it
    assert resumed.checkpoint_callbacks == [resumed.checkpoint_callback] and resumed.callbacks[-1] is \
        resumed.checkpoint_callback and not (tmp_path / "checkpoints").exists()
    assert resumed.checkpoint_path == Path(resumed.checkpoint_callback.last_model_path)


def test_lightnings_model_checkpoint_resumed_from_a_crafted_state_removes_nothing_but_checkpoints(tmp_path):
    """Issue 36, case 2, through Lightning's own ``ModelCheckpoint`` (whose check of the folder keeps a ``..``): its
    restored k-th path names a folder above its folder; the strategy's ``remove_checkpoint`` removes only checkpoints,
    so the folder survives, named in a warning (it was removed with ``shutil.rmtree``)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    (tmp_path / "victim_dir").mkdir()
    (tmp_path / "victim_dir" / "precious.txt").write_text("keep me")
    folder = tmp_path / "run" / "ckpts"
    first = ModelCheckpoint(dirpath=folder, monitor="val_loss", save_top_k=1, save_last=True)
    quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0, enable_checkpointing=True,
                  callbacks=[first]).fit(RegressionModule(lr=0.05), loader(), loader())
    checkpoint = torch.load(folder / "last.ckpt", weights_only=True)
    state = next(v for k, v in checkpoint["callbacks"].items() if k.startswith("ModelCheckpoint"))
    victim = f"{folder}/../../victim_dir"
    state.update(best_k_models={victim: torch.tensor(1e9)}, kth_best_model_path=victim, best_model_path=victim,
                 kth_value=torch.tensor(1e9), best_model_score=torch.tensor(1e9))
    torch.save(checkpoint, tmp_path / "crafted.ckpt")

    resumed = ModelCheckpoint(dirpath=folder, monitor="val_loss", save_top_k=1, save_last=True)
    trainer = quiet_trainer(tmp_path, max_epochs=2, num_sanity_val_steps=0, enable_checkpointing=True,
                            callbacks=[resumed])
    with pytest.warns(UserWarning, match=re.escape(f"remove_checkpoint({victim!r}) removed nothing: it is neither a "
                                                   "checkpoint file")):
        trainer.fit(RegressionModule(lr=0.05), loader(), loader(), ckpt_path=tmp_path / "crafted.ckpt")
    assert (tmp_path / "victim_dir" / "precious.txt").read_text() == "keep me"
    assert Path(resumed.best_model_path).name == "epoch=1-step=8.ckpt"
