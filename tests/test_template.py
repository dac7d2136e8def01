"""The plugin template (templates/plugin) as a third-party author gets it: installed as a real distribution,
found through its entry point (not ``PluginManager.register``), selected by name, alias and ``"auto"``,
reusing a core strategy, and listed by ``accelkit plugins`` / ``accelkit doctor``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.prewarmed import Prewarmed  # noqa: E402
from helpers.requirements import requires_build_tools  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "templates" / "plugin"

pytestmark = [pytest.mark.slow, requires_build_tools(TEMPLATE / "pyproject.toml")]


def _other_plugins() -> list[str]:
    """Entry-point names of installed plugins other than cpu: blocked so that the template is tested alone."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group="accelkit")} - {"cpu", "mydevice"})


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """Install a copy of the template with pip into a --target folder; return the environment that sees it."""
    work = tmp_path_factory.mktemp("template")
    source = work / "src"
    shutil.copytree(TEMPLATE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, text=True)
    assert (target / "accelkit_mydevice-0.1.0.dist-info").is_dir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(target), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["ACCELKIT_BLOCK_PLUGINS"] = ",".join(_other_plugins())
    env.pop("ACCELKIT_DISABLE_PLUGIN_AUTOLOAD", None)
    env.pop("ACCELKIT_MYDEVICE_AVAILABLE", None)
    env["source"] = str(source)
    return env


def run(prewarmed: Prewarmed, env: dict[str, str], *args: str, cwd: Path | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    """``python *args`` with ``env``, forked from the prewarmed interpreter: what these programs check is the
    installed template's discovery and use, not interpreter start-up, and each saves the torch import."""
    result = prewarmed.run(args, cwd=cwd or os.getcwd(), env=env, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def test_the_templates_own_tests_pass_when_installed(installed, prewarmed):
    """The template's tests: fit by name and alias, 'auto' by priority/availability, its own strategy and
    precision, and the core's ddp_spawn reused for its accelerator (worker processes discover it too)."""
    result = run(prewarmed, installed, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests",
                 cwd=Path(installed["source"]))
    assert " passed" in result.stdout and "failed" not in result.stdout and "skipped" not in result.stdout, \
        result.stdout


def test_entry_point_discovery_and_cli_listing(installed, prewarmed):
    code = (
        "from accelkit.plugins.manager import PluginManager\n"
        "pm = PluginManager()\n"
        "info = pm.infos['mydevice']\n"
        "print(info.status, info.distribution, info.version, info.plugin.__name__)\n"
        "print(sorted(pm.registry.accelerator_names()))\n"
    )
    lines = run(prewarmed, installed, "-c", code).stdout.splitlines()
    assert lines[0] == "loaded accelkit-mydevice 0.1.0 accelkit_mydevice.plugin"
    assert lines[1] == "['cpu', 'mydevice']"

    listing = json.loads(run(prewarmed, installed, "-m", "accelkit.cli", "plugins", "--json").stdout)
    mine = next(p for p in listing["plugins"] if p["name"] == "mydevice")
    assert mine["distribution"] == "accelkit-mydevice" and mine["status"] == "loaded"
    assert mine["provides"]["accelerators"] == [{"name": "mydevice", "aliases": ["mydev"], "priority": 10,
                                                 "description": "template device, backed by the CPU"}]
    assert {s["name"] for s in mine["provides"]["strategies"]} == {"single_device", "ddp_spawn", "mydevice_counting"}
    assert {p["name"] for p in mine["provides"]["precisions"]} == {"32-true", "bf16-rounded"}
    assert mine["hooks"] == ["accelkit_register_accelerators", "accelkit_register_precisions",
                             "accelkit_register_strategies"]


def test_doctor_reports_availability_and_the_auto_choice(installed, prewarmed):
    report = json.loads(run(prewarmed, installed, "-m", "accelkit.cli", "doctor", "--json").stdout)
    assert report["auto"] == "mydevice"
    assert report["packages"]["accelkit-mydevice"] == "0.1.0"
    assert [a["name"] for a in report["accelerators"]] == ["mydevice", "cpu"]  # by priority

    off = dict(installed, ACCELKIT_MYDEVICE_AVAILABLE="0")
    report = json.loads(run(prewarmed, off, "-m", "accelkit.cli", "doctor", "--json").stdout)
    assert report["auto"] == "cpu"
    mydevice = next(a for a in report["accelerators"] if a["name"] == "mydevice")
    assert mydevice["available"] is False and "ACCELKIT_MYDEVICE_AVAILABLE=0" in mydevice["reason"]
    shown = {v["name"]: v["value"] for v in report["environment"]}
    assert shown["ACCELKIT_MYDEVICE_AVAILABLE"] == "0"  # through the ACCELKIT_* prefix


def test_accelkit_fit_through_the_alias(installed, tmp_path, prewarmed):
    model = Path(installed["source"]) / "tests" / "test_plugin.py"
    result = run(prewarmed, installed, "-m", "accelkit.cli", "fit", f"{model}:Regression", "--accelerator",
                 "mydev", "--strategy", "counting", "--max-epochs", "3", "--no-progress-bar",
                 "--default-root-dir", str(tmp_path), cwd=tmp_path)
    assert "training Regression on mydevice devices=[0] strategy=mydevice_counting" in result.stdout, result.stdout
    assert "fit stopped: max_epochs=3 reached; 3 epoch(s), 12 step(s)" in result.stdout, result.stdout
    assert (tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "epoch=2-step=12.ckpt").is_file()


def test_a_plugin_declaring_an_unsupported_api_is_reported_incompatible(installed, tmp_path, prewarmed):
    """Change the copy's ACCELKIT_API to a future range: accelkit refuses it and says why."""
    site = Path(installed["PYTHONPATH"].split(os.pathsep)[0])
    patched = tmp_path / "site"
    shutil.copytree(site, patched)
    plugin = patched / "accelkit_mydevice" / "plugin.py"
    plugin.write_text(plugin.read_text().replace('ACCELKIT_API = ">=1.0,<2"', 'ACCELKIT_API = ">=2.0,<3"'))
    env = dict(installed, PYTHONPATH=os.pathsep.join([str(patched), *installed["PYTHONPATH"].split(os.pathsep)[1:]]))
    listing = json.loads(run(prewarmed, env, "-m", "accelkit.cli", "plugins", "--json").stdout)
    mine = next(p for p in listing["plugins"] if p["name"] == "mydevice")
    assert mine["status"] == "incompatible"
    assert ">=2.0,<3" in mine["reason"] and listing["hook_api"] in mine["reason"]
    result = run(prewarmed, env, "-c", "import accelkit; accelkit.Trainer(accelerator='mydevice')", check=False)
    assert result.returncode != 0 and "incompatible" in result.stderr


#: A Fabric loop on the template's device, strategy and precision, selected by alias: the plugin is used unchanged.
FABRIC_LOOP = """
import accelkit, torch
from accelkit import Fabric
from accelkit_mydevice.accelerator import MyDeviceAccelerator
from accelkit_mydevice.precision import RoundedPrecision
from accelkit_mydevice.strategy import CountingStrategy

print("accelkit from", accelkit.__file__)
fabric = Fabric(accelerator="mydev", strategy="counting", precision="bf16-rounded", devices=1)
fabric.launch()
assert isinstance(fabric.accelerator, MyDeviceAccelerator), fabric.accelerator
assert isinstance(fabric.strategy, CountingStrategy), fabric.strategy
assert isinstance(fabric.precision, RoundedPrecision), fabric.precision
fabric.seed_everything(0, verbose=False)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = fabric.setup(model, optimizer)
inputs = torch.randn(32, 8)
targets = inputs @ torch.randn(8, 1)
data = torch.utils.data.TensorDataset(inputs, targets)
loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(data, batch_size=8))
def full_loss():
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(fabric.to_device(inputs)), fabric.to_device(targets)).item()
first = full_loss()
for epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
last = full_loss()
rounded = all(torch.equal(p, p.to(torch.bfloat16).float()) for p in model.parameters())
print(f"steps={fabric.strategy.steps} device={fabric.device} rounded={rounded} improved={last < first}")
"""


def test_the_template_runs_a_fabric_loop_unchanged(installed, prewarmed, tmp_path):
    """The plugin written for the Trainer serves ``accelkit.Fabric`` as it is: its accelerator, its own strategy
    (which counts the steps the Fabric optimizer takes through it) and its own precision (weights rounded after
    each step), all found through the entry point and selected by alias. PYTHONPATH is kept so that the child
    imports this checkout's accelkit."""
    script = tmp_path / "loop.py"
    script.write_text(FABRIC_LOOP)
    result = run(prewarmed, installed, str(script), cwd=tmp_path)
    assert f"accelkit from {ROOT / 'core' / 'src' / 'accelkit' / '__init__.py'}" in result.stdout, result.stdout
    assert "steps=12 device=cpu rounded=True improved=True" in result.stdout, result.stdout
