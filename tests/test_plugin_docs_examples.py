"""docs/plugins.rst's examples work as written: each complete distribution on that page (the ``accelkit-mydevice``
accelerator, the ``accelkit-hello`` command, the ``accelkit-extras`` callback and profiler) is written from the
page's code blocks, built and installed with pip (no package index) into a folder of its own, and used as a third party
would: by name, by alias, through
``"auto"`` and through the ``accelkit`` command line."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.prewarmed import Prewarmed  # noqa: E402
from helpers.requirements import requires_build_tools  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "plugins.rst"
TEMPLATE = ROOT / "templates" / "plugin" / "pyproject.toml"
#: the examples' [build-system] is the template's (checked below), so the template's build tools are what they need
pytestmark = [pytest.mark.slow, requires_build_tools(TEMPLATE)]

#: a code block whose first line is ``# <distribution>/<path>``
_BLOCK = re.compile(r"^\.\. code-block:: \w+\n\n((?:    .*\n|\n)+)", re.MULTILINE)
_PATH = re.compile(r"^# ([\w.-]+/[\w./-]+)$")


def example_files(page: Path = PAGE) -> dict[str, dict[str, str]]:
    """``{distribution folder: {path inside it: text}}`` for every code block of ``page`` that names its file."""
    found: dict[str, dict[str, str]] = {}
    for match in _BLOCK.finditer(page.read_text()):
        lines = [line[4:] for line in match.group(1).rstrip("\n").split("\n")]
        named = _PATH.match(lines[0])
        if named:
            folder, _, path = named.group(1).partition("/")
            found.setdefault(folder, {})[path] = "\n".join(lines[1:]) + "\n"
    return found


def _other_plugins(keep: set[str]) -> str:
    """Installed plugins to block, so each example is tested beside the cpu plugin only."""
    return ",".join(sorted({ep.name for ep in importlib.metadata.entry_points(group="accelkit")} - keep))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """Both examples written from the page, pip-installed into one --target folder; the environment that sees it."""
    work = tmp_path_factory.mktemp("docs-examples")
    site = work / "site"
    examples = example_files()
    assert set(examples) == {"accelkit-mydevice", "accelkit-hello", "accelkit-extras"}, sorted(examples)
    for folder, files in examples.items():
        for path, text in files.items():
            target = work / folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        build = tomllib.loads(files["pyproject.toml"])["build-system"]
        assert build == tomllib.loads(TEMPLATE.read_text())["build-system"], folder
    # one pip for the three: each is still built from its folder and installed as its own distribution
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(site), *(str(work / f) for f in sorted(examples))],
                   check=True, capture_output=True, text=True)
    assert sorted(p.name for p in site.glob("*.dist-info")) == [
        "accelkit_extras-0.1.0.dist-info", "accelkit_hello-0.1.0.dist-info", "accelkit_mydevice-0.1.0.dist-info"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["ACCELKIT_BLOCK_PLUGINS"] = _other_plugins({"cpu", "mydevice", "hello", "extras"})
    return env


def run(prewarmed: Prewarmed, env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python *args`` with ``env``, forked from the prewarmed interpreter: what these programs check is the
    installed examples' discovery and use, not interpreter start-up, and each saves the torch import."""
    result = prewarmed.run(args, cwd=cwd or os.getcwd(), env=env, timeout=300)
    assert result.returncode == 0, f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


FIT = '''
import json, sys
import accelkit
sys.path.insert(0, {tests!r})
from helpers.models import RegressionModule

out = {{}}
for accelerator in ("mydevice", "mydev", "auto"):
    trainer = accelkit.Trainer(accelerator=accelerator, max_epochs=1, logger=False, enable_progress_bar=False,
                               enable_checkpointing=False, enable_model_summary=False, default_root_dir={root!r})
    trainer.fit(RegressionModule())
    out[accelerator] = [trainer.config.accelerator, trainer.config.strategy, trainer.config.precision,
                        trainer.global_step > 0]
print(json.dumps(out))
'''


def test_the_first_example_trains_by_name_alias_and_auto(installed, tmp_path, prewarmed):
    code = FIT.format(tests=str(ROOT / "tests"), root=str(tmp_path))
    out = json.loads(run(prewarmed, installed, "-c", code).stdout.strip().splitlines()[-1])
    for asked in ("mydevice", "mydev", "auto"):  # priority 10 wins "auto" over the cpu plugin's 0
        assert out[asked] == ["mydevice", "single_device", "32-true", True], asked


def test_the_command_example_runs_and_is_listed_with_its_distribution(installed, tmp_path, prewarmed):
    assert run(prewarmed, installed, "-m", "accelkit.cli", "hello", "world", "--shout").stdout == "HELLO, WORLD\n"
    listing = " ".join(run(prewarmed, installed, "-m", "accelkit.cli", "--help").stdout.split())
    assert "hello greet someone (an example command) [accelkit-hello 0.1.0]" in listing
    assert "who to greet" in run(prewarmed, installed, "-m", "accelkit.cli", "hello", "--help").stdout
    report = json.loads(run(prewarmed, installed, "-m", "accelkit.cli", "plugins", "--json").stdout)
    hello = next(p for p in report["plugins"] if p["name"] == "hello")
    assert hello["status"] == "loaded" and hello["distribution"] == "accelkit-hello"
    assert [c["name"] for c in hello["provides"]["commands"]] == ["hello"]
    script = Path(sys.executable).with_name("accelkit")
    if script.exists():  # the console script too, where accelkit is pip-installed
        done = subprocess.run([str(script), "hello", "there"], env=installed, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and done.stdout == "hello, there\n", done.stderr


BY_NAME = '''
import json, sys
import torch
import accelkit
sys.path.insert(0, {tests!r})
from helpers.models import RegressionModule

model = RegressionModule()
trainer = accelkit.Trainer(accelerator="cpu", callbacks=["ema"], profiler="marks", max_steps=4, logger=False,
                           enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                           default_root_dir={root!r})
trainer.fit(model)
[ema] = [c for c in trainer.callbacks if type(c).__name__ == "EMA"]
out = {{"profiler": type(trainer.profiler).__name__, "counts": sum(trainer.profiler.counts.values()),
       "averaged": all(torch.equal(p, a) for p, a in zip(model.parameters(), ema.average))}}
try:
    accelkit.Trainer(accelerator="cpu", callbacks=["emma"], logger=False, default_root_dir={root!r})
except accelkit.ConfigurationError as exc:
    out["typo"] = str(exc)
print(json.dumps(out))
'''


def test_the_callback_and_profiler_example_is_used_by_name(installed, tmp_path, prewarmed):
    code = BY_NAME.format(tests=str(ROOT / "tests"), root=str(tmp_path))
    out = json.loads(run(prewarmed, installed, "-c", code).stdout.strip().splitlines()[-1])
    assert out["profiler"] == "Marks" and out["counts"] > 0 and out["averaged"] is True
    assert out["typo"].startswith(  # then the plugins blocked here: 'Not loaded, so not searched: ...'
        "callback 'emma' is not a registered callback. Did you mean 'ema'? Registered callbacks: ema; or pass an "
        "instance in callbacks=[...]. Not loaded, so not searched: plugin ")
    report = json.loads(run(prewarmed, installed, "-m", "accelkit.cli", "plugins", "--json").stdout)
    extras = next(p for p in report["plugins"] if p["name"] == "extras")
    assert extras["distribution"] == "accelkit-extras"
    assert [c["name"] for c in extras["provides"]["callbacks"]] == ["ema"]
    assert [c["name"] for c in extras["provides"]["profilers"]] == ["marks"]
    text = run(prewarmed, installed, "-m", "accelkit.cli", "plugins").stdout
    assert "  callbacks: ema\n  profilers: marks\n" in text
