"""The documentation builds without a warning, documents every hook, and every hook is exercised by a test;
every public name of accelkit and of the first-party plugins has a docstring."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
from pathlib import Path

import pytest

import accelkit
from accelkit import hookspecs
from helpers.requirements import import_or_skip

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HOOKS = sorted(name for name, obj in vars(hookspecs).items()
               if name.startswith("accelkit_") and callable(obj) and hasattr(obj, "accelkit_spec"))
PLUGIN_PACKAGES = sorted(
    p.name for src in (ROOT / "plugins").glob("*/src") for p in src.iterdir() if (p / "__init__.py").is_file())
TEST_TREES = [ROOT / "tests", *sorted((ROOT / "plugins").glob("*/tests")), ROOT / "templates" / "plugin" / "tests"]


def test_there_are_hooks_and_plugins_to_check():
    assert "accelkit_register_accelerators" in HOOKS and len(HOOKS) >= 8
    assert "accelkit_cpu" in PLUGIN_PACKAGES


@pytest.fixture(scope="module")
def site(tmp_path_factory, prewarmed) -> Path:
    # the module `python -m sphinx` runs: a machine may hold a partial sphinx package without it (the GPU kit's)
    import_or_skip("sphinx.cmd.build", reason="sphinx.cmd.build, which builds the documentation, cannot be imported "
                                              "(sphinx is not installed, or only in part)")
    out = tmp_path_factory.mktemp("html")
    # forked from the prewarmed interpreter: autodoc imports accelkit, and with it torch, which it has imported already
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = prewarmed.run(["-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)], cwd=ROOT,
                           env=env, timeout=300)
    assert result.returncode == 0, f"sphinx-build -W failed:\n{result.stdout}\n{result.stderr}"
    return out


@pytest.mark.slow
def test_every_page_is_built(site):
    for source in DOCS.glob("*.rst"):
        assert (site / f"{source.stem}.html").is_file(), source.name


@pytest.mark.slow
def test_public_classes_are_linked_under_their_import_paths(site):
    """The build is nitpicky (docs/conf.py), so every reference resolves; and public classes are documented where
    users import them from, so the progress-bar page's references are links to ``accelkit.callbacks.X``."""
    page = (site / "progress-bar.html").read_text()
    for name in ("TQDMProgressBar", "ProgressBar", "RichProgressBar", "RichProgressBarTheme"):
        assert f'href="api.html#accelkit.callbacks.{name}"' in page, name
    assert 'id="accelkit.callbacks.ModelCheckpoint"' in (site / "api.html").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented(site, hook):
    api = (site / "api.html").read_text()
    assert f'id="accelkit.hookspecs.{hook}"' in api, f"{hook} has no entry in the API reference"
    plugins_page = re.sub(r"<[^>]+>", "", (site / "plugins.html").read_text())
    assert hook in plugins_page, f"docs/plugins.rst does not describe {hook}"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_exercised_by_a_test(hook):
    users = [path for tree in TEST_TREES for path in tree.rglob("*.py")
             if path.name != "test_docs.py" and hook in path.read_text()]
    assert users, f"no test mentions {hook}"


def _attribute_documented(package: str, name: str) -> bool:
    """A module-level constant is documented by a ``#:`` comment (or a string after it) where it is defined."""
    # a partial sphinx (the GPU kit's: ``import sphinx`` works, ``sphinx.pycode`` does not) skips too
    import_or_skip("sphinx.pycode", reason="sphinx.pycode, which reads the '#:' comments, cannot be imported "
                                           "(sphinx is not installed, or only in part)")
    from sphinx.pycode import ModuleAnalyzer

    module = importlib.import_module(package)
    names = [package]
    if hasattr(module, "__path__"):
        names += [m.name for m in pkgutil.walk_packages(module.__path__, f"{package}.")]
    for module_name in names:
        try:
            docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        except Exception:  # a module sphinx cannot analyse documents nothing
            continue
        if any(doc_name == name and "".join(lines).strip() for (_, doc_name), lines in docs.items()):
            return True
    return False


def public_names() -> list[tuple[str, str]]:
    """Every name in the ``__all__`` of accelkit and the plugins, less ``__version__`` (a version string,
    documented by convention rather than by a docstring)."""
    found: list = [("accelkit", name) for name in accelkit.__all__ if name != "__version__"]
    for package in PLUGIN_PACKAGES:
        if importlib.util.find_spec(package) is None:  # a machine set up with some plugins only (a GPU machine)
            found.append(pytest.param(package, "*", marks=pytest.mark.skip(reason=f"{package} is not installed")))
            continue
        found += [(package, name) for name in importlib.import_module(package).__all__ if name != "__version__"]
    return found


@pytest.mark.parametrize("package, name", public_names())
def test_every_public_name_has_a_docstring(package, name):
    obj = getattr(importlib.import_module(package), name)
    if inspect.isclass(obj) or inspect.isroutine(obj):
        own = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
        assert own and own.strip(), f"{package}.{name} has no docstring"
    elif isinstance(obj, (str, int, float, tuple, frozenset, dict)):
        assert _attribute_documented(package, name), f"{package}.{name} has no '#:' documentation comment"
    else:  # markers and other instances: documented where they are defined
        assert _attribute_documented(package, name) or (obj.__doc__ and obj.__doc__ != type(obj).__doc__), \
            f"{package}.{name} is not documented"
