"""docs/migrating-from-lightning.rst cannot lie: its tables are generated from data that this test checks against
Lightning's own public names and against accelkit, by importing and running accelkit.

* ``tests/data/lightning_names.json``: Lightning's public names (``callbacks.__all__``, ``strategies.__all__``,
  ``loggers.__all__``, ``tuner``, ``utilities`` and ``utilities.types``, the LightningModule's and Callback's public
  attributes, the Trainer's arguments and attributes), dumped from an installed Lightning by
  ``tests/data/dump_lightning_names.py``; no Lightning is needed here;
* ``tests/data/migration_rows.toml``: one row per name (see ``helpers.migration_table``).

Checked: every Lightning name has a row, and every public name of accelkit's Module, Callback and Trainer has one;
each ``supported``/``differs``/``accelkit`` row's name is importable from accelkit's mirror path (or the row's
``path``) and is exercised (a hook called in a real run, a value checked inside one, or its own tiny CPU run); each
``refused`` row's refusal is raised with its sentence; each ``not yet`` row's name is really absent (so a name
cannot be implemented without its row following); the keywords of Lightning's callables that ours lacks are the ones
the row lists; and the guide's tables and counts are what the data renders
(``python tests/helpers/migration_table.py`` rewrites them).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
import helpers.migration_runs  # noqa: E402,F401 - registers the exercises
import helpers.migration_runs_api  # noqa: E402,F401 - registers the exercises
from helpers.migration_exercises import (  # noqa: E402
    MODULE_CHECKS,
    REFUSALS,
    RUNS,
    SLOW,
    TRAINER_CHECKS,
    Net,
    Workspace,
    check_annotation,
)
from helpers.migration_table import (  # noqa: E402
    EXERCISES,
    GUIDE,
    SECTIONS,
    STATUSES,
    Row,
    counts,
    covering_row,
    lightning_names,
    load_module_rows,
    load_rows,
    sync_guide,
    tabled_names,
)

NAMES = lightning_names()
ROWS = load_rows()
MODULE_ROWS = load_module_rows()
RUN_ROWS = [pytest.param(key, id=f"{key[0]}:{key[1]}", marks=[pytest.mark.slow] if key in SLOW else [])
            for key in sorted(key for key, row in ROWS.items() if row.exists)]
REFUSED_ROWS = sorted(key for key, row in ROWS.items() if row.status == "refused")
ABSENT_ROWS = sorted(key for key, row in ROWS.items() if row.status == "not yet")


def _ids(keys: list[tuple[str, str]]) -> list[str]:
    return [f"{section}:{name}" for section, name in keys]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    module_hooks = [row.name for row in ROWS.values() if row.section == "LightningModule" and row.exercise == "hook"]
    callback_hooks = [row.name for row in ROWS.values() if row.section == "Callback" and row.exercise == "hook"]
    return Workspace(tmp_path_factory.mktemp("migration"), module_hooks, callback_hooks)


# --------------------------------------------------------------------------------------------- the data itself
def test_names_come_from_a_lightning_install() -> None:
    assert NAMES["lightning_version"].count(".") == 2, NAMES["lightning_version"]
    assert {section.key for section in SECTIONS} == set(NAMES["sections"])
    assert "ModelCheckpoint" in NAMES["sections"]["callbacks"] and "fit" in NAMES["sections"]["Trainer attributes"]


@pytest.mark.parametrize("section", [s.key for s in SECTIONS])
def test_every_lightning_name_has_a_row(section: str) -> None:
    missing = [name for name in tabled_names(section, NAMES) if (section, name) not in ROWS]
    assert not missing, f"tests/data/migration_rows.toml has no [{section}] row for Lightning's {missing}"


def test_rows_are_well_formed() -> None:
    wrong = []
    for (section, name), row in ROWS.items():
        lightning = name in tabled_names(section, NAMES)
        if row.status not in STATUSES:
            wrong.append(f"{section}.{name}: status {row.status!r} is not one of {STATUSES}")
        if row.exists != (row.exercise is not None) or (row.exercise and row.exercise not in EXERCISES):
            wrong.append(f"{section}.{name}: a {row.status!r} row needs an exercise from {EXERCISES}, others none")
        if (row.status == "accelkit") == lightning:
            wrong.append(f"{section}.{name}: 'accelkit' is for names Lightning lacks, and only for those")
        if row.status in ("differs", "not yet") and len(row.notes) < 15:
            wrong.append(f"{section}.{name}: a {row.status!r} row's notes must say what differs or what to use")
        if (row.status == "refused") != bool(row.raises and row.sentence):
            wrong.append(f"{section}.{name}: a refused row (and only one) gives `raises` and `sentence`")
    assert not wrong, "\n".join(wrong)


def _public(obj: Any) -> set[str]:
    return {n for n in (obj if isinstance(obj, dict) else dir(obj)) if not n.startswith("_")}


def test_every_public_accelkit_name_has_a_row() -> None:
    import torch

    run = accelkit.Trainer(accelerator="cpu", devices=1, logger=False)
    expected = {
        "LightningModule": (_public(accelkit.Module) | _public(vars(accelkit.Module()))) - _public(torch.nn.Module())
        | {"forward"},
        "Callback": _public(accelkit.Callback),
        "Trainer arguments": set(inspect.signature(accelkit.Trainer.__init__).parameters) - {"self"},
        "Trainer attributes": _public(run),
    }
    for section, names in expected.items():
        missing = sorted(n for n in names if (section, n) not in ROWS)
        assert not missing, f"accelkit's {missing} have no [{section}] row in tests/data/migration_rows.toml"


# --------------------------------------------------------------------------------------------- against accelkit
def _resolve(row: Row) -> Any:
    """accelkit's object for a row (raises ImportError/AttributeError when it has none)."""
    if row.mirror_path:
        module_path, _, attribute = row.mirror_path.rpartition(".")
        return getattr(importlib.import_module(module_path), attribute)
    if row.section == "LightningModule":
        return _attribute(Net, Net(), row.name)
    if row.section == "Callback":
        return getattr(accelkit.Callback, row.name)
    if row.section == "Trainer arguments":
        parameters = inspect.signature(accelkit.Trainer.__init__).parameters
        if row.name not in parameters:
            raise AttributeError(f"Trainer() has no argument {row.name!r}")
        return parameters[row.name]
    return _attribute(accelkit.Trainer, accelkit.Trainer(accelerator="cpu", devices=1, logger=False), row.name)


def _attribute(cls: type, instance: Any, name: str) -> Any:
    """The class attribute ``name`` of ``cls``, else the instance attribute (properties are not evaluated: some
    need a run)."""
    if hasattr(cls, name):
        return getattr(cls, name)
    if name in vars(instance):
        return vars(instance)[name]
    raise AttributeError(f"{cls.__name__} has no attribute {name!r}")


def _skip_without_its_plugin(row: Row) -> None:
    """A row whose accelkit name lives in a plugin distribution (``accelkit_mlflow.MLFlowLogger``) is checked where
    that plugin is installed; a machine set up with other plugins only (a GPU machine) skips it."""
    top = (row.mirror_path or "").split(".")[0]
    if top.startswith("accelkit_") and importlib.util.find_spec(top) is None:
        pytest.skip(f"{row.section}.{row.name} is provided by {top}, which is not installed")


def _has(row: Row) -> bool:
    try:
        _resolve(row)
    except (ImportError, AttributeError):
        return False
    return True


@pytest.mark.parametrize("key", RUN_ROWS)
def test_supported_names_import_and_run(workspace: Workspace, key: tuple[str, str]) -> None:
    row = ROWS[key]
    _skip_without_its_plugin(row)
    assert _has(row), f"{row.section}.{row.name} is {row.status!r} but accelkit has no {row.mirror_path or row.name}"
    if row.exercise == "hook":
        calls = workspace.shared.module_calls if row.section == "LightningModule" else workspace.shared.callback_calls
        assert row.name in calls, f"the shared run never called {row.section}.{row.name}"
    elif row.exercise == "in-run":
        checks = workspace.shared.module_checks if row.section == "LightningModule" else workspace.shared.trainer_checks
        table = MODULE_CHECKS if row.section == "LightningModule" else TRAINER_CHECKS
        assert row.name in table, f"{row.section}.{row.name} is 'in-run' without a check in helpers.migration_exercises"
        assert checks.get(row.name) is True, f"{row.section}.{row.name}: {checks.get(row.name, 'never evaluated')}"
    elif row.exercise == "annotation":
        check_annotation(row.name, _resolve(row))
    else:
        assert key in RUNS, f"{row.section}.{row.name} is 'run' but no exercise is registered for it"
        RUNS[key](workspace)


def test_every_exercise_belongs_to_a_row() -> None:
    stale = sorted(k for k in RUNS if k not in ROWS or ROWS[k].exercise != "run")
    stale += sorted(("LightningModule", n) for n in MODULE_CHECKS if ROWS[("LightningModule", n)].exercise != "in-run")
    stale += sorted(("Trainer attributes", n) for n in TRAINER_CHECKS
                    if ROWS[("Trainer attributes", n)].exercise != "in-run")
    stale += sorted(k for k in REFUSALS if ROWS.get(k, Row(*k, "?")).status != "refused")
    assert not stale, f"exercises registered for rows that do not use them: {stale}"


@pytest.mark.parametrize("key", REFUSED_ROWS, ids=_ids(REFUSED_ROWS))
def test_refused_names_raise_their_sentence(workspace: Workspace, key: tuple[str, str]) -> None:
    row = ROWS[key]
    assert key in REFUSALS, f"{row.section}.{row.name} is refused but no trigger is registered for it"
    with pytest.raises(Exception) as caught:
        REFUSALS[key](workspace)
    assert row.raises in [c.__name__ for c in type(caught.value).__mro__], f"raised {caught.value!r}"
    assert row.sentence in str(caught.value), f"{row.sentence!r} is not in {str(caught.value)!r}"


@pytest.mark.parametrize("key", ABSENT_ROWS, ids=_ids(ABSENT_ROWS))
def test_not_yet_names_are_absent(key: tuple[str, str]) -> None:
    row = ROWS[key]
    assert not _has(row), (f"accelkit now has {row.section}.{row.name}: exercise it and mark it supported "
                           "in tests/data/migration_rows.toml")
    if row.section == "Trainer arguments":
        with pytest.raises(TypeError, match=row.name):
            accelkit.Trainer(accelerator="cpu", logger=False, **{row.name: True})


def _parameters(obj: Any) -> tuple[list[str], bool]:
    """The parameter names of ``obj`` (its constructor for a class), and whether it takes ``**kwargs``."""
    target = obj.__init__ if inspect.isclass(obj) else obj
    parameters = inspect.signature(target).parameters.values()
    var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    return [p.name for p in parameters if p.name != "self" and p.kind is not p.VAR_KEYWORD], var_keyword


SIGNED = sorted(k for k in NAMES["signatures"] if len(k.split(".")) == 2 or k.startswith("tuner.Tuner."))


@pytest.mark.parametrize("key", SIGNED)
def test_missing_keywords_are_listed(key: str) -> None:
    section, name = key.split(".", 1)
    row = ROWS[(section, name.split(".")[0])]
    if not row.exists:
        return
    _skip_without_its_plugin(row)
    obj = _resolve(row)
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    ours, var_keyword = _parameters(obj)
    lightning = [p for p in NAMES["signatures"][key] or [] if p != "args" and not p.endswith("kwargs")]
    missing = [p for p in lightning if p not in ours]
    if row.through_kwargs:
        assert var_keyword, f"{key}: the row says ours takes Lightning's keywords through **kwargs; it has none"
        missing = []
    listed = row.missing_parameters if name.count(".") == 0 else []
    assert missing == listed, (f"{key}: ours lacks Lightning's keywords {missing}; the row lists {listed} "
                               "(set missing_parameters in tests/data/migration_rows.toml)")


# --------------------------------------------------------------------------------------------- module paths
def _imports(path: str) -> bool:
    try:
        importlib.import_module(path)
    except ImportError:
        return False
    return True


def _import_error(fullname: str) -> ImportError | None:
    """The error of ``import fullname``, or ``None`` where it imports."""
    try:
        importlib.import_module(fullname)
    except ImportError as error:
        return error
    return None


def _from_import_error(fullname: str) -> ImportError | None:
    """The error of ``from parent import last`` for ``fullname`` (``from accelkit.loggers import comet``), where
    Python drops a ``ModuleNotFoundError`` naming the submodule for its own "cannot import name"."""
    parent, _, last = fullname.rpartition(".")
    try:
        exec(f"from {parent} import {last}", {})
    except ImportError as error:
        return error
    return None


def _unsaid(message: str, row: Row) -> list[str]:
    """What an import error covered by a module row must say and ``message`` does not: that accelkit has no module
    for the Lightning path, its counterpart in accelkit where the row names one, the row's notes (what to use
    instead, as plain text) and the migration guide's page."""
    notes = re.sub(r":doc:`([^`]+)`", r"docs/\1.rst", row.notes).replace("``", "").rstrip(".")
    wanted = [f"accelkit has no module for Lightning's lightning.pytorch.{row.name} ", notes,
              "docs/migrating-from-lightning.rst"]
    if row.counterpart:
        wanted.append(f"its counterpart in accelkit is {row.counterpart}")
    return [part for part in wanted if part not in message]


def _import_problem(path: str) -> str | None:
    """Why ``accelkit.<path>`` (Lightning's ``lightning.pytorch.<path>`` with the package name changed) is not what
    a ported program may import, or ``None``: it imports (a path of ``LIGHTNING_PLUGIN_PATHS`` as the plugin's
    package); a path of ``LIGHTNING_PLUGIN_PATHS`` raises an ImportError naming the distribution to install; or a
    row of lightning_modules.toml covers it and the ImportError says the row's sentence. Both import forms (``import
    a.b.c`` and ``from a.b import c``) are tried: a bare ``ModuleNotFoundError`` from either is a problem."""
    from accelkit.compat import LIGHTNING_PLUGIN_PATHS, distribution_of

    fullname = f"accelkit.{path}"
    plugin = LIGHTNING_PLUGIN_PATHS.get(fullname)
    errors = [_import_error(fullname), _from_import_error(fullname)]
    if errors == [None, None]:
        module = importlib.import_module(fullname)
        if plugin is not None and module is not importlib.import_module(plugin):
            return f"{fullname} is {module.__name__}, not the plugin's package {plugin}"
        return None
    row = covering_row(path, MODULE_ROWS)
    for error in errors:
        if error is None:
            return f"{fullname} imports one way and not the other: {errors!r}"
        if plugin is not None:
            wanted = f"pip install {distribution_of(plugin)}"
            if wanted not in str(error):
                return f"{fullname}: {error!r} does not say {wanted!r}"
        elif row is None:
            return (f"{fullname}: {error!r}; add a module (or an alias in accelkit.compat.LIGHTNING_PATHS, or a "
                    "plugin's in LIGHTNING_PLUGIN_PATHS), or a row in core/src/accelkit/lightning_modules.toml")
        elif unsaid := _unsaid(str(error), row):
            return f"{fullname}: {error!r} does not say {unsaid}"
    return None


def test_every_lightning_module_path_imports_from_accelkit_or_has_a_row() -> None:
    """Issue 38.3: Lightning's public submodules (``modules`` of the names file, dumped from Lightning 2.6.6) under
    the mechanical rule ``lightning.pytorch.X`` -> ``accelkit.X``: each imports, or raises an ImportError saying
    which distribution to install, or (a row of lightning_modules.toml covering it) that accelkit has no such
    module, its counterpart, what to use instead and the guide's page. Before, 93 of the 164 raised a bare
    ``ModuleNotFoundError: No module named 'accelkit.loggers.comet'``."""
    modules = NAMES["modules"]
    assert "utilities.model_summary" in modules and len(modules) > 100
    problems = [problem for problem in map(_import_problem, modules) if problem]
    assert not problems, "\n".join(problems)


@pytest.mark.slow  # walks the installed Lightning in a process of its own (its modules import torch_xla)
def test_every_module_path_of_the_installed_lightning_imports_or_names_what_to_install(forked_python) -> None:
    """Issue 38.3, from Lightning's own module list: every public module path of the installed
    ``lightning.pytorch`` (and ``pytorch_lightning``, where installed), found by walking the package with
    :mod:`pkgutil` (a path with a ``_private`` part is no user's import; one that does not import there is none
    either), imports from accelkit, raises an ImportError naming the distribution to install, or raises the
    ImportError of the guide's row for it (what to use instead); and the names file the guide's tables come from
    lists the same paths."""
    pytest.importorskip("lightning.pytorch", reason="walks the installed Lightning's modules")
    found = forked_python("""
        import importlib, importlib.util, json, logging, pkgutil, warnings
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        walked = {}
        for top in ("lightning.pytorch", "pytorch_lightning"):
            if importlib.util.find_spec(top.split(".")[0]) is None:
                continue
            package = importlib.import_module(top)
            paths = []
            for info in pkgutil.walk_packages(package.__path__, top + "."):
                relative = info.name[len(top) + 1:]
                if any(part.startswith("_") for part in relative.split(".")):
                    continue
                try:
                    importlib.import_module(info.name)
                except Exception:
                    continue
                paths.append(relative)
            walked[top] = sorted(paths)
        import lightning
        print(json.dumps({"version": lightning.__version__, "walked": walked}))
        """, env={"CUDA_VISIBLE_DEVICES": ""})
    walked = found["walked"]["lightning.pytorch"]
    assert "loggers.wandb" in walked and "strategies.fsdp" in walked and len(walked) > 100, walked
    if found["version"] == NAMES["lightning_version"]:
        assert walked == NAMES["modules"], "run tests/data/dump_lightning_names.py: the names file is stale"
    paths = sorted(set(walked).union(*found["walked"].values()))
    problems = [problem for problem in map(_import_problem, paths) if problem]
    assert not problems, "\n".join(problems)


def test_a_plugins_lightning_path_is_its_package_or_names_the_distribution(monkeypatch) -> None:
    """``from accelkit.loggers.wandb import WandbLogger`` (Lightning's ``lightning.pytorch.loggers.wandb``) is the
    accelkit-wandb plugin's class where it is installed (a ``ModuleNotFoundError`` before issue 38.3); where the
    distribution is not installed, importing the path says which one to install."""
    from accelkit.compat import LIGHTNING_PLUGIN_PATHS, distribution_of

    lightning_classes = {"accelkit.accelerators.cpu": "CPUAccelerator", "accelkit.accelerators.cuda": "CUDAAccelerator",
                         "accelkit.accelerators.xla": "XLAAccelerator",
                         "accelkit.loggers.mlflow": "MLFlowLogger", "accelkit.loggers.wandb": "WandbLogger",
                         "accelkit.strategies.fsdp": "FSDPStrategy", "accelkit.strategies.xla": "XLAStrategy",
                         "accelkit.strategies.launchers.xla": "XLALauncher"}
    assert set(lightning_classes) == set(LIGHTNING_PLUGIN_PATHS)
    for fullname, package in LIGHTNING_PLUGIN_PATHS.items():
        if importlib.util.find_spec(package) is None:
            continue  # not installed here: the other half of this test covers it
        name = lightning_classes[fullname]
        assert getattr(importlib.import_module(fullname), name) is getattr(importlib.import_module(package), name)
        if fullname.startswith("accelkit.accelerators."):  # the package re-exports them, as Lightning's does
            assert getattr(importlib.import_module("accelkit.accelerators"), name) is getattr(
                importlib.import_module(package), name)
    for fullname, package in LIGHTNING_PLUGIN_PATHS.items():
        monkeypatch.delitem(sys.modules, fullname, raising=False)
        parent, _, last = fullname.rpartition(".")  # and the attribute its import set on its parent package
        monkeypatch.delattr(importlib.import_module(parent), last, raising=False)
        monkeypatch.setitem(sys.modules, package, None)  # as where the distribution is not installed
        distribution = distribution_of(package)
        with pytest.raises(ModuleNotFoundError) as info:
            importlib.import_module(fullname)
        assert str(info.value) == (
            f"No module named {fullname!r}: Lightning's lightning.pytorch{fullname[len('accelkit'):]} is provided "
            f"by the {distribution} distribution, which is not installed; pip install {distribution} (then import "
            f"from {fullname} or from {package})")
        # ``from accelkit.loggers import wandb`` says so too (Python's "cannot import name 'wandb'" before)
        assert _from_import_error(fullname) is not None and str(_from_import_error(fullname)) == str(info.value)
    sending_to_plugins = [path for path, row in MODULE_ROWS.items() if "from accelkit_" in row.notes]
    assert not sending_to_plugins, f"module_rows.toml sends users to a plugin: {sending_to_plugins}"


@pytest.mark.slow  # a fresh interpreter: what importing accelkit imports is the subject
def test_importing_accelkit_imports_no_plugin_for_lightnings_paths(run_python) -> None:
    """The paths of ``LIGHTNING_PLUGIN_PATHS`` resolve their plugin when they are imported, never before:
    importing accelkit and the packages holding those paths imports no plugin package."""
    imported = run_python("""
        import json, sys
        import accelkit, accelkit.accelerators, accelkit.loggers, accelkit.strategies, accelkit.strategies.launchers
        print(json.dumps(sorted(name for name in sys.modules if name.startswith("accelkit_"))))
        """, path=[Path(accelkit.__file__).parents[1]])
    assert imported == []


def test_module_rows_name_lightning_paths_that_accelkit_lacks() -> None:
    stale = [path for path in MODULE_ROWS if path not in NAMES["modules"]]
    assert not stale, f"lightning_modules.toml has rows for paths Lightning does not have: {stale}"
    present = [path for path in MODULE_ROWS if _imports(f"accelkit.{path}")]
    assert not present, f"accelkit now has {present}: remove their rows from lightning_modules.toml"
    counterparts = {row.counterpart for row in MODULE_ROWS.values() if row.counterpart}
    assert counterparts and not [name for name in counterparts if not _imports(name)]


def test_a_lightning_path_accelkit_lacks_is_refused_by_a_finder_that_never_stands_in_for_a_module(
        forked_python) -> None:
    """The finder that words the errors of lightning_modules.toml's paths is asked only after Python's own finders
    found nothing: a row for a module accelkit has (planted here) leaves that module importing; and importing
    accelkit, its modules and a Lightning alias path does not even read the rows."""
    found = forked_python("""
        import importlib, importlib.machinery, json, sys
        import accelkit, accelkit.compat as compat
        import accelkit.loggers, accelkit.utilities.model_summary, accelkit.core.module
        read_before = compat.lightning_module_gaps.cache_info().currsize
        finders = [finder if isinstance(finder, type) else type(finder) for finder in sys.meta_path]
        order = [finders.index(importlib.machinery.PathFinder), finders.index(compat.MissingModuleFinder)]
        assert "accelkit.utilities.file_modules" not in sys.modules
        compat.lightning_module_gaps()["utilities.file_modules"] = {"status": "not yet", "notes": "planted"}
        planted = importlib.import_module("accelkit.utilities.file_modules").__file__
        try:
            importlib.import_module("accelkit.loggers.comet")
        except ImportError as error:
            comet = [type(error).__name__, str(error)]
        print(json.dumps({"read_before": read_before, "order": order, "planted": planted, "comet": comet}))
        """, path=[Path(accelkit.__file__).parents[1]])
    assert found["read_before"] == 0
    assert found["order"][0] < found["order"][1]
    assert found["planted"].endswith("file_modules.py")
    assert found["comet"][0] == "ModuleNotFoundError" and "accelkit has no module for Lightning's " \
        "lightning.pytorch.loggers.comet (pytorch_lightning.loggers.comet); its counterpart in accelkit is " \
        "accelkit.loggers. No Comet logger" in found["comet"][1]


def test_lightning_module_paths_are_the_objects_at_accelkit_homes() -> None:
    import accelkit.module.summary as summary
    from accelkit.callbacks import Callback
    from accelkit.callbacks import ModelSummary as ModelSummaryCallback
    from accelkit.callbacks.callback import Callback as CallbackThere
    from accelkit.core.mixins.hparams_mixin import HyperparametersMixin
    from accelkit.core.module import Module
    from accelkit.plugins.environments import SLURMEnvironment
    from accelkit.utilities.model_summary import ModelSummary, summarize

    assert (ModelSummary, summarize) == (summary.ModelSummary, summary.summarize)
    assert ModelSummary is not ModelSummaryCallback and CallbackThere is Callback
    assert Module is accelkit.Module and HyperparametersMixin is accelkit.module.HyperparametersMixin
    assert SLURMEnvironment is accelkit.environments.SLURMEnvironment
    # a module below an alias of a package is the module at its home, not a second copy of its file
    assert importlib.import_module("accelkit.core.datamodule") is importlib.import_module("accelkit.module.datamodule")
    assert importlib.import_module("accelkit.plugins.environments.slurm") is \
        importlib.import_module("accelkit.environments.slurm")


def test_what_lightning_raises_as_misconfiguration_is_what_the_guide_says(tmp_path) -> None:
    """The row of ``lightning.pytorch.utilities.exceptions`` (``lightning_modules.toml``) tells a user who
    catches Lightning's ``MisconfigurationException`` what accelkit raises in its place; each kind it names, for a
    mistake on which Lightning 2.6.6 raises ``MisconfigurationException``, is that type here, and all are caught by
    the ``except`` the row gives."""
    from accelkit.errors import ConfigurationError
    from helpers.models import RegressionModule, quiet_trainer

    class ReturnsText(RegressionModule):
        def configure_optimizers(self) -> Any:
            return "sgd"

    class Manual(RegressionModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

    class HourlyScheduler(RegressionModule):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1), "interval": "hour"}}

    mistakes = [
        (ConfigurationError, lambda: quiet_trainer(tmp_path, limit_train_batches=1.5)),
        (ConfigurationError, lambda: accelkit.callbacks.EarlyStopping(monitor="val_loss", mode="middle")),
        (TypeError, lambda: quiet_trainer(tmp_path, max_epochs=1).fit(ReturnsText())),
        (ValueError, lambda: quiet_trainer(tmp_path, max_epochs=1).fit(HourlyScheduler())),
        (ValueError, lambda: quiet_trainer(tmp_path, max_epochs=1, accumulate_grad_batches=2).fit(Manual())),
        (NotImplementedError, lambda: quiet_trainer(tmp_path).validate(accelkit.Module(), [torch.zeros(1)])),
    ]
    for expected, mistake in mistakes:
        with pytest.raises(expected):
            try:
                mistake()
            except (ValueError, TypeError, NotImplementedError):
                raise
            except Exception as other:  # not caught by the row's except: the test names it
                raise AssertionError(f"{type(other).__name__}: {other}") from other


# --------------------------------------------------------------------------------------------- the guide
def test_the_guide_shows_the_data() -> None:
    text = GUIDE.read_text()
    assert sync_guide(text, ROWS, NAMES) == text, (
        "docs/migrating-from-lightning.rst differs from tests/data/migration_rows.toml: run "
        "`python tests/helpers/migration_table.py` to rewrite its tables and counts")


def test_counts_add_up() -> None:
    total = counts(ROWS, NAMES)["total"]
    assert total["lightning"] == sum(len(tabled_names(s.key, NAMES)) for s in SECTIONS)
    assert total["supported"] + total["refused"] + total["not yet"] == total["lightning"]


# --------------------------------------------------------------------------------------------- ModelCheckpoint
def _defaults_table() -> dict[str, list[str]]:
    """The rows of the guide's *ModelCheckpoint's defaults* table: setting -> [Lightning, accelkit, verdict]."""
    text = GUIDE.read_text()
    block = text[text.index(".. list-table:: ModelCheckpoint's defaults"):]
    block = block[:block.index("\n\n", block.index("   * - "))]
    rows: dict[str, list[str]] = {}
    for row in block.split("   * - ")[2:]:  # the header row first
        cells = [cell.strip() for cell in row.split("\n     - ")]
        rows[cells[0]] = cells[1:]
    return rows


_CONSTANTS = ("CHECKPOINT_JOIN_CHAR", "CHECKPOINT_EQUALS_CHAR", "CHECKPOINT_NAME_LAST", "FILE_EXTENSION",
              "STARTING_VERSION")
_SETTINGS = ("save_last", "save_top_k", "monitor", "filename", "dirpath", "every_n_epochs", "mode",
             "save_weights_only", "auto_insert_metric_name", "verbose")


@pytest.mark.slow  # reads Lightning's Trainer in a process of its own (it imports torch_xla)
def test_the_guides_model_checkpoint_defaults_are_lightnings_and_ours(forked_python) -> None:
    """Issue 38.1: every keyword and name constant of Lightning's ``ModelCheckpoint`` has a row whose Lightning
    column is its default there (read from the installed Lightning, not written down), whose accelkit column is ours,
    and which says "same" exactly when they are equal; the Trainer's default callbacks have the settings of a
    ``ModelCheckpoint()``, in both."""
    pytest.importorskip("lightning.pytorch", reason="reads Lightning's ModelCheckpoint defaults")
    from accelkit.callbacks import ModelCheckpoint

    theirs = forked_python(f"""
        import inspect, json, logging, warnings
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        import lightning.pytorch as pl
        klass = pl.callbacks.ModelCheckpoint
        trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                             devices=1)
        print(json.dumps({{
            "defaults": {{n: repr(p.default) for n, p in inspect.signature(klass.__init__).parameters.items()
                         if n != "self"}},
            "constants": {{n: repr(getattr(klass, n)) for n in {_CONSTANTS!r}}},
            "default_callback": {{n: repr(getattr(trainer.checkpoint_callback, n)) for n in {_SETTINGS!r}}},
            "no_argument": {{n: repr(getattr(klass(), n)) for n in {_SETTINGS!r}}}}}))
        """, env={"CUDA_VISIBLE_DEVICES": ""})
    rows = _defaults_table()
    ours = inspect.signature(ModelCheckpoint.__init__).parameters
    expected = {name: (f"``{value}``", f"``{ours[name].default!r}``" if name in ours else "not taken")
                for name, value in theirs["defaults"].items()}
    expected.update({name: (f"``{value}``", f"``{getattr(ModelCheckpoint, name)!r}``")
                     for name, value in theirs["constants"].items()})
    wrong = []
    for name, (lightning, accelkit_value) in expected.items():
        row = rows.get(f"``{name}``")
        if row is None:
            wrong.append(f"{name}: no row")
        elif tuple(row[:2]) != (lightning, accelkit_value):
            wrong.append(f"{name}: the row says {tuple(row[:2])}, the defaults are {(lightning, accelkit_value)}")
        elif row[2].startswith("same") != (lightning == accelkit_value):
            wrong.append(f"{name}: the row's verdict {row[2][:30]!r} does not match {(lightning, accelkit_value)}")
    assert not wrong, "\n".join(wrong)

    trainer = accelkit.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False,
                               accelerator="cpu", devices=1)
    assert rows["the Trainer's default callback"][:2] == ["``ModelCheckpoint()``"] * 2
    assert theirs["default_callback"] == theirs["no_argument"]
    assert {n: repr(getattr(trainer.checkpoint_callback, n)) for n in _SETTINGS} == theirs["default_callback"]


def test_the_guides_hard_linked_last_ckpt_row_holds(tmp_path) -> None:
    """The row *last.ckpt of the state just written as a top-k file*: accelkit's ``last.ckpt`` is the same file as
    the top-k one written at the same step (one write), as the guide's defaults table says."""
    from helpers.models import RegressionModule, quiet_trainer

    assert _defaults_table()["``last.ckpt`` of the state just written as a top-k file"][1] == "a hard link"
    callback = accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    quiet_trainer(tmp_path, max_epochs=1, callbacks=[callback], enable_checkpointing=True).fit(RegressionModule())
    assert Path(callback.last_model_path).samefile(callback.best_model_path)
