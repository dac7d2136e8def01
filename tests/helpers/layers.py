"""The core's layers as docs/architecture.rst draws them, and the imports that cross them the wrong way.

    python tests/helpers/layers.py     # every run-time import that points up or sideways, and every
                                       # type-only (``if TYPE_CHECKING:``) one, in the core

The drawing is the first ``.. code-block:: text`` of the page: a line that starts (after the block's indent) with
one or more names, a package ``name/`` or a top-level module ``name.py`` (``__init__.py`` is the package
``accelkit`` itself), is one layer, the top one first; a line that starts with ``|`` or with spaces continues the
layer above it. A module may import, at run time (top-level and function-level imports alike), only from its own
package or from a layer below its own. Imports under ``if TYPE_CHECKING:`` never run; :func:`type_only_edges`
lists those that point up, for the test to compare with the ones it allows.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import import_cycles  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CORE_SRC = ROOT / "core" / "src"
DOC = ROOT / "docs" / "architecture.rst"

_NAME = re.compile(r"^(\w+/|\w+\.py)$")


def documented_layers(doc: Path = DOC) -> list[list[str]]:
    """The layers of the drawing, top first; each is the names on its line (``"loops/"``, ``"profilers.py"``)."""
    text = doc.read_text(encoding="utf-8")
    start = text.index(".. code-block:: text")
    layers: list[list[str]] = []
    for line in text[start:].splitlines()[2:]:
        if line and not line.startswith(" "):
            break  # the block ends at the first unindented line
        body = line[4:]
        if not body.strip() or body[0] in " |":
            continue
        names = []
        for word in body.split():
            if not _NAME.match(word):
                break
            names.append(word)
        if not names:
            raise ValueError(f"docs/architecture.rst: the drawing's line {line.strip()!r} names no package "
                             f"(name/) or module (name.py)")
        layers.append(names)
    return layers


def unit(module: str, packages: set[str]) -> str:
    """The drawing's name of the package or top-level module ``module`` belongs to (``accelkit.loops.fit`` is
    ``loops/``, ``accelkit.errors`` is ``errors.py``, ``accelkit`` is ``__init__.py``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    return f"{parts[1]}/" if parts[1] in packages else f"{parts[1]}.py"


@dataclass(frozen=True)
class Edge:
    """An import from the module ``source`` of ``target``, naming ``names``."""

    source: str
    target: str
    names: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({', '.join(self.names)})"


def _core_modules(src: Path) -> tuple[dict[str, str], set[str]]:
    known = {name: path for name, path in import_cycles.modules(str(src)).items() if name.split(".")[0] == "accelkit"}
    packages = {path.name for path in (src / "accelkit").iterdir() if (path / "__init__.py").is_file()}
    return known, packages


def _type_checking_imports(name: str, path: str, known: dict[str, str]) -> dict[str, set[str]]:
    """The modules of ``known`` that ``name`` imports only under ``if TYPE_CHECKING:``."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), path)
    guarded = [node for node in ast.walk(tree) if isinstance(node, ast.If) and import_cycles.is_type_checking(node)]
    found: dict[str, set[str]] = {}
    for block in guarded:
        for node in block.body:
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    target = full if full in known else node.module
                    while target and target not in known:
                        target = target.rpartition(".")[0]
                    if target and target != name:
                        found.setdefault(target, set()).add(alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in known and alias.name != name:
                        found.setdefault(alias.name, set()).add(alias.name)
    return found


def _rank(layers: list[list[str]]) -> dict[str, int]:
    return {name: depth for depth, names in enumerate(layers) for name in names}


def undrawn(src: Path = CORE_SRC, doc: Path = DOC) -> list[str]:
    """The core's packages and top-level modules the drawing does not place."""
    known, packages = _core_modules(src)
    rank = _rank(documented_layers(doc))
    return sorted({unit(name, packages) for name in known} - set(rank))


def _crossing(edges: dict[str, dict[str, set[str]]], packages: set[str], rank: dict[str, int]) -> list[Edge]:
    out = []
    for source, targets in sorted(edges.items()):
        here = unit(source, packages)
        for target, names in sorted(targets.items()):
            there = unit(target, packages)
            if here != there and here in rank and there in rank and rank[there] <= rank[here]:
                out.append(Edge(source, target, tuple(sorted(names))))
    return out


def upward_imports(src: Path = CORE_SRC, doc: Path = DOC) -> list[Edge]:
    """Every run-time import (top-level or inside a function) of a module from its own layer or a layer above."""
    known, packages = _core_modules(src)
    edges = {name: import_cycles.imports(name, path, known) for name, path in known.items()}
    return _crossing(edges, packages, _rank(documented_layers(doc)))


def type_only_edges(src: Path = CORE_SRC, doc: Path = DOC) -> set[tuple[str, str]]:
    """``(importer, imported)`` drawing names of every ``if TYPE_CHECKING:`` import that points to the importer's
    layer or above (an annotation naming a class from above, which no run imports)."""
    known, packages = _core_modules(src)
    edges = {name: _type_checking_imports(name, path, known) for name, path in known.items()}
    found = _crossing(edges, packages, _rank(documented_layers(doc)))
    return {(unit(edge.source, packages), unit(edge.target, packages)) for edge in found}


if __name__ == "__main__":
    missing = undrawn()
    for name in missing:
        print(f"not drawn: {name}")
    wrong = upward_imports()
    for edge in wrong:
        print(f"points up: {edge}")
    for source, target in sorted(type_only_edges()):
        print(f"type-only: {source} -> {target}")
    print(f"{len(missing)} undrawn, {len(wrong)} run-time import(s) pointing up")
    sys.exit(1 if missing or wrong else 0)
