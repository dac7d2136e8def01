"""Sphinx configuration of the accelkit documentation (built with ``sphinx-build -W -b html docs <out>``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Build from a checkout even where the distributions are not installed.
for src in [ROOT / "core" / "src", *sorted((ROOT / "plugins").glob("*/src"))]:
    if str(src) not in sys.path:
        sys.path.append(str(src))

from accelkit.__about__ import __version__  # noqa: E402

project = "accelkit"
author = "accelkit developers"
copyright = "accelkit developers"
version = release = __version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}
# Device runtimes are never imported to build the docs (plugin modules import them lazily anyway).
rst_epilog = f".. |hookapi| replace:: {__import__('accelkit').HOOK_API_VERSION}\n"
autodoc_mock_imports = ["torch_xla"]

# Every cross-reference must resolve (sphinx -n): a reference to an accelkit name that is not documented, or is
# documented under another path than the one users import, fails the build. The build runs offline, so the
# documentation of torch, the standard library and other dependencies (intersphinx inventories) is not there;
# references into them are left as plain text.
nitpicky = True
_EXTERNAL = ("torch", "os", "collections", "pathlib", "argparse", "jsonargparse", "io", "enum", "contextlib",
             "multiprocessing", "typing", "datetime", "numpy", "logging", "concurrent", "tqdm", "rich", "pluggy",
             "inspect", "types", "abc", "threading", "subprocess", "signal", "socket", "importlib", "packaging",
             "tempfile", "functools", "warnings", "sys", "mlflow", "tensorboard", "torchmetrics", "yaml",
             "dataclasses", "builtins", "re", "json", "time", "uuid", "weakref", "queue", "pickle", "math",
             "optuna", "lightning", "pytorch_lightning", "torchdata", "safetensors", "traceback", "shutil", "_pickle")
nitpick_ignore_regex = [(r"py:.*", rf"({'|'.join(_EXTERNAL)})(\..*)?"),
                        # builtins and common short spellings of external types in signatures and docstrings
                        (r"py:.*", r"(int|float|str|bool|bytes|dict|list|tuple|set|frozenset|object|type|None|"
                                   r"callable|Callable|Any|Path|Namespace|Tensor|nn\.Module|timedelta|"
                                   r"optional|Optional|Iterable|Iterator|Mapping|Sequence|Union|TypeVar|"
                                   r"Exception|BaseException|RuntimeError|ValueError|TypeError|KeyError|"
                                   r"AttributeError|ImportError|OSError|FileNotFoundError|NotImplementedError|"
                                   r"DataLoader|Dataset|Sampler|Optimizer|LRScheduler|ArgumentParser)"),
                        # private names (a base class or an annotation may name one; they are not documented)
                        (r"py:.*", r"(.*\.)?_\w+"),
                        # the loops' internals, which signatures of documented classes may name (the run state's
                        # fields name them by their short names, imported for type checking only)
                        (r"py:.*", r"accelkit\.loops\..*"),
                        (r"py:.*", r"(MetricStore|HookCaller|DataConnector|Publisher|Optimization|FitLoop)"),
                        # names the annotations use (issue 40's types), spelled as the checker imports them:
                        # external ones (torch's, rich's, matplotlib's type aliases; a ParamSpec's parts) ...
                        (r"py:.*", r"(~?_P(\.args|\.kwargs)?|Store|StateDict|STATE_DICT_TYPE|MAP_LOCATION|"
                                   r"IterableDataset|numbers\..*|Summary|Figure|SubFigure|Axes|StyleType|"
                                   r"ProgressColumn|LoadPlanner|LoadPlan|Future|Provides|_frozen_importlib\..*)"),
                        # ... and accelkit's Protocols, TypedDicts and aliases that only annotate (no API of
                        # their own: their source says what each holds)
                        (r"py:.*", r"(accelkit\.[\w.]+\.)?(AutocastDevice|EnvironmentSource|SetsEpoch|"
                                   r"RegistryOwner|StateLoader|PrintOptions|LogOptions|SilentExperiment|"
                                   r"AgreementStore|EnvironmentDescription|RankDescription|Stepper|StepOutput|PluginReport|"
                                   r"DoctorReport|Block|ReduceLROnPlateau|OptimizerLRSchedulerConfig|"
                                   r"OptimizerConfig|LRScheduler|LRSchedulerConfigType)")]


def _same_object_target(app, env, node, contnode):
    """Resolve a Python reference written with an object's defining path (``accelkit.strategies.parallel.
    ParallelStrategy``, as base classes and signatures spell it) to the path it is documented under
    (``accelkit.strategies.ParallelStrategy``): the same object, documented once, under the name users import."""
    import importlib

    if node.get("refdomain") != "py" or not node.get("reftarget", "").startswith("accelkit"):
        return None
    domain = env.get_domain("py")

    def find(path: str):
        parts = path.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except Exception:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                return None
            return obj
        return None

    if not hasattr(env, "_accelkit_documented"):
        documented = {}
        for name, entry in domain.objects.items():
            if name.startswith("accelkit") and not entry.aliased:
                obj = find(name)
                if obj is not None and not isinstance(obj, (str, int, float, bool, tuple, frozenset)):
                    documented.setdefault(id(obj), name)
        env._accelkit_documented = documented
    wanted = find(node["reftarget"])
    name = env._accelkit_documented.get(id(wanted)) if wanted is not None else None
    if name is None:
        return None
    from sphinx.util.nodes import make_refnode

    entry = domain.objects[name]
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, name)


def setup(app):
    app.connect("missing-reference", _same_object_target)
