"""The Trainer's settings (issue 40, item 2): one frozen :class:`~accelkit.trainer.settings.TrainerSettings` built by
the constructor, changed only through ``Trainer.replace_settings`` (the tuner's trials, a fit's epoch defaults, the
assignments Lightning allows) and put back by ``Trainer.restore``; every property of the Trainer typed."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import operator
import pickle
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.trainer.properties import TrainerProperties  # noqa: E402
from accelkit.trainer.settings import SettingsProperties, TrainerSettings  # noqa: E402
from accelkit.tuner import Tuner  # noqa: E402
from helpers.models import RegressionModule, quiet_trainer  # noqa: E402


class SeesSettings(accelkit.Callback):
    """Records the Trainer's settings object at every hook it sees."""

    def __init__(self) -> None:
        self.seen: list[TrainerSettings] = []

    def _see(self, trainer: Any, *args: Any) -> None:
        self.seen.append(trainer.settings)

    on_fit_start = on_train_start = on_train_epoch_start = on_train_batch_end = on_validation_end = _see
    on_train_end = on_fit_end = _see


@pytest.fixture
def replaced(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """Every ``replace_settings`` call's changes, in order."""
    calls: list[dict[str, object]] = []
    original = SettingsProperties.replace_settings

    def spy(self: SettingsProperties, **changes: Any) -> TrainerSettings:
        calls.append(changes)
        return original(self, **changes)

    monkeypatch.setattr(SettingsProperties, "replace_settings", spy)
    return calls


# ----------------------------------------------------------------------------------------------- the object
def test_the_settings_are_frozen_and_resolved_from_the_arguments(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=3, limit_val_batches=2, num_sanity_val_steps=-1,
                            accumulate_grad_batches=2, gradient_clip_val=0.5)
    settings = trainer.settings
    assert isinstance(settings, TrainerSettings)
    assert (settings.max_epochs, settings.limit_val_batches, settings.accumulate_grad_batches) == (3, 2, 2)
    assert settings.num_sanity_val_steps == float("inf") and settings.default_root_dir == tmp_path
    assert settings.limit_train_batches is None and trainer.limit_train_batches == 1.0  # Lightning's reading
    assert trainer.limits == {"fit": None, "validate": 2, "test": None, "predict": None}
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.max_epochs = 5  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        settings.brand_new = 1  # type: ignore[attr-defined]  # slots: no instance dict
    assert trainer.settings is settings and settings.max_epochs == 3


def test_fast_dev_run_and_overfit_batches_are_applied_once(tmp_path: Path) -> None:
    fast = quiet_trainer(tmp_path, fast_dev_run=2, max_epochs=7, limit_val_batches=5).settings
    assert (fast.max_epochs, fast.max_steps, fast.num_sanity_val_steps) == (1, 2, 0)
    assert fast.limits == dict.fromkeys(("fit", "validate", "test", "predict"), 2)
    assert not fast.enable_checkpointing
    overfit = quiet_trainer(tmp_path, overfit_batches=3).settings
    assert (overfit.limit_train_batches, overfit.limit_val_batches, overfit.limit_test_batches) == (3, 3, None)


def test_the_settings_travel_with_a_pickled_trainer(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=3, compile_step=False)
    copy = pickle.loads(pickle.dumps(trainer))
    assert copy.settings == trainer.settings and copy.settings is not trainer.settings


# ----------------------------------------------------------------------------------------------- built once
def test_one_settings_object_across_a_fit_given_its_epoch_limits(tmp_path: Path, replaced: list) -> None:
    seen = SeesSettings()
    trainer = quiet_trainer(tmp_path, max_epochs=2, min_epochs=0, limit_train_batches=2, callbacks=[seen])
    built = trainer.settings
    trainer.fit(RegressionModule())
    assert trainer.settings is built and seen.seen and all(s is built for s in seen.seen)
    assert replaced == []


def test_a_fit_sets_its_epoch_defaults_through_replace_settings_once(tmp_path: Path, replaced: list) -> None:
    seen = SeesSettings()
    trainer = quiet_trainer(tmp_path, max_steps=2, callbacks=[seen])
    built = trainer.settings
    trainer.fit(RegressionModule())
    assert replaced == [{"min_epochs": 0, "max_epochs": -1}]  # Lightning's defaults, set before the first hook
    assert trainer.settings is not built and all(s is trainer.settings for s in seen.seen)
    assert built.max_epochs is None and trainer.max_epochs == -1
    again = trainer.settings
    trainer.fit(RegressionModule())  # both given now: nothing to replace
    assert trainer.settings is again and len(replaced) == 1


# ----------------------------------------------------------------------------------------------- the tuner
def test_lr_find_changes_the_settings_through_replace_and_restore_puts_the_object_back(
        tmp_path: Path, replaced: list) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=3, limit_val_batches=4)
    before = trainer.settings
    Tuner(trainer).lr_find(RegressionModule(batch_size=4), num_training=5, early_stop_threshold=None,
                           update_attr=False)
    assert trainer.settings is before  # restore put the very object back
    assert replaced and all(set(changes) <= {f.name for f in dataclasses.fields(TrainerSettings)}
                            for changes in replaced)
    assert any(changes.get("max_steps") == 5 for changes in replaced)
    assert any(changes.get("limit_val_batches") == 0 for changes in replaced)
    assert (trainer.max_epochs, trainer.limit_val_batches, trainer.max_steps) == (3, 4, -1)


def test_scale_batch_size_trials_see_their_own_settings_and_leave_the_trainers(tmp_path: Path,
                                                                               replaced: list) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=2, num_sanity_val_steps=1, enable_model_summary=True)
    before = trainer.settings
    trial_settings: list[TrainerSettings] = []

    class Model(RegressionModule):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            trial_settings.append(self.trainer.settings)
            return super().training_step(batch, batch_idx)

    found = Tuner(trainer).scale_batch_size(Model(batch_size=2), steps_per_trial=2, max_trials=3)
    assert found == 8 and trainer.settings is before
    assert trial_settings and all(s is not before for s in trial_settings)
    trial = trial_settings[-1]
    assert (trial.max_steps, trial.max_epochs, trial.num_sanity_val_steps, trial.limit_val_batches) == (2, -1, 2, 2)
    assert not trial.enable_model_summary and not trial.enable_progress_bar and trial.max_time is None
    assert before.enable_model_summary and (trainer.max_steps, trainer.num_sanity_val_steps) == (-1, 1)
    assert any(changes.get("enable_model_summary") is False for changes in replaced)


def test_snapshot_keeps_the_settings_object_and_restore_puts_it_back(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    saved = trainer.snapshot()
    assert saved.settings is trainer.settings and saved.callbacks is trainer.callbacks
    trainer.replace_settings(max_epochs=9, limit_val_batches=0)
    trainer.callbacks = []
    trainer.restore(saved)
    assert trainer.settings is saved.settings and trainer.callbacks is saved.callbacks and trainer.max_epochs == 2


# ----------------------------------------------------------------------------------------------- assignments
#: settings Lightning's Trainer keeps as plain attributes, which users, callbacks and tuners assign
LIGHTNING_ASSIGNS = {"limit_train_batches": 3, "limit_val_batches": 0, "limit_test_batches": 0.5,
                     "limit_predict_batches": 2, "val_check_interval": 0.5, "check_val_every_n_epoch": 2,
                     "num_sanity_val_steps": 0, "log_every_n_steps": 5, "accumulate_grad_batches": 4,
                     "gradient_clip_val": 1.0, "gradient_clip_algorithm": "value", "overfit_batches": 1,
                     "reload_dataloaders_every_n_epochs": 1, "fast_dev_run": False, "barebones": False}
#: read-only in Lightning too (a property without a setter, or no such attribute)
READ_ONLY = {"default_root_dir": "/tmp", "min_epochs": 1, "min_steps": 1, "max_time": 1.0, "enable_progress_bar": False,
             "enable_model_summary": False, "enable_checkpointing": False, "inference_mode": False, "seed": 3,
             "deterministic": True, "benchmark": True, "detect_anomaly": True, "sync_batchnorm": True,
             "use_distributed_sampler": False, "compile_step": None}


@pytest.mark.parametrize(("name", "value"), sorted(LIGHTNING_ASSIGNS.items()))
def test_an_assignment_lightning_allows_replaces_the_settings(tmp_path: Path, name: str, value: object,
                                                             replaced: list) -> None:
    trainer = quiet_trainer(tmp_path)
    before = trainer.settings
    setattr(trainer, name, value)
    assert replaced == [{name: value}] and trainer.settings is not before
    assert getattr(trainer.settings, name) == value and getattr(trainer, name) == value


def test_max_epochs_and_max_steps_stay_assignable(tmp_path: Path) -> None:
    """Lightning's are read-only (set through ``trainer.fit_loop``); accelkit has always taken the assignment (a
    limit changed mid-run, read by the loops after the batch), now through ``replace_settings``."""
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.max_epochs, trainer.max_steps = 4, 7
    assert (trainer.settings.max_epochs, trainer.settings.max_steps) == (4, 7)


@pytest.mark.parametrize(("name", "value"), sorted(READ_ONLY.items()))
def test_an_assignment_lightning_refuses_is_an_error_naming_it(tmp_path: Path, name: str, value: object) -> None:
    trainer = quiet_trainer(tmp_path)
    before = trainer.settings
    with pytest.raises(AttributeError, match=name):
        setattr(trainer, name, value)
    assert trainer.settings is before


def test_replace_settings_refuses_a_name_that_is_no_setting(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(TypeError, match="max_epoch"):
        trainer.replace_settings(max_epoch=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="limits"):
        trainer.replace_settings(limits={"fit": 1})  # type: ignore[call-arg]


def test_the_settings_fields_and_replace_settings_keywords_agree() -> None:
    from accelkit.trainer.settings import SettingsChanges

    fields = {f.name for f in dataclasses.fields(TrainerSettings)}
    assert set(SettingsChanges.__annotations__) == fields
    assert all(isinstance(getattr(SettingsProperties, name), property) for name in fields)


# ----------------------------------------------------------------------------------------------- types
def _namespace(module: types.ModuleType) -> dict[str, object]:
    """``module``'s globals with the names it imports under ``if TYPE_CHECKING:`` (what its annotations name)."""
    namespace = dict(vars(module))
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            exec(compile(ast.Module(body=node.body, type_ignores=[]), module.__file__ or "", "exec"), namespace)
    return namespace


def _is_any(hint: object) -> bool:
    return hint is Any or (typing.get_origin(hint) in (typing.Union, types.UnionType)
                           and any(arg is Any for arg in typing.get_args(hint)))


def _property_hints() -> dict[str, object]:
    hints = {}
    for cls in (accelkit.Trainer, TrainerProperties, SettingsProperties):
        for name, member in inspect.getmembers(cls, lambda m: isinstance(m, property)):
            getter = member.fget
            if isinstance(getter, operator.attrgetter):  # a getter run in C (``settings``, read at every batch):
                attribute = repr(getter).split("'")[1]   # the declared type of the attribute it reads
                owner = next(c for c in cls.__mro__ if name in vars(c))
                declared = typing.get_type_hints(owner, globalns=_namespace(sys.modules[owner.__module__]))
                hints[f"{cls.__name__}.{name}"] = declared[attribute]
                continue
            namespace = _namespace(sys.modules[getter.__module__])
            hints[f"{cls.__name__}.{name}"] = typing.get_type_hints(getter, globalns=namespace).get("return")
    return hints


def test_every_property_of_the_trainer_has_a_type_and_none_is_any() -> None:
    hints = _property_hints()
    assert len(hints) > 90
    assert [name for name, hint in hints.items() if hint is None] == []
    assert [name for name, hint in hints.items() if _is_any(hint)] == []


def test_the_composition_properties_name_their_classes() -> None:
    hints = _property_hints()
    assert hints["Trainer.accelerator"] is accelkit.Accelerator
    assert hints["Trainer.strategy"] is accelkit.Strategy
    assert hints["Trainer.precision"] is accelkit.Precision
    assert hints["Trainer.settings"] is TrainerSettings
