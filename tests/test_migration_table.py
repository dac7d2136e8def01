"""docs/migrating-from-lightning.rst cannot drift from the code or from Lightning's API.

The guide holds one table per API surface (LightningModule, Callback, Trainer arguments, Trainer attributes).
Each row is ``name | status | notes`` with status one of:

* ``supported``: the name exists here and behaves as in Lightning;
* ``differs``: it exists, with a difference the notes state;
* ``error``: using it raises (an ``AttributeError`` for a missing member, or the error the notes quote);
* ``warning``: accepted with a warning that names it (the notes say what happens instead);
* ``accelkit``: an accelkit name Lightning does not have.

Checked here: every Lightning 2.x name listed below has a row; every public name of ``accelkit.Module``,
``accelkit.Callback``, every ``Trainer.__init__`` parameter and every public Trainer attribute has a row;
every ``supported``/``differs``/``warning``/``accelkit`` row names something accelkit has; an ``error`` row of
a member names something accelkit does not have (or the notes say it raises); a Trainer argument marked
``error`` really raises; every row that is not plain ``supported`` explains itself.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch

import accelkit

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "migrating-from-lightning.rst"
STATUSES = {"supported", "differs", "error", "warning", "accelkit"}

# ---------------------------------------------------------------------------------------------------------------
# Lightning 2.x public API, written out from Lightning's API reference (lightning.ai/docs/pytorch/stable/api/):
# ``lightning.pytorch.core.LightningModule`` (its own members plus those of ModelHooks, DataHooks,
# CheckpointHooks and HyperparametersMixin; torch.nn.Module's members are left out), ``lightning.pytorch.callbacks
# .Callback``, and ``lightning.pytorch.trainer.trainer.Trainer`` (the signature of 2.0-2.5 and its properties).
# ---------------------------------------------------------------------------------------------------------------

LIGHTNING_MODULE = [
    # LightningModule methods
    "all_gather", "backward", "clip_gradients", "configure_callbacks", "configure_gradient_clipping",
    "configure_model", "configure_optimizers", "configure_sharded_model", "forward", "freeze", "load_from_checkpoint",
    "log", "log_dict", "lr_scheduler_step", "lr_schedulers", "manual_backward", "optimizer_step",
    "optimizer_zero_grad", "optimizers", "predict_step", "print", "test_step", "to_onnx", "to_torchscript",
    "toggle_optimizer", "toggled_optimizer", "training_step", "unfreeze", "untoggle_optimizer", "validation_step",
    # LightningModule properties and class attributes
    "automatic_optimization", "current_epoch", "device", "device_mesh", "dtype", "example_input_array", "fabric",
    "global_rank", "global_step", "local_rank", "logger", "loggers", "on_gpu", "strict_loading", "trainer",
    "CHECKPOINT_HYPER_PARAMS_KEY", "CHECKPOINT_HYPER_PARAMS_NAME", "CHECKPOINT_HYPER_PARAMS_TYPE",
    # HyperparametersMixin
    "save_hyperparameters", "hparams", "hparams_initial",
    # ModelHooks
    "on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_validation_start", "on_validation_end",
    "on_test_start", "on_test_end", "on_predict_start", "on_predict_end", "on_train_batch_start",
    "on_train_batch_end", "on_validation_batch_start", "on_validation_batch_end", "on_test_batch_start",
    "on_test_batch_end", "on_predict_batch_start", "on_predict_batch_end", "on_validation_model_zero_grad",
    "on_validation_model_eval", "on_validation_model_train", "on_test_model_eval", "on_test_model_train",
    "on_predict_model_eval", "on_train_epoch_start", "on_train_epoch_end", "on_validation_epoch_start",
    "on_validation_epoch_end", "on_test_epoch_start", "on_test_epoch_end", "on_predict_epoch_start",
    "on_predict_epoch_end", "on_before_zero_grad", "on_before_backward", "on_after_backward",
    "on_before_optimizer_step",
    # DataHooks
    "prepare_data_per_node", "allow_zero_length_dataloader_with_multiple_devices", "prepare_data", "setup",
    "teardown", "train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader",
    "transfer_batch_to_device", "on_before_batch_transfer", "on_after_batch_transfer",
    # CheckpointHooks
    "on_load_checkpoint", "on_save_checkpoint",
]

LIGHTNING_CALLBACK = [
    "state_key", "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_batch_start", "on_train_batch_end", "on_train_epoch_start", "on_train_epoch_end",
    "on_validation_epoch_start", "on_validation_epoch_end", "on_test_epoch_start", "on_test_epoch_end",
    "on_predict_epoch_start", "on_predict_epoch_end", "on_validation_batch_start", "on_validation_batch_end",
    "on_test_batch_start", "on_test_batch_end", "on_predict_batch_start", "on_predict_batch_end", "on_train_start",
    "on_train_end", "on_validation_start", "on_validation_end", "on_test_start", "on_test_end", "on_predict_start",
    "on_predict_end", "on_exception", "state_dict", "load_state_dict", "on_save_checkpoint", "on_load_checkpoint",
    "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
]

LIGHTNING_TRAINER_ARGUMENTS = [
    "accelerator", "strategy", "devices", "num_nodes", "precision", "logger", "callbacks", "fast_dev_run",
    "max_epochs", "min_epochs", "max_steps", "min_steps", "max_time", "limit_train_batches", "limit_val_batches",
    "limit_test_batches", "limit_predict_batches", "overfit_batches", "val_check_interval",
    "check_val_every_n_epoch", "num_sanity_val_steps", "log_every_n_steps", "enable_checkpointing",
    "enable_progress_bar", "enable_model_summary", "accumulate_grad_batches", "gradient_clip_val",
    "gradient_clip_algorithm", "deterministic", "benchmark", "inference_mode", "use_distributed_sampler",
    "profiler", "detect_anomaly", "barebones", "plugins", "sync_batchnorm", "reload_dataloaders_every_n_epochs",
    "default_root_dir", "enable_autolog_hparams", "model_registry",
]

LIGHTNING_TRAINER_ATTRIBUTES = [
    # methods
    "fit", "validate", "test", "predict", "save_checkpoint", "print", "init_module",
    # composition and topology
    "accelerator", "strategy", "precision_plugin", "precision", "scaler", "global_rank", "local_rank", "node_rank",
    "world_size", "num_nodes", "num_devices", "device_ids", "is_global_zero", "distributed_sampler_kwargs",
    # model and optimization
    "lightning_module", "model", "optimizers", "lr_scheduler_configs",
    # files, loggers, callbacks
    "default_root_dir", "log_dir", "logger", "loggers", "callbacks", "checkpoint_callback", "checkpoint_callbacks",
    "early_stopping_callback", "early_stopping_callbacks", "progress_bar_callback", "prediction_writer_callbacks",
    "profiler", "ckpt_path",
    # state and progress
    "state", "training", "validating", "testing", "predicting", "evaluating", "sanity_checking", "interrupted",
    "received_sigterm", "should_stop", "current_epoch", "global_step", "is_last_batch", "enable_validation",
    "max_epochs", "min_epochs", "max_steps", "min_steps", "estimated_stepping_batches",
    # data
    "datamodule", "train_dataloader", "val_dataloaders", "test_dataloaders", "predict_dataloaders",
    "num_training_batches", "num_sanity_val_batches", "num_val_batches", "num_test_batches", "num_predict_batches",
    # metrics
    "callback_metrics", "logged_metrics", "progress_bar_metrics",
    # run-control arguments kept as attributes
    "fast_dev_run", "val_check_interval", "check_val_every_n_epoch", "log_every_n_steps", "accumulate_grad_batches",
    "gradient_clip_val", "gradient_clip_algorithm", "limit_train_batches", "limit_val_batches", "limit_test_batches",
    "limit_predict_batches", "overfit_batches", "reload_dataloaders_every_n_epochs", "num_sanity_val_steps",
    "barebones",
]

#: a value for each Trainer argument marked ``error``, with which the Trainer must refuse to start
REFUSED_ARGUMENT_VALUES = {"model_registry": "my-model", "enable_autolog_hparams": False}

SECTIONS = {
    "LightningModule": LIGHTNING_MODULE,
    "Callback": LIGHTNING_CALLBACK,
    "Trainer arguments": LIGHTNING_TRAINER_ARGUMENTS,
    "Trainer attributes": LIGHTNING_TRAINER_ATTRIBUTES,
}


def parse_tables(text: str) -> dict[str, dict[str, tuple[str, str]]]:
    """``{table title: {name: (status, notes)}}`` from the guide's ``list-table`` directives."""
    tables: dict[str, dict[str, tuple[str, str]]] = {}
    blocks = re.split(r"^\.\. list-table:: ", text, flags=re.M)[1:]
    for block in blocks:
        title, _, body = block.partition("\n")
        rows: dict[str, tuple[str, str]] = {}
        for row in re.split(r"^   \* - ", body, flags=re.M)[1:]:
            cells = [re.sub(r"\s+", " ", c).strip() for c in re.split(r"^     -(?: |$)", row, flags=re.M)]
            if len(cells) < 3:
                cells += [""] * (3 - len(cells))
            name = cells[0].strip("`")
            if name == "Name":
                continue
            assert name not in rows, f"{title}: {name} has two rows"
            rows[name] = (cells[1], cells[2])
        tables[title.strip()] = rows
    return tables


@pytest.fixture(scope="module")
def tables() -> dict[str, dict[str, tuple[str, str]]]:
    return parse_tables(GUIDE.read_text())


@pytest.fixture(scope="module")
def trainer() -> accelkit.Trainer:
    return accelkit.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                            enable_model_summary=False)


def _public(cls: type, exclude: type | None = None) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_") and (exclude is None or not hasattr(exclude, n))}


def _module_names() -> set[str]:
    return _public(accelkit.Module, torch.nn.Module)


def _trainer_arguments() -> list[str]:
    return [n for n in inspect.signature(accelkit.Trainer.__init__).parameters if n != "self"]


def _trainer_attributes(trainer: accelkit.Trainer) -> set[str]:
    return _public(type(trainer)) | {n for n in vars(trainer) if not n.startswith("_")}


def test_every_table_is_there(tables) -> None:
    assert set(SECTIONS) <= set(tables), sorted(set(SECTIONS) - set(tables))


def test_statuses_are_known_and_explained(tables) -> None:
    for title, rows in tables.items():
        for name, (status, notes) in rows.items():
            assert status in STATUSES, f"{title}/{name}: status {status!r} is not one of {sorted(STATUSES)}"
            if status != "supported":
                assert len(notes) > 15, f"{title}/{name} is {status!r}: its notes must say what happens and why"


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_lightning_name_has_a_row(tables, section) -> None:
    missing = [n for n in SECTIONS[section] if n not in tables[section]]
    assert not missing, f"the {section} table lacks rows for Lightning's {missing}"


def test_every_accelkit_name_has_a_row(tables, trainer) -> None:
    expected = {
        "LightningModule": _module_names(),
        "Callback": _public(accelkit.Callback),
        "Trainer arguments": set(_trainer_arguments()),
    }
    for section, names in expected.items():
        missing = sorted(names - set(tables[section]))
        assert not missing, f"accelkit's {missing} have no row in the {section} table"
    documented = set(tables["Trainer attributes"]) | set(tables["Trainer arguments"])
    missing = sorted(_trainer_attributes(trainer) - documented)
    assert not missing, f"Trainer attributes {missing} have no row in the Trainer attributes table"


def _exists(section: str, name: str, trainer: accelkit.Trainer) -> bool:
    if section == "LightningModule":
        return not name.startswith("_") and hasattr(accelkit.Module, name)
    if section == "Callback":
        return name in _public(accelkit.Callback)
    if section == "Trainer arguments":
        return name in _trainer_arguments()
    return name in _trainer_attributes(trainer)


def test_rows_match_what_accelkit_has(tables, trainer) -> None:
    wrong = []
    for section in SECTIONS:
        for name, (status, notes) in tables[section].items():
            exists = _exists(section, name, trainer)
            if status in ("supported", "differs", "warning", "accelkit") and not exists:
                wrong.append(f"{section}/{name} is {status!r} but accelkit has no such name")
            if status == "error" and exists and "raises" not in notes:
                wrong.append(f"{section}/{name} is 'error' but accelkit has it (update the row, or say it raises)")
            if status == "accelkit" and name in SECTIONS[section]:
                wrong.append(f"{section}/{name} is marked accelkit-only but Lightning has it")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name", sorted(REFUSED_ARGUMENT_VALUES))
def test_refused_trainer_arguments_raise(tables, name) -> None:
    status, notes = tables["Trainer arguments"][name]
    if status != "error":
        pytest.skip(f"{name} is {status!r} in the guide")
    with pytest.raises((TypeError, ValueError, accelkit.ConfigurationError)):
        accelkit.Trainer(accelerator="cpu", devices=1, logger=False, **{name: REFUSED_ARGUMENT_VALUES[name]})


def test_every_error_argument_has_a_value_to_try(tables) -> None:
    refused = sorted(n for n, (status, _) in tables["Trainer arguments"].items() if status == "error")
    missing = sorted(set(refused) - set(REFUSED_ARGUMENT_VALUES))
    assert not missing, f"add a value to REFUSED_ARGUMENT_VALUES for {missing}"


def test_module_hooks_keep_lightning_signatures(tables) -> None:
    """A hook marked supported keeps Lightning's parameter names (users override them by name)."""
    lightning_parameters = {
        "on_train_batch_start": ["batch", "batch_idx"],
        "on_train_batch_end": ["outputs", "batch", "batch_idx"],
        "on_validation_batch_start": ["batch", "batch_idx", "dataloader_idx"],
        "on_validation_batch_end": ["outputs", "batch", "batch_idx", "dataloader_idx"],
        "on_before_optimizer_step": ["optimizer"],
        "on_before_zero_grad": ["optimizer"],
        "on_before_backward": ["loss"],
        "optimizer_step": ["epoch", "batch_idx", "optimizer", "optimizer_closure"],
        "optimizer_zero_grad": ["epoch", "batch_idx", "optimizer"],
        "lr_scheduler_step": ["scheduler", "metric"],
        "configure_gradient_clipping": ["optimizer", "gradient_clip_val", "gradient_clip_algorithm"],
        "transfer_batch_to_device": ["batch", "device", "dataloader_idx"],
        "on_before_batch_transfer": ["batch", "dataloader_idx"],
        "on_after_batch_transfer": ["batch", "dataloader_idx"],
        "on_save_checkpoint": ["checkpoint"],
        "on_load_checkpoint": ["checkpoint"],
        "setup": ["stage"],
        "teardown": ["stage"],
    }
    for name, expected in lightning_parameters.items():
        if tables["LightningModule"][name][0] != "supported":
            continue
        found = [p for p in inspect.signature(getattr(accelkit.Module, name)).parameters if p != "self"]
        assert found == expected, f"Module.{name}{tuple(found)} differs from Lightning's {tuple(expected)}"
