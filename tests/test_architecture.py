"""The house rules, checked on every run: no import circle, every import of the core pointing down the layers of
docs/architecture.rst, no device name in the core, no private name used across modules, no function over 80 lines,
and the public import paths of docs/architecture.rst (new homes and the flat layout's old paths) naming the same
objects."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import architecture, import_cycles, layers, long_functions  # noqa: E402

ROOT = architecture.ROOT
CORE = ROOT / "core" / "src" / "accelkit"
DOC = ROOT / "docs" / "architecture.rst"

#: private names read across modules on purpose, with the reason
ALLOWED_PRIVATE = {
    # torch_xla's ParallelLoader: stopping its copy thread before close() (see the function's docstring)
    "plugins/xla_spawn/src/accelkit_xla_spawn/device_loader.py": {"uses parallel._done"},
}

#: private attributes named by a string (``getattr(x, "_name")``) on purpose: each is a third party's, with the reason.
#: Our own objects say such things through public, documented attributes (``Callback.monitors_metrics``).
ALLOWED_STRING_PROTOCOLS = {
    # a named tuple's field names: public API of collections.namedtuple (underscored so as not to clash with fields)
    "*": {"_fields"},
    # argparse's (and jsonargparse's) parser keeps its arguments in `_actions`, with no public accessor
    "core/src/accelkit/cli/config_errors.py": {"_actions"},
    # torchmetrics' Metric keeps the value of its last forward() (the step value of a logged Metric) there
    "core/src/accelkit/loops/metrics.py": {"_forward_cache"},
    # Lightning's name for what save_hyperparameters(logger=...) decided, on Lightning's Module and DataModule
    # (module/hparams.py keeps it under that name for code written for Lightning); module/hparams.py imports this
    # module, so it cannot ask the mixin's class
    "core/src/accelkit/module/saving.py": {"_log_hyperparams"},
    # torch_xla internals, checked on 2.9: the runtime's initialised flag and ParallelLoader's queues and stop flag
    "plugins/xla_spawn/src/accelkit_xla_spawn/runtime.py": {"_XLAC", "_xla_runtime_is_initialized"},
    "plugins/xla_spawn/src/accelkit_xla_spawn/device_loader.py": {"_queues", "_done"},
    # not a third party's: loops/fit.py and loops/resume.py are being rewritten by issue 25 item 1 (typed run state);
    # these two go with it (nothing sets `trainer._epoch_training_done`: the getattr is always False)
    "core/src/accelkit/loops/fit.py": {"_deferred_note"},
    "core/src/accelkit/loops/resume.py": {"_epoch_training_done"},
}


def test_no_import_circle():
    roots = [str(root) for root in architecture.source_roots()]
    known = {}
    for root in roots:
        known.update(import_cycles.modules(root))
    graph = {name: set(import_cycles.imports(name, path, known)) for name, path in known.items()}
    assert len(known) > 100  # the whole tree was read
    assert import_cycles.circles(graph) == []


#: the ``if TYPE_CHECKING:`` imports that point up the drawing (importer, imported), with the reason; none runs
ALLOWED_TYPE_ONLY = {
    ("callbacks/", "trainer/"): "a callback's hooks are annotated with the Trainer they receive",
    ("loops/", "trainer/"): "the loops' functions are annotated with the Trainer they run for",
    ("module/", "trainer/"): "Module.trainer, DataModule.trainer and the hooks' annotations",
    ("module/", "loops/"): "the Module's manual optimization is annotated with the loops' Optimization",
}


def test_every_run_time_import_points_down_the_documented_layers():
    assert layers.undrawn() == [], "packages or modules missing from the drawing of docs/architecture.rst"
    assert [str(edge) for edge in layers.upward_imports()] == []


def test_the_type_only_edges_are_the_allowed_ones_and_documented():
    assert layers.type_only_edges() == set(ALLOWED_TYPE_ONLY)
    documented = set(re.findall(r"^- ``(\S+)`` -> ``(\S+)``:", DOC.read_text(), re.M))
    assert documented == set(ALLOWED_TYPE_ONLY)


def test_the_drawing_is_read_as_layers():
    drawn = layers.documented_layers()
    assert drawn[0] == ["__init__.py"] and ["callbacks/", "loggers/", "profilers.py"] in drawn
    assert drawn.index(["loops/"]) < drawn.index(["module/"]) < drawn.index(["utilities/"])


def test_the_layer_check_sees_imports_that_point_up(tmp_path):
    src = tmp_path / "src" / "accelkit"
    for package in ("high", "low"):
        (src / package).mkdir(parents=True)
        (src / package / "__init__.py").write_text("")
    (src / "__init__.py").write_text("")
    (src / "base.py").write_text("")
    (src / "low" / "top.py").write_text("from accelkit.high import a\n")
    (src / "low" / "inner.py").write_text("def f():\n    from accelkit.high.a import g\n    return g\n")
    (src / "low" / "typed.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                          "    from accelkit.high.a import g\n")
    (src / "high" / "a.py").write_text("from accelkit.low import top\nfrom accelkit import base\n\n\ndef g():\n"
                                       "    pass\n")
    (src / "base.py").write_text("import accelkit.low\n")
    doc = tmp_path / "architecture.rst"
    doc.write_text(".. code-block:: text\n\n    high/     the top\n      |\n    low/      below it\n"
                   "      |         more words\n    base.py\n\nText.\n")
    assert layers.documented_layers(doc) == [["high/"], ["low/"], ["base.py"]]
    assert layers.undrawn(src.parent, doc) == ["__init__.py"]
    found = [str(edge) for edge in layers.upward_imports(src.parent, doc)]
    assert found == ["accelkit.base -> accelkit.low (accelkit.low)", "accelkit.low.inner -> accelkit.high.a (g)",
                     "accelkit.low.top -> accelkit.high.a (a)"]
    assert layers.type_only_edges(src.parent, doc) == {("low/", "high/")}


def test_the_core_names_no_device():
    assert architecture.device_identifiers(CORE) == []


def test_the_device_check_sees_device_names(tmp_path):
    (tmp_path / "mod.py").write_text("def seed_cuda():\n    return 'cuda'  # a string is not an identifier\n")
    hits = architecture.device_identifiers(tmp_path)
    assert len(hits) == 1 and hits[0].endswith(":1:seed_cuda")


def test_no_private_name_is_used_across_modules():
    found = [use for use in architecture.private_uses()
             if use.what not in ALLOWED_PRIVATE.get(use.path, set())]
    assert found == [], "\n".join(map(str, found))


def test_the_private_name_check_sees_cross_module_uses(tmp_path):
    src = tmp_path / "core" / "src" / "pkg"
    src.mkdir(parents=True)
    (tmp_path / "plugins").mkdir()
    (src / "a.py").write_text("class A:\n    def __init__(self):\n        self._secret = 1\n\n"
                              "def _helper():\n    pass\n")
    (src / "b.py").write_text("from accelkit.a import _helper\n\ndef peek(a):\n    return a._secret\n")
    uses = [use.what for use in architecture.private_uses(tmp_path)]
    assert uses == ["imports _helper from accelkit.a", "uses a._secret"]


def test_no_private_attribute_is_named_by_a_string():
    def allowed(use: architecture.Use) -> bool:
        name = use.what.rsplit(", ", 1)[1].strip("')")
        return name in ALLOWED_STRING_PROTOCOLS["*"] | ALLOWED_STRING_PROTOCOLS.get(use.path, set())

    found = [use for use in architecture.string_protocols() if not allowed(use)]
    assert found == [], "\n".join(map(str, found))


def test_the_string_protocol_check_sees_private_names_in_strings(tmp_path):
    src = tmp_path / "core" / "src" / "pkg"
    src.mkdir(parents=True)
    (tmp_path / "plugins").mkdir()
    (src / "a.py").write_text("def f(cb, x):\n    setattr(x, '__doc__', '')\n    getattr(x, 'public', 0)\n"
                              "    return getattr(cb,\n                   '_monitors', False) or hasattr(x, '_y')\n")
    uses = [str(use) for use in architecture.string_protocols(tmp_path)]
    assert uses == ["core/src/pkg/a.py:4: getattr(cb, '_monitors')", "core/src/pkg/a.py:5: hasattr(x, '_y')"]


def test_no_function_over_80_lines():
    long = []
    for root in architecture.source_roots():
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        long_functions.body_lines(node) > 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert long == []


def _documented_paths() -> list[tuple[str, str]]:
    """``(public path, home)`` pairs listed in docs/architecture.rst as ``- ``accelkit.X`` is ``accelkit.y.X````."""
    rows = re.findall(r"^- ``(accelkit[\w.]*)\.(\w+)`` is ``(accelkit[\w.]*)\.(\w+)``$", DOC.read_text(), re.M)
    return [(f"{a}.{b}", f"{c}.{d}") for a, b, c, d in rows]


def test_the_architecture_page_lists_import_paths():
    assert len(_documented_paths()) >= 20


#: the deprecation warning of accelkit 0.1's module paths, for the tests that import them on purpose
OLD_PATH_WARNING = "ignore:accelkit.* is a module path of accelkit 0.1:DeprecationWarning"


@pytest.mark.filterwarnings(OLD_PATH_WARNING)
@pytest.mark.parametrize("public, home", _documented_paths())
def test_documented_import_paths_name_the_same_object(public, home):
    def resolve(dotted: str):
        module, name = dotted.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)

    assert resolve(public) is resolve(home)


@pytest.mark.filterwarnings(OLD_PATH_WARNING)
@pytest.mark.parametrize("old", sorted(importlib.import_module("accelkit.compat").MOVED))
def test_every_old_module_path_imports_as_its_new_home(old):
    new = importlib.import_module("accelkit.compat").MOVED[old]
    assert importlib.import_module(old) is importlib.import_module(new)


def _import_with_a_fresh_finder(monkeypatch, *paths: str) -> list[warnings.WarningMessage]:
    """Import each of ``paths`` twice, through a finder that has warned about nothing yet (the alias's entry in
    ``sys.modules`` is dropped before each import; the module at its home stays); return the warnings raised."""
    from accelkit import compat

    monkeypatch.setattr(sys, "meta_path", [compat.MovedModuleFinder(), *sys.meta_path])
    with warnings.catch_warnings():  # the parents first (an old parent path warns about itself): the test asks
        warnings.simplefilter("ignore", DeprecationWarning)  # about the paths' own warnings, in any test order
        for path in paths:
            if "." in path.removeprefix("accelkit."):
                importlib.import_module(path.rsplit(".", 1)[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for path in [*paths, *paths]:
            monkeypatch.delitem(sys.modules, path, raising=False)
            __import__(path)  # an import statement's machinery: the warning names this file, as it would a user's
    return caught


def test_an_old_module_path_warns_once_naming_its_new_path_and_the_version_removing_it(monkeypatch):
    caught = _import_with_a_fresh_finder(monkeypatch, "accelkit.cli_config", "accelkit.launchers.spawn")
    assert [(w.category, str(w.message)) for w in caught] == [
        (DeprecationWarning, "accelkit.cli_config is a module path of accelkit 0.1, deprecated (accelkit 0.3.0 removes "
                             "it): use accelkit.cli.config instead (in imports, and in class paths of a saved "
                             "config.yaml)"),
        (DeprecationWarning, "accelkit.launchers.spawn is a module path of accelkit 0.1, deprecated (accelkit 0.3.0 "
                             "removes it): use accelkit.strategies.launchers.spawn instead (in imports, and in class "
                             "paths of a saved config.yaml)")]
    assert caught[0].filename == __file__  # the warning points at the code importing the old path


def test_new_paths_and_lightnings_paths_do_not_warn(monkeypatch):
    caught = _import_with_a_fresh_finder(monkeypatch, "accelkit.utilities.model_summary", "accelkit.core.module",
                                         "accelkit.strategies.strategy", "accelkit.cli.config", "accelkit.strategies")
    assert caught == []


def test_the_loops_have_no_alias_inside_the_new_layout():
    with pytest.raises(ModuleNotFoundError, match="accelkit.loops.logging"):
        importlib.import_module("accelkit.loops.logging")


@pytest.mark.slow
def test_an_old_path_imported_by_a_library_warns_under_pythons_default_filters(run_python):
    """A class path of a saved config.yaml is imported by the CLI's parser, not by ``__main__``, where Python hides a
    DeprecationWarning by default; accelkit shows its own (unless the interpreter was given warning options)."""
    shown = run_python("""
        import contextlib, importlib, io, json
        import accelkit
        with contextlib.redirect_stderr(io.StringIO()) as err:
            importlib.import_module("accelkit.cli_config")
        print(json.dumps(err.getvalue()))
    """, env={"PYTHONWARNINGS": ""})
    assert "DeprecationWarning: accelkit.cli_config is a module path of accelkit 0.1" in shown


@pytest.mark.filterwarnings(OLD_PATH_WARNING)
def test_a_module_below_an_old_package_path_is_the_module_at_its_new_home():
    """Not a second copy of its file loaded under the old name (which also replaced the package's attribute)."""
    import sys

    home = importlib.import_module("accelkit.strategies.launchers.spawn")
    assert importlib.import_module("accelkit.launchers.spawn") is home
    assert sys.modules["accelkit.strategies.launchers.spawn"] is home
    assert importlib.import_module("accelkit.strategies.launchers").spawn is home


@pytest.mark.filterwarnings(OLD_PATH_WARNING)
def test_old_class_paths_in_saved_configs_still_resolve():
    from accelkit.cli.config import ReduceLROnPlateau

    module = importlib.import_module("accelkit.cli_config")  # the path configs saved before the move name
    assert module.ReduceLROnPlateau is ReduceLROnPlateau
    from accelkit.strategies import DDPStrategy as new
    from accelkit.strategy import DDPStrategy  # noqa: F401 - the old flat layout's most used path

    assert DDPStrategy is new


def test_lightnings_pytorch_attribute_is_accelkit_itself():
    """``import lightning as L`` then ``L.pytorch.callbacks.ModelCheckpoint``: with the import changed the program
    reads ``accelkit.pytorch...``, which is accelkit (as ``lightning.pytorch`` -> ``accelkit`` in the guide)."""
    import accelkit

    assert accelkit.pytorch is accelkit
    from accelkit.callbacks import ModelCheckpoint

    assert accelkit.pytorch.callbacks.ModelCheckpoint is ModelCheckpoint
    with pytest.raises(AttributeError, match="module 'accelkit' has no attribute 'no_such_package'"):
        accelkit.no_such_package



def test_lightnings_pytorch_package_imports_as_accelkit():
    """``import lightning.pytorch as pl`` (Cogniveon/pytorch-template, Novartis/AEGIS...) with the package name
    changed: ``import accelkit.pytorch as pl`` is accelkit, and the modules below it accelkit's
    (``from accelkit.pytorch.callbacks import ModelCheckpoint``); accelkit's own spec is left as it was."""
    import accelkit
    import accelkit.pytorch as pl
    from accelkit.callbacks import ModelCheckpoint
    from accelkit.pytorch.callbacks import ModelCheckpoint as ThroughPytorch
    from accelkit.pytorch.loggers.logger import Logger

    assert pl is accelkit and ThroughPytorch is ModelCheckpoint and Logger is accelkit.loggers.Logger
    assert accelkit.__spec__.name == "accelkit" and accelkit.__spec__.submodule_search_locations
    assert importlib.import_module("accelkit.pytorch.core.module") is importlib.import_module("accelkit.module.module")

@pytest.mark.slow
def test_a_subpackage_not_imported_yet_is_an_attribute(run_python):
    """In a fresh interpreter, ``accelkit.loggers`` (not imported by ``import accelkit``) is reached as an
    attribute, as ``L.pytorch.loggers.TensorBoardLogger`` does."""
    found = run_python("""
        import json, sys
        import accelkit as L
        before = "accelkit.loggers" in sys.modules
        print(json.dumps([before, L.pytorch.loggers.TensorBoardLogger.__module__]))
    """)
    assert found == [False, "accelkit.loggers.tensorboard"]


def test_every_name_a_module_exports_exists():
    """``from accelkit.x import *`` works everywhere: each name in a module's ``__all__`` is defined there (a name
    left behind when its definition moved makes the star import raise)."""
    import pkgutil

    import accelkit

    missing = []
    for info in pkgutil.walk_packages(accelkit.__path__, "accelkit."):
        module = importlib.import_module(info.name)
        missing += [f"{info.name}.{name}" for name in getattr(module, "__all__", ()) if not hasattr(module, name)]
    assert missing == []
