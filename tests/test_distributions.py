"""Every distribution of the repository (core/ and plugins/*/) builds a wheel and an sdist with correct
metadata, and accelkit + accelkit-cpu installed alone into a clean location work by themselves."""

from __future__ import annotations

import ast
import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.requirements import requires_build_tools  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIST_DIRS = [ROOT / "core"] + sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))
# Distributions whose accelerator needs torch_xla: directly, or through the accelkit-xla-spawn plugin.
XLA_RUNTIME = "torch-xla"
XLA_BASE = "accelkit-xla-spawn"

pytestmark = [pytest.mark.slow, requires_build_tools(*(d / "pyproject.toml" for d in DIST_DIRS), frontend=True)]


def project(directory: Path) -> dict:
    return tomllib.loads((directory / "pyproject.toml").read_text())


def about_version(directory: Path) -> str:
    """The version written in the distribution's __about__.py (the one place it is kept)."""
    attr = project(directory)["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    path = directory / "src" / Path(*module.split(".")).with_suffix(".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path} does not assign {name}")


def dist_id(directory: Path) -> str:
    return directory.name if directory.parent.name == "plugins" else "core"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """Build every distribution (sdist, then the wheel from the sdist), in parallel, from a clean copy."""
    work = tmp_path_factory.mktemp("dists")
    jobs = {}
    for directory in DIST_DIRS:
        copy = work / "src" / dist_id(directory)
        shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__",
                                                                        ".pytest_cache"))
        out = work / "out" / dist_id(directory)
        jobs[dist_id(directory)] = (out, subprocess.Popen(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(copy)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    result = {}
    for name, (out, proc) in jobs.items():
        log, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"building {name} failed:\n{log}"
        wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
        assert len(wheels) == 1 and len(sdists) == 1, f"{name}: {os.listdir(out)}"
        result[name] = {"wheel": wheels[0], "sdist": sdists[0]}
    return result


def wheel_files(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as archive:
        return {n: archive.read(n).decode() for n in archive.namelist() if ".dist-info/" in n} | {
            n: "" for n in archive.namelist() if ".dist-info/" not in n}


def wheel_metadata(wheel: Path):
    files = wheel_files(wheel)
    [meta] = [n for n in files if n.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(files[meta]), files


@pytest.mark.parametrize("directory", DIST_DIRS, ids=dist_id)
def test_wheel_and_sdist_metadata(built, directory):
    spec = project(directory)["project"]
    artifacts = built[dist_id(directory)]
    version = about_version(directory)
    assert "version" in spec.get("dynamic", []) and "version" not in spec, "the version must come from __about__.py"
    meta, files = wheel_metadata(artifacts["wheel"])
    assert meta["Name"] == spec["name"]
    assert meta["Version"] == version
    assert artifacts["wheel"].name.startswith(f"{spec['name'].replace('-', '_')}-{version}-py3-none-any")
    assert meta["Summary"] and meta["Summary"] == spec["description"]
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == spec["requires-python"]
    assert meta.get_payload().strip(), "the README should be the long description"
    package = spec["name"].replace("-", "_")
    assert f"{package}/__init__.py" in files and f"{package}/__about__.py" in files

    with tarfile.open(artifacts["sdist"]) as archive:
        names = archive.getnames()
        base = f"{package}-{version}"
        assert artifacts["sdist"].name == f"{base}.tar.gz"
        for needed in ("PKG-INFO", "pyproject.toml", "README.md", f"src/{package}/__about__.py"):
            assert f"{base}/{needed}" in names, f"sdist lacks {needed}"
        pkg_info = email.parser.Parser().parsestr(archive.extractfile(f"{base}/PKG-INFO").read().decode())
    assert pkg_info["Name"] == spec["name"] and pkg_info["Version"] == version


@pytest.mark.parametrize("directory", DIST_DIRS, ids=dist_id)
def test_dependencies_and_entry_points(built, directory):
    spec = project(directory)["project"]
    meta, files = wheel_metadata(built[dist_id(directory)]["wheel"])
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    by_name = {canonicalize_name(r.name): r for r in requires}
    [entry_points] = [text for n, text in files.items() if n.endswith(".dist-info/entry_points.txt")]
    assert "torch" in by_name, "every distribution depends on torch"
    if dist_id(directory) == "core":
        assert {"pluggy", "packaging"} <= set(by_name)
        assert re.search(r"^\[console_scripts\]\s*\naccelkit = accelkit\.cli:main$", entry_points, re.M)
        assert "catalog.toml" in str(list(files)) and "accelkit/py.typed" in files
        assert "accelkit/lightning_modules.toml" in files  # the rows the import errors of Lightning paths quote
        return
    # A plugin depends on a range of accelkit that admits this repository's accelkit and excludes the next
    # minor series, where the hook contract may change.
    core_version = Version(about_version(ROOT / "core"))
    accelkit_req = by_name.get("accelkit")
    assert accelkit_req is not None and accelkit_req.specifier, f"{spec['name']} must depend on a range of accelkit"
    assert core_version in accelkit_req.specifier
    assert Version(f"{core_version.major}.{core_version.minor + 1}") not in accelkit_req.specifier
    # It registers in the accelkit entry-point group, naming a module the wheel contains.
    section = re.search(r"^\[accelkit\]\n((?:.+\n?)+)", entry_points, re.M)
    assert section, f"{spec['name']} has no [accelkit] entry point"
    for line in section.group(1).strip().splitlines():
        name, _, target = (part.strip() for part in line.partition("="))
        module = target.split(":")[0]
        assert f"{module.replace('.', '/')}.py" in files, f"entry point {name} -> {target} not in the wheel"
    if "xla" in dist_id(directory):
        names = set(by_name)
        assert canonicalize_name(XLA_RUNTIME) in names or XLA_BASE in names, (
            f"{spec['name']} must depend on torch_xla (directly or through {XLA_BASE}): {sorted(names)}")


# --------------------------------------------------------------------------- core + cpu alone
#: Third-party packages accelkit + accelkit-cpu need at run time (torch and what torch imports).
RUNTIME = ["torch", "functorch", "torchgen", "numpy", "numpy.libs", "sympy", "mpmath", "networkx", "jinja2",
           "markupsafe", "filelock", "fsspec", "typing_extensions", "nvidia", "triton", "pluggy", "packaging",
           "tqdm"]


@pytest.fixture(scope="module")
def alone(built, tmp_path_factory) -> list[Path]:
    """sys.path entries holding accelkit and accelkit-cpu (installed from their wheels) and, as symlinks,
    exactly the third-party packages they need: no other accelkit plugin is reachable."""
    work = tmp_path_factory.mktemp("alone")
    target, links = work / "site", work / "deps"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(target), str(built["core"]["wheel"]), str(built["cpu"]["wheel"])],
                   check=True, capture_output=True, text=True)
    links.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for name in RUNTIME:
        for candidate in (site / name, site / f"{name}.py"):
            if candidate.exists():
                (links / candidate.name).symlink_to(candidate)
        for info in site.glob("*.dist-info"):
            if canonicalize_name(info.name.split("-")[0]) == canonicalize_name(name):
                (links / info.name).symlink_to(info)
    return [target, links]


def run_alone(paths: list[Path], code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``code`` with -S -E (no site-packages, no PYTHON* variables) and only ``paths`` added."""
    prelude = f"import sys; sys.path[:0] = {[str(p) for p in paths]!r}\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ACCELKIT_"))}
    return subprocess.run([sys.executable, "-S", "-E", "-c", prelude + code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_clean_location_holds_nothing_else(alone, tmp_path):
    result = run_alone(alone, (
        "import json, importlib.metadata as md, accelkit, accelkit_cpu\n"
        "print(json.dumps({'accelkit': accelkit.__file__, 'cpu': accelkit_cpu.__file__,\n"
        "  'accelkit_dists': sorted(d.metadata['Name'] for d in md.distributions()\n"
        "                           if d.metadata['Name'].startswith('accelkit')),\n"
        "  'eps': sorted(e.name for e in md.entry_points(group='accelkit'))}))\n"), tmp_path)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["accelkit"].startswith(str(alone[0])) and found["cpu"].startswith(str(alone[0]))
    assert found["accelkit_dists"] == ["accelkit", "accelkit-cpu"]
    assert found["eps"] == ["cpu"]


def test_accelkit_plugins_shows_exactly_cpu(alone, tmp_path):
    result = run_alone(alone, "from accelkit.cli import main; raise SystemExit(main(['plugins', '--json']))",
                       tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(p["name"], p["distribution"], p["status"]) for p in report["plugins"]] == [
        ("cpu", "accelkit-cpu", "loaded")]
    doctor = run_alone(alone, "from accelkit.cli import main; raise SystemExit(main(['doctor', '--json']))", tmp_path)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert [a["name"] for a in json.loads(doctor.stdout)["accelerators"]] == ["cpu"]


FIT = """
import json, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import accelkit

class Line(accelkit.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(1, 1)
        x = torch.linspace(0, 1, 64).unsqueeze(1)
        self.data = TensorDataset(x, 2 * x + 1)
    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)
    def train_dataloader(self):
        return DataLoader(self.data, batch_size=16)

accelkit.seed_everything(0)
model = Line()
trainer = accelkit.Trainer(max_epochs=40, enable_progress_bar=False, logger=False, enable_checkpointing=False)
trainer.fit(model)
out = {"accelerator": trainer.config.accelerator, "w": model.layer.weight.item(), "b": model.layer.bias.item()}
try:
    accelkit.Trainer(accelerator="tpu")
except accelkit.ConfigurationError as exc:
    out["tpu"] = str(exc)
print(json.dumps(out))
"""


def test_a_fit_runs_and_a_missing_plugin_names_its_distribution(alone, tmp_path):
    result = run_alone(alone, FIT, tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["accelerator"] == "cpu"
    assert out["w"] == pytest.approx(2.0, abs=0.1) and out["b"] == pytest.approx(1.0, abs=0.1)
    assert "accelerator 'tpu' is not available" in out["tpu"]
    assert "`pip install accelkit-xla-spawn`" in out["tpu"]
