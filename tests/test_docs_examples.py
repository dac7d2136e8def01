"""The user-facing pages run as written: every Python code block of the README, ``docs/quickstart.rst``,
``docs/tuner.rst``, ``docs/progress-bar.rst`` and ``docs/fabric.rst`` is executed, and their shell commands are the
ones CI and the example tests run.

A page's Python blocks are one program, read top to bottom as a reader pastes them: they run in order as one
program (in a temporary folder, so run files land there), forked from an interpreter that has imported torch
(``helpers.prewarmed``; one with a block that needs hardware, in a fresh interpreter with that hardware's
environment). A block that needs hardware says so in a comment the reader does not see, directly above it
(``.. needs: xla`` in reStructuredText, ``<!-- needs: xla -->`` in Markdown); it runs where that hardware (or, for
``xla``, torch_xla's PJRT runtime on the host CPU) is there and is a skipped test of its own elsewhere.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.guards import REPO, child_env  # noqa: E402
from helpers.prewarmed import Prewarmed  # noqa: E402

pytestmark = pytest.mark.slow

PAGES = ["README.md", "docs/quickstart.rst", "docs/tuner.rst", "docs/progress-bar.rst", "docs/fabric.rst"]

_RST_BLOCK = re.compile(r"(?:^\.\. needs: (?P<needs>[\w, ]+)\n\n)?"
                        r"^\.\. code-block:: python\n\n(?P<body>(?:    .*\n|\n)+)", re.MULTILINE)
_MD_BLOCK = re.compile(r"(?:^<!-- needs: (?P<needs>[\w, ]+) -->\n)?^```python\n(?P<body>.*?)^```",
                       re.MULTILINE | re.DOTALL)
_RST_SHELL = re.compile(r"::\n\n((?:    .*\n|\n)+)")
_MD_SHELL = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)

#: what each ``needs`` word asks of the machine, the environment it runs with there, and the reason to skip
HARDWARE = {
    "gpu": (importlib.util.find_spec("torch") is not None and __import__("torch").cuda.is_available(), {},
            "needs an NVIDIA GPU"),
    "xla": (importlib.util.find_spec("torch_xla") is not None, {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "8"},
            "needs torch_xla (run on its PJRT runtime on the host CPU)"),
}


def python_blocks(page: str) -> list[tuple[frozenset[str], str]]:
    """``(needs, code)`` for every Python block of ``page``, in order."""
    text = (REPO / page).read_text()
    found = []
    for match in (_MD_BLOCK if page.endswith(".md") else _RST_BLOCK).finditer(text):
        body = match.group("body")
        if not page.endswith(".md"):
            body = "\n".join(line[4:] for line in body.split("\n"))
        needs = frozenset(w.strip() for w in (match.group("needs") or "").split(",") if w.strip())
        unknown = needs - set(HARDWARE)
        assert not unknown, f"{page}: a block needs {sorted(unknown)}; known: {sorted(HARDWARE)}"
        found.append((needs, body.rstrip() + "\n"))
    return found


def shell_lines(page: str) -> list[str]:
    """The command lines of ``page``'s shell blocks (``::`` literal blocks of a .rst page, ``bash`` blocks of a .md)."""
    text = (REPO / page).read_text()
    if page.endswith(".md"):
        bodies = _MD_SHELL.findall(text)
    else:
        bodies = ["\n".join(line[4:] for line in body.split("\n")) for body in _RST_SHELL.findall(text)]
    return [line.strip() for body in bodies for line in body.splitlines() if line.strip()]


def _run_program(code: str, tmp_path: Path, env_extra: dict[str, str], prewarmed: Prewarmed) -> None:
    script = tmp_path / "page.py"
    script.write_text(code)  # the page's program, as a reader would save it
    env = {**child_env(), **env_extra}
    # forked from the prewarmed interpreter, an XLA block's program too: torch_xla is first imported by the program
    # itself, as in a fresh interpreter (helpers.xla)
    proc = prewarmed.run([str(script)], cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, f"{script}:\n{script.read_text()}\n--- stdout\n{proc.stdout[-3000:]}\n" \
                                 f"--- stderr\n{proc.stderr[-6000:]}"


def _cases() -> list:
    cases = []
    for page in PAGES:
        blocks = python_blocks(page)
        cases.append(pytest.param(page, None, id=f"{page}"))
        for index, (needs, _) in enumerate(blocks):
            if needs:
                cases.append(pytest.param(page, index, id=f"{page}-block{index}-{'-'.join(sorted(needs))}"))
    return cases


@pytest.mark.parametrize(("page", "hardware_block"), _cases())
def test_page_runs_as_written(page: str, hardware_block: int | None, tmp_path: Path, prewarmed: Prewarmed) -> None:
    """The page's blocks that need nothing special, in order; or those plus one block that needs hardware."""
    blocks = python_blocks(page)
    assert blocks, f"{page} has no Python block"
    env: dict[str, str] = {}
    if hardware_block is not None:
        for word in sorted(blocks[hardware_block][0]):
            present, word_env, reason = HARDWARE[word]
            if not present:
                pytest.skip(f"{page}, block {hardware_block}: {reason}")
            env.update(word_env)
    plain = [code for needs, code in blocks if not needs]
    if hardware_block is None:
        _run_program("\n".join(plain), tmp_path, env, prewarmed)
        return
    # The blocks above it, imported (what a guarded ``fit`` does under another name: nothing), then the block.
    before = [code for index, (needs, code) in enumerate(blocks) if not needs and index < hardware_block]
    (tmp_path / "page_before.py").write_text("\n".join(before))
    _run_program("from page_before import *  # noqa: F403\n" + blocks[hardware_block][1], tmp_path, env, prewarmed)


def test_every_page_block_is_picked_up() -> None:
    """The extraction sees every block the page shows (a block the pattern missed would go untested)."""
    for page in PAGES:
        text = (REPO / page).read_text()
        shown = text.count("```python") if page.endswith(".md") else text.count(".. code-block:: python")
        assert len(python_blocks(page)) == shown, page


def test_readme_commands_are_what_ci_and_the_example_test_run() -> None:
    """The README's two commands: the test command is ``.ci/run``'s, the example command is the one
    tests/test_example.py runs (the set-up part, a venv and pip, is what CI itself does on a clean clone)."""
    commands = shell_lines("README.md")
    setup = "python3.11 -m venv .venv && .venv/bin/pip install -q -r requirements-dev.txt && "
    assert commands[0] == setup + ".venv/bin/accelkit fit examples/digits.py:DigitsClassifier", commands
    assert commands[1] == setup + ".venv/bin/python -m pytest", commands
    assert commands[1] in (REPO / ".ci" / "run").read_text()


def test_quickstart_commands_are_the_ones_the_example_tests_run() -> None:
    """The quickstart's shell lines: its install line names this repository's distributions, and each ``accelkit``
    command line is one that tests/test_example.py runs to its end (the digits example on one process and on two
    with ddp_spawn; running them again here would double a minute of the suite)."""
    lines = shell_lines("docs/quickstart.rst")
    installs = [line for line in lines if line.startswith("pip install")]
    assert installs, lines
    for line in installs:
        for name in line.split()[2:]:
            folder = "core" if name == "accelkit" else f"plugins/{name.removeprefix('accelkit-').replace('-', '_')}"
            assert (REPO / folder / "pyproject.toml").is_file(), f"{line!r}: no distribution {name} here"
    example_test = (REPO / "tests" / "test_example.py").read_text()
    commands = [line for line in lines if line.startswith("accelkit ")]
    assert commands == ["accelkit fit examples/digits.py:DigitsClassifier",
                        "accelkit fit examples/digits.py:DigitsClassifier --accelerator cpu --devices 2 "
                        "--strategy ddp_spawn"], commands
    assert 'run_fit(prewarmed, tmp_path, timeout=' in example_test
    assert ('run_fit(prewarmed, tmp_path, "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp_spawn"'
            in example_test)
