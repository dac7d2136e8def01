"""Write Lightning's public names as JSON, for ``tests/data/lightning_names.json``.

Run where Lightning is installed (``python tests/data/dump_lightning_names.py > tests/data/lightning_names.json``);
the migration-table test reads the JSON, so the test itself needs no Lightning install. Each section is a sorted
list of names; ``signatures`` holds the parameter names of the callables a migrating user calls with keywords
(callback and strategy constructors, the Tuner's methods, utility functions), so our versions can be checked to
take the same keywords.

``dir()`` of a class does not show what ``__init__`` sets on an instance; ``SUPPLEMENTS`` adds those names, as
Lightning's API reference lists them. ``lightning.pytorch.utilities.types`` has no ``__all__`` and imports
``typing``/``torch`` names into itself: ``reexports`` lists the names in it that Lightning does not define (a class
or function from another package, or a name neither defined by a class, function or assignment in the module).
``modules`` lists the public submodules of ``lightning.pytorch`` that import (relative paths): the module paths
programs import, each of which has an accelkit module under the mechanical rule or a row of
``core/src/accelkit/lightning_modules.toml`` (whose rows word the import errors).
"""

from __future__ import annotations

import ast
import inspect
import json
import sys

#: names an instance has that ``dir()`` of its class does not show (set in ``__init__``), from Lightning's API
#: reference; and ``forward``, the ``torch.nn.Module`` method a LightningModule overrides
SUPPLEMENTS = {
    "LightningModule": ["allow_zero_length_dataloader_with_multiple_devices", "forward", "prepare_data_per_node"],
    "Trainer attributes": [
        "accumulate_grad_batches", "barebones", "callbacks", "check_val_every_n_epoch", "datamodule",
        "fast_dev_run", "fit_loop", "gradient_clip_algorithm", "gradient_clip_val", "limit_predict_batches",
        "limit_test_batches", "limit_train_batches", "limit_val_batches", "log_every_n_steps",
        "num_sanity_val_steps", "overfit_batches", "predict_loop", "prediction_writer_callbacks", "profiler",
        "reload_dataloaders_every_n_epochs", "should_stop", "state", "test_loop", "val_check_interval",
        "validate_loop",
    ],
}


def _public(names) -> list[str]:
    return sorted(n for n in names if not n.startswith("_"))


def _parameters(obj) -> list[str] | None:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    return [p.name for p in signature.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _module_names(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not inspect.ismodule(v)]
    return _public(names)


def _reexports(module) -> list[str]:
    """Names of ``module`` that Lightning does not define (see the module docstring)."""
    tree = ast.parse(inspect.getsource(module))
    assigned = {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name)}
    found = []
    for name in _module_names(module):
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if not getattr(obj, "__module__", "").startswith("lightning"):
                found.append(name)
        elif name not in assigned:
            found.append(name)
    return found


def _modules(package) -> list[str]:
    """The public submodules of ``package`` that import, as paths relative to it (``utilities.model_summary``):
    the module paths Lightning programs import; a path with a private part (``_graveyard``) is left out."""
    import importlib
    import pkgutil

    found = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        relative = info.name[len(package.__name__) + 1:]
        if any(part.startswith("_") for part in relative.split(".")):
            continue
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - what does not import here is not a path programs can use
            continue
        found.append(relative)
    return sorted(found)


def main() -> None:
    import lightning
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch import callbacks, loggers, strategies, tuner, utilities
    from lightning.pytorch.utilities import types as utility_types

    sections = {
        "callbacks": _module_names(callbacks),
        "strategies": _module_names(strategies),
        "loggers": _module_names(loggers),
        "tuner": _module_names(tuner),
        "utilities": _module_names(utilities),
        "utilities.types": _module_names(utility_types),
        "LightningModule": _public(set(dir(pl.LightningModule)) - set(dir(torch.nn.Module))),
        "Callback": _public(dir(pl.Callback)),
        "Trainer arguments": [p for p in inspect.signature(pl.Trainer.__init__).parameters if p != "self"],
        "Trainer attributes": _public(dir(pl.Trainer)),
    }
    for section, names in SUPPLEMENTS.items():
        sections[section] = sorted(set(sections[section]) | set(names))
    modules = {"callbacks": callbacks, "strategies": strategies, "loggers": loggers, "tuner": tuner,
               "utilities": utilities}
    signatures = {}
    for section, module in modules.items():
        for name in sections[section]:
            obj = getattr(module, name, None)
            if callable(obj):
                signatures[f"{section}.{name}"] = _parameters(obj)
    for name in ("lr_find", "scale_batch_size"):
        signatures[f"tuner.Tuner.{name}"] = _parameters(getattr(tuner.Tuner, name))
    json.dump({"lightning_version": lightning.__version__, "torch_version": torch.__version__,
               "python_version": sys.version.split()[0], "sections": sections, "signatures": signatures,
               "reexports": {"utilities.types": _reexports(utility_types)}, "supplements": SUPPLEMENTS,
               "modules": _modules(pl)},
              sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
