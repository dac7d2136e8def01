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
