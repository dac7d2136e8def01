"""Running a command-line program in the test's own process: the ``accelkit`` command through its entry point, a
LightningCLI script as ``__main__``, from a project folder, with the output the test reads.

A test that starts the same program several times needs a fresh interpreter for the first run only (that run
proves the program starts as a program); the later stages it drives (``validate``, ``test``, ``predict``, a second
``fit``, ``--print_config``) read files and parse arguments, and running them here saves an interpreter start and a
torch import each.
"""

from __future__ import annotations

import os
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Done:
    """What a command run here left: its exit status and what it wrote to stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


def run_here(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *argv: str,
             script: str | None = None, forget: tuple[str, ...] = ("models",)) -> Done:
    """Run ``accelkit *argv`` (or, with ``script``, ``python <script> *argv``) in this process from ``project``,
    with ``project`` first on ``sys.path`` as for a program started there. The modules named in ``forget`` (the
    project's own, imported from its folder) are dropped before and after, so this run and later tests import
    theirs afresh, and the files the command imports as modules (``path/to/file.py:Class``) are its own."""
    from accelkit.cli.class_paths import FILE_MODULES

    capsys.readouterr()
    code = 0
    # as in a fresh interpreter: neither the project's modules nor files imported as modules by earlier runs (an
    # earlier test's ``models.py``) are known; the record of the latter is put back afterwards
    file_modules = dict(FILE_MODULES)
    FILE_MODULES.clear()
    for name in forget:
        sys.modules.pop(name, None)
    with monkeypatch.context() as patch:
        patch.chdir(project)
        patch.syspath_prepend(str(project))
        for name in [name for name in os.environ if name.startswith("ACCELKIT_")] + ["PYTHONPATH"]:
            patch.delenv(name, raising=False)  # as the tests' child processes are started
        try:
            if script is None:
                from accelkit.cli.main import main

                code = main(list(argv))
            else:
                patch.setattr(sys, "argv", [script, *argv])
                runpy.run_path(str(project / script), run_name="__main__")
        except SystemExit as exc:  # a program's exit (``--print_config``, a parse error), as the interpreter ends it
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code, file=sys.stderr)
        finally:
            for name in forget:
                sys.modules.pop(name, None)
            FILE_MODULES.clear()
            FILE_MODULES.update(file_modules)
    out, err = capsys.readouterr()
    return Done(code, out, err)
