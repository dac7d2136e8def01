"""Static checks of the code's shape (the house rules of CONTRIBUTING.md), used by tests/test_architecture.py
and from the command line:

    python tests/helpers/architecture.py    # private names used across modules, and private attributes named
                                            # by strings (getattr(x, "_name")), in core/ and plugins/

The import-circle and long-function checks are :mod:`import_cycles` and :mod:`long_functions` beside this file
(copies of the shared house tools); :func:`device_identifiers` counts identifiers naming a device family.

A *private name* is one starting with a single underscore that our own code defines: a module-level function,
class or constant, a method, or an attribute set as ``self._name``. It is *used across modules* when a module
imports it from another module (``from accelkit.x import _name``), or reads or writes it on an object other than
``self``/``cls`` (``trainer._metrics``) while the module does not define that name itself.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUR_PACKAGES = ("accelkit", "accelkit_")


def source_roots(root: Path = ROOT) -> list[Path]:
    """``core/src`` and every ``plugins/*/src``."""
    return [root / "core" / "src", *sorted((root / "plugins").glob("*/src"))]


def python_files(root: Path = ROOT) -> list[Path]:
    return [path for src in source_roots(root) for path in sorted(src.rglob("*.py"))]


#: words that name a device family; an identifier containing one (split on ``_`` and camel case) names a device
DEVICE_FAMILIES = {"cuda", "xla", "tpu", "tpus", "gpu", "gpus", "nccl", "pjrt", "mps", "npu", "hpu"}


def device_identifiers(folder: Path) -> list[str]:
    """``path:line:identifier`` for every identifier (not strings, not comments) naming a device family in the
    Python files under ``folder``."""
    import io
    import re
    import tokenize

    hits = []
    for path in sorted(folder.rglob("*.py")):
        for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
            if token.type != tokenize.NAME:
                continue
            parts = re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", token.string)
            if any(part.lower() in DEVICE_FAMILIES for part in parts):
                hits.append(f"{path.relative_to(folder)}:{token.start[0]}:{token.string}")
    return hits


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_private_names(tree: ast.AST) -> set[str]:
    """Private names a module defines: top-level and class-level definitions and ``self._x = ...`` targets."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _is_private(node.name):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name) and _is_private(sub.id):
                        names.add(sub.id)
                    elif isinstance(sub, ast.Attribute) and _is_private(sub.attr) and _receiver_is_own(sub):
                        names.add(sub.attr)
    return names


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _receiver_is_own(node: ast.Attribute) -> bool:
    value = node.value
    if isinstance(value, ast.Name) and value.id in ("self", "cls"):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def private_uses(root: Path = ROOT) -> list[Use]:
    """Every private name used across modules of our code."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in python_files(root)}
    ours: set[str] = set()
    own_names = {}
    for path, tree in trees.items():
        own_names[path] = defined_private_names(tree)
        ours |= own_names[path]
    uses: list[Use] = []
    for path, tree in trees.items():
        rel = str(path.relative_to(root))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(OUR_PACKAGES):
                for alias in node.names:
                    if _is_private(alias.name):
                        uses.append(Use(rel, node.lineno, f"imports {alias.name} from {node.module}"))
            elif isinstance(node, ast.Attribute) and _is_private(node.attr) and not _receiver_is_own(node):
                if node.attr in ours and node.attr not in own_names[path]:
                    uses.append(Use(rel, node.lineno, f"uses {ast.unparse(node)}"))
    return uses


#: the built-ins that name an attribute by a string
ATTRIBUTE_BUILTINS = ("getattr", "hasattr", "setattr", "delattr")


def string_protocols(root: Path = ROOT) -> list[Use]:
    """Every ``getattr``/``hasattr``/``setattr``/``delattr`` naming a private (``_name``, not ``__dunder__``)
    attribute by a string literal in our code: a private protocol the private-name check cannot see."""
    uses: list[Use] = []
    for path in python_files(root):
        rel = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ATTRIBUTE_BUILTINS and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and isinstance(name.value, str) and _is_private(name.value):
                    uses.append(Use(rel, node.lineno, f"{node.func.id}({ast.unparse(node.args[0])}, {name.value!r})"))
    return uses


if __name__ == "__main__":
    found = private_uses()
    for use in found:
        print(use)
    print(f"{len(found)} private name(s) used across modules")
    named = string_protocols()
    for use in named:
        print(use)
    print(f"{len(named)} private attribute(s) named by a string (some are allowed: tests/test_architecture.py)")
    sys.exit(1 if found else 0)
