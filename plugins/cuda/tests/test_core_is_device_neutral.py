"""The core must not know about CUDA: only its catalog of install hints may name the cuda distribution."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import accelkit

CORE = Path(accelkit.__file__).resolve().parent
WORDS = re.compile(r"cuda|nccl|gpu", re.IGNORECASE)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(
                    body[0].value.value, str):
                found.add(id(body[0].value))
    return found


def device_mentions(source: str, filename: str) -> list[str]:
    """Identifiers, attribute names, imports and string literals (docstrings excepted) naming CUDA/NCCL/GPU.

    Comments and docstrings are prose and are not checked; everything the interpreter acts on is.
    """
    tree = ast.parse(source, filename)
    docstrings = _docstring_nodes(tree)
    hits = []
    for node in ast.walk(tree):
        texts: list[str] = []
        if isinstance(node, ast.Name):
            texts = [node.id]
        elif isinstance(node, ast.Attribute):
            texts = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            texts = [node.name]
        elif isinstance(node, ast.arg):
            texts = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            texts = [node.arg]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            texts = [a.name for a in node.names] + ([node.module] if getattr(node, "module", None) else [])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            texts = [node.value]
        hits += [f"{filename}:{node.lineno}: {t!r}" for t in texts if WORDS.search(t)]
    return hits


def test_core_code_names_no_cuda():
    files = sorted(CORE.glob("*.py"))
    assert len(files) > 5, f"expected the core's modules under {CORE}"
    hits = [h for f in files for h in device_mentions(f.read_text(), f.name)]
    assert hits == [], "the core mentions a device:\n" + "\n".join(hits)


def test_only_the_catalog_names_cuda_among_other_core_files():
    others = [f for f in CORE.rglob("*")
              if f.is_file() and f.suffix not in (".py", ".pyc") and f.name != "catalog.toml"]
    hits = [str(f.relative_to(CORE)) for f in others if WORDS.search(f.read_text(errors="replace"))]
    assert hits == []
    assert "accelkit-cuda" in (CORE / "catalog.toml").read_text()


def test_the_check_catches_code_and_ignores_prose():
    code = (
        '"""Module docstring about CUDA."""\n'
        "import torch\n"
        "def f(x):\n"
        '    """Runs on a GPU."""\n'
        "    # a comment about nccl\n"
        "    return x.cuda() if torch.cuda.is_available() else dist_backend('nccl')\n"
    )
    hits = device_mentions(code, "example.py")
    assert {h.split(": ", 1)[1] for h in hits} == {"'cuda'", "'nccl'"}
    assert len(hits) == 3  # x.cuda, torch.cuda, 'nccl'
