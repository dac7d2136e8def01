"""The ``accelkit`` command: ``plugins`` and ``doctor`` (which must start no device runtime), and ``fit``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from accelkit import cli
from accelkit.cli.main import load_commands
from helpers.cli_runs import project_imports

ROOT = Path(__file__).resolve().parents[1]


def installed_entry_points() -> dict[str, str]:
    """Entry-point name -> distribution, for every plugin installed in this environment."""
    return {ep.name: ep.dist.metadata["Name"] for ep in importlib.metadata.entry_points(group="accelkit")}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    with project_imports(ROOT / "examples"):  # examples/digits.py imported afresh, sys.path and modules put back
        code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("ACCELKIT_", "SLURM_")) or name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            monkeypatch.delenv(name)
    return monkeypatch


# ------------------------------------------------------------------------------------------- plugins
def test_plugins_json_lists_every_installed_plugin(clean_env, capsys):
    code, out, _ = run_cli(capsys, "plugins", "--json")
    report = json.loads(out)
    assert code == 0
    listed = {p["name"]: p for p in report["plugins"]}
    assert {name: p["distribution"] for name, p in listed.items()} == installed_entry_points()
    cpu = listed["cpu"]
    assert cpu["status"] == "loaded" and cpu["version"] == importlib.metadata.version("accelkit-cpu")
    assert [a["name"] for a in cpu["provides"]["accelerators"]] == ["cpu"]
    assert {"single_device", "ddp_spawn", "ddp"} <= {s["name"] for s in cpu["provides"]["strategies"]}
    precisions = {p["name"]: p for p in cpu["provides"]["precisions"]}
    assert precisions["32-true"]["aliases"] == ["32"] and precisions["32-true"]["accelerators"] == ["cpu"]
    assert "accelkit_register_accelerators" in cpu["hooks"]
    assert report["conflicts"] == []


def test_plugins_text_shows_status_and_what_each_provides(clean_env, capsys):
    code, out, _ = run_cli(capsys, "plugins")
    assert code == 0
    for name, dist in installed_entry_points().items():
        assert f"{name}  [loaded]  {dist}" in out
    assert "accelerators: cpu [priority 0]" in out
    assert "precisions: 32-true (alias 32) [on cpu]" in out


def test_blocked_plugin_is_listed_as_blocked(clean_env, capsys):
    clean_env.setenv("ACCELKIT_BLOCK_PLUGINS", "cpu")
    report = json.loads(run_cli(capsys, "plugins", "--json")[1])
    cpu = next(p for p in report["plugins"] if p["name"] == "cpu")
    assert cpu["status"] == "blocked" and "ACCELKIT_BLOCK_PLUGINS" in cpu["reason"]
    assert cpu["provides"] == {"accelerators": [], "strategies": [], "precisions": [], "cluster_environments": [],
                               "loggers": [], "commands": [], "callbacks": [], "profilers": []}


@pytest.mark.slow  # starts a process
def test_a_broken_plugin_is_reported_with_its_error_and_a_fix(tmp_path, make_distribution, forked_python):
    make_distribution(tmp_path, "accelkit-broken", "0.3.0", {"broken": "broken_plugin"},
                      {"broken_plugin": "raise ImportError('needs libfoo.so')\n"})
    code = (
        "import contextlib, io, json\n"
        "from accelkit import cli\n"
        "out = {}\n"
        "for command in ('plugins', 'doctor'):\n"
        "    buffer = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buffer):\n"
        "        rc = cli.main([command, '--json'])\n"
        "    out[command] = [rc, json.loads(buffer.getvalue())]\n"
        "print(json.dumps(out))\n"
    )
    result = forked_python(code, path=[tmp_path])  # a process of its own: the distribution is found on its path
    rc, listing = result["plugins"]
    broken = next(p for p in listing["plugins"] if p["name"] == "broken")
    assert rc == 0
    assert broken["status"] == "failed" and broken["distribution"] == "accelkit-broken"
    assert broken["version"] == "0.3.0" and "ImportError: needs libfoo.so" in broken["reason"]
    rc, report = result["doctor"]
    assert rc == 1
    [problem] = [p for p in report["problems"] if "broken" in p]
    assert "needs libfoo.so" in problem and "ACCELKIT_BLOCK_PLUGINS=broken" in problem


# ------------------------------------------------------------------------------------------- doctor
def test_doctor_reports_versions_accelerators_and_the_auto_choice(clean_env, capsys):
    code, out, _ = run_cli(capsys, "doctor", "--json")
    report = json.loads(out)
    assert code == (1 if report["problems"] else 0)
    assert report["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert report["packages"]["torch"] == importlib.metadata.version("torch")
    for dist in installed_entry_points().values():
        assert report["packages"][dist] == importlib.metadata.version(dist)
    accelerators = {a["name"]: a for a in report["accelerators"]}
    assert accelerators["cpu"]["available"] and accelerators["cpu"]["device_count"] == (os.cpu_count() or 1)
    for acc in report["accelerators"]:
        assert acc["available"] or acc["reason"], acc  # every unavailable accelerator says why
    priorities = [a["priority"] for a in report["accelerators"]]
    assert priorities == sorted(priorities, reverse=True)
    first_available = next(a["name"] for a in report["accelerators"] if a["available"])
    assert report["auto"] == first_available


def test_doctor_shows_the_versions_of_plugin_requirements_from_metadata(clean_env, capsys):
    """Packages a plugin requires (its device runtime, say) appear with their installed version."""
    report = json.loads(run_cli(capsys, "doctor", "--json")[1])
    required = set()
    for dist in installed_entry_points().values():
        for text in importlib.metadata.distribution(dist).requires or []:
            name = text.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip()
            try:
                required.add((name, importlib.metadata.version(name)))
            except importlib.metadata.PackageNotFoundError:
                pass
    assert required, "no plugin requirement is installed"
    for name, version in required:
        assert report["packages"][name] == version


def test_doctor_shows_environment_declared_by_the_core_and_plugins(clean_env, capsys):
    clean_env.setenv("SLURM_JOB_ID", "4242")
    clean_env.setenv("MASTER_ADDR", "10.0.0.7")
    report = json.loads(run_cli(capsys, "doctor", "--json")[1])
    shown = {v["name"]: v["value"] for v in report["environment"]}
    assert shown["SLURM_JOB_ID"] == "4242" and "SLURM_*" not in shown  # the prefix expands to what is set
    assert shown["MASTER_ADDR"] == "10.0.0.7"
    assert shown["RANK"] is None and "ACCELKIT_*" in shown
    from accelkit.plugins.manager import PluginManager

    declared = set()
    for names in PluginManager().hook.accelkit_environment_variables():
        declared |= {n for n in names if not n.endswith("*")}
    assert declared and declared <= set(shown)  # everything any plugin declares is shown


def test_doctor_flags_a_half_configured_launcher_with_the_fix(clean_env, capsys):
    clean_env.setenv("RANK", "0")
    code, out, _ = run_cli(capsys, "doctor")
    assert code == 1
    assert "RANK set without LOCAL_RANK, WORLD_SIZE" in out and "torchrun" in out


def test_doctor_collects_problems_from_plugin_diagnose_hooks(clean_env, capsys):
    """Any plugin's accelkit_diagnose problem reaches the report; checked with a plugin object of our own."""
    from accelkit import hookimpl
    from accelkit.plugins.manager import PluginManager

    class Probe:
        ACCELKIT_API = ">=1.0,<2"

        @hookimpl
        def accelkit_environment_variables(self):
            return {"PROBE_SETTING": "a variable the probe plugin reads"}

        @hookimpl
        def accelkit_diagnose(self, environ):
            return [f"PROBE_SETTING={environ['PROBE_SETTING']!r} is not a number; set it to e.g. 3"] if not \
                environ.get("PROBE_SETTING", "0").isdigit() else []

    clean_env.setenv("PROBE_SETTING", "many")
    manager = PluginManager()
    manager.add_plugin(Probe(), name="probe")
    report = cli.doctor_report(manager)
    assert "PROBE_SETTING='many' is not a number; set it to e.g. 3" in report["problems"]
    assert {"name": "PROBE_SETTING", "value": "many", "description": "a variable the probe plugin reads"} in \
        report["environment"]
    clean_env.setenv("PROBE_SETTING", "3")
    assert not any("PROBE" in p for p in cli.doctor_report(manager)["problems"])


DOCTOR_PROBE = """
import json, sys
from accelkit import cli
codes = [cli.main(["plugins", "--json"]), cli.main(["doctor", "--json"]), cli.main(["doctor"])]
import torch
print(json.dumps({"codes": codes, "device_runtime_modules": sorted(m for m in sys.modules
                  if m.split(".")[0] in ("torch_xla", "libtpu", "jax")),
                  "gpu_initialized": torch.cuda.is_initialized()}))
"""


@pytest.mark.slow
def test_plugins_and_doctor_start_no_device_runtime(run_python):
    """In a fresh interpreter with every installed plugin: no torch_xla import, no CUDA initialisation."""
    result = run_python(DOCTOR_PROBE)
    assert result["device_runtime_modules"] == []
    assert result["gpu_initialized"] is False
    assert result["codes"][0] == 0 and result["codes"][1] == result["codes"][2]


# ------------------------------------------------------------------------------------------- fit & parser
def test_fit_trains_the_example_and_reports_held_out_accuracy(clean_env, capsys, tmp_path):
    code, out, _ = run_cli(capsys, "fit", str(ROOT / "examples" / "digits.py") + ":DigitsClassifier",
                           "--accelerator", "cpu", "--max-epochs", "3", "--no-progress-bar",
                           "--default-root-dir", str(tmp_path), "--init", "hidden=64")
    assert code == 0
    assert "training DigitsClassifier on cpu devices=[0] strategy=single_device precision=32-true" in out
    # without a bar the command prints the fit's summary itself, with its time as Trainer.fit's has
    assert re.search(r"^accelkit: fit stopped: max_epochs=3 reached; 3 epoch\(s\), \d+ step\(s\) in \d+\.\d s",
                     out, re.MULTILINE), out
    accuracy = float(out.split("held-out test_acc = ")[1].split()[0])
    assert accuracy > 0.85, out


def test_fit_names_an_unknown_accelerator_and_what_exists(clean_env, capsys, tmp_path):
    code, _, err = run_cli(capsys, "fit", str(ROOT / "examples" / "digits.py") + ":DigitsClassifier",
                           "--accelerator", "cpuu", "--default-root-dir", str(tmp_path))
    assert code == 1
    assert "accelerator 'cpuu' is not available. Did you mean 'cpu'?" in err


@pytest.mark.parametrize("target, message", [
    ("examples/digits.py", "is not of the form path/to/file.py:ClassName"),
    ("no/such/file.py:Model", "no such file: no/such/file.py"),
    ("examples/digits.py:Digits", "has no 'Digits'; accelkit.Module classes found there: DigitsClassifier"),
])
def test_fit_rejects_bad_targets_clearly(clean_env, monkeypatch, target, message):
    monkeypatch.chdir(ROOT)
    with project_imports(ROOT / "examples"), pytest.raises(SystemExit, match=re.escape(message)):
        cli.main(["fit", target])


def test_help_lists_every_command_and_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    out = capsys.readouterr().out
    for name in ("fit", "plugins", "doctor"):
        assert name in out
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"accelkit {importlib.metadata.version('accelkit')}"


@pytest.mark.slow  # starts a process
def test_the_console_script_is_installed_and_runs(tmp_path):
    script = Path(sys.executable).with_name("accelkit")
    if not script.exists():
        pytest.skip(f"no console script beside {sys.executable} (accelkit not pip-installed here)")
    result = subprocess.run([str(script), "plugins"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "cpu  [loaded]  accelkit-cpu" in result.stdout


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits.py"


@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("target, expected", [
    ("nosuchpkg.mod:Model", "cannot import 'nosuchpkg.mod'"),
    (f"{EXAMPLE}:digits_datasets", "is a function, not an accelkit.Module subclass"),
    (f"{EXAMPLE}:Nope", "has no 'Nope'; accelkit.Module classes found there: DigitsClassifier"),
    ("not-a-target", "--model 'not-a-target' names no class importable from here; give path/to/file.py:Class"),
])
def test_fit_names_a_bad_target_without_a_traceback(target, expected, prewarmed, tmp_path):
    done = prewarmed.run(["-m", "accelkit.cli", "fit", target], cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert done.returncode != 0
    assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("extra, expected", [
    (["--init", "hiden=3"], "unknown key 'model.hiden'. Did you mean 'model.hidden'?"),
    (["--init", "hidden"], "--init 'hidden' is not KEY=VALUE"),
    (["--ckpt-path", "nothere.ckpt"], "--ckpt_path 'nothere.ckpt' does not exist"),
])
def test_fit_names_bad_options_without_a_traceback(tmp_path, extra, expected, prewarmed):
    done = prewarmed.run(["-m", "accelkit.cli", "fit", f"{EXAMPLE}:DigitsClassifier", *extra], cwd=tmp_path,
                         env=dict(os.environ), timeout=120)
    assert done.returncode != 0 and expected in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow  # starts a process
def test_a_module_in_the_current_folder_imports_by_name(tmp_path):
    (tmp_path / "mymodels.py").write_text("import accelkit\n\nclass Tiny(accelkit.Module):\n    pass\n")
    done = subprocess.run([sys.executable, "-c", "import sys; from accelkit.cli import load_module_class; "
                           "print(load_module_class('mymodels:Tiny').__name__)"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert done.stdout.strip() == "Tiny", done.stderr


@pytest.mark.slow  # starts a process
def test_plugins_piped_into_a_closed_reader_is_not_an_error():
    done = subprocess.run(f"'{sys.executable}' -m accelkit.cli plugins | head -1", shell=True, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.startswith("accelkit ") and "BrokenPipeError" not in done.stderr, done.stderr


# ------------------------------------------------------------------------------------------- plugin commands
COMMANDS_PLUGIN = '''
import accelkit
from accelkit import hookimpl
from accelkit.records import CommandRecord

ACCELKIT_API = ">=1.2,<2"


def hello_arguments(parser):
    parser.add_argument("name")
    parser.add_argument("--shout", action="store_true")


def hello(args):
    text = f"hello, {args.name}"
    print(text.upper() if args.shout else text)
    return 3 if args.name == "three" else None


def echo(words):
    print(words)
    return 0


def broken_arguments(parser):
    raise RuntimeError("options table missing")


def count(args):
    print(len(args.plugin_manager.registry.command_records()))


def refuse(args):
    raise accelkit.ConfigurationError("refusing politely")


def crash(args):
    raise RuntimeError("disk on fire")


@hookimpl
def accelkit_register_commands():
    here = "acme_cli_commands:"
    return [CommandRecord("hello", "greet someone", here + "hello_arguments", here + "hello", aliases=("hi",)),
            CommandRecord("echo", "print the words it gets", run=echo, raw=True),
            CommandRecord("broken", "options that cannot be built", broken_arguments, count),
            CommandRecord("count", "count the commands", run=count),
            CommandRecord("refuse", "raise an accelkit error", run=refuse),
            CommandRecord("crash", "raise something else", run=crash)]
'''
FIT_CLAIMER = '''
from accelkit import hookimpl
from accelkit.records import CommandRecord

ACCELKIT_API = ">=1.2,<2"


@hookimpl
def accelkit_register_commands():
    return [CommandRecord("fit", "a second fit", run=lambda args: 0)]
'''


IGNORE_FIT_CLAIM = pytest.mark.filterwarnings("ignore:command name 'fit' is claimed:RuntimeWarning")


@pytest.fixture
def command_plugins(tmp_path, make_distribution, monkeypatch, clean_env):
    """Two installed distributions (on sys.path, found through importlib.metadata in this process): one with five
    commands, one claiming the core's ``fit``."""
    make_distribution(tmp_path, "acme-commands", "1.0.0", {"acmecmd": "acme_cli_commands"},
                      {"acme_cli_commands": COMMANDS_PLUGIN})
    make_distribution(tmp_path, "acme-fitclaim", "1.0.0", {"fitclaim": "acme_cli_fitclaim"},
                      {"acme_cli_fitclaim": FIT_CLAIMER})
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("acme_cli_commands", "acme_cli_fitclaim"):
        sys.modules.pop(name, None)


@IGNORE_FIT_CLAIM
def test_a_plugin_command_runs_and_is_listed_with_its_distribution(command_plugins, capsys):
    assert run_cli(capsys, "hello", "world", "--shout")[:2] == (0, "HELLO, WORLD\n")
    assert run_cli(capsys, "Hi", "three")[:2] == (3, "hello, three\n")  # an alias, any case; its exit status
    with pytest.raises(SystemExit) as exit_info, pytest.warns(RuntimeWarning, match="command name 'fit'"):
        cli.main(["--help"])
    listing = " ".join(capsys.readouterr().out.split())  # argparse wraps the help lines
    assert exit_info.value.code == 0
    assert "greet someone [acme-commands 1.0.0]" in listing and "count the commands [acme-commands 1.0.0]" in listing
    assert "fit train a Module" in listing and "[acme-fitclaim" not in listing  # the core's fit, unmarked
    with pytest.raises(SystemExit), pytest.warns(RuntimeWarning, match="command name 'fit'"):
        cli.main(["hello", "--help"])
    assert "--shout" in capsys.readouterr().out


@IGNORE_FIT_CLAIM
def test_a_raw_plugin_command_gets_its_words_and_a_parsed_one_gets_the_manager(command_plugins, capsys):
    assert run_cli(capsys, "echo", "--a", "b")[:2] == (0, "['--a', 'b']\n")
    code, out, _ = run_cli(capsys, "count")
    assert code == 0 and int(out) == len(load_commands()[0].registry.command_records())


@IGNORE_FIT_CLAIM
def test_a_broken_plugin_command_fails_alone_with_its_name(command_plugins, capsys):
    code, _, err = run_cli(capsys, "broken")
    assert code == 1
    assert ("accelkit: error: command 'broken' (acme-commands 1.0.0) could not be set up: RuntimeError: options "
            "table missing") in err
    assert run_cli(capsys, "hello", "again")[:2] == (0, "hello, again\n")
    code, _, err = run_cli(capsys, "refuse")
    assert code == 1 and "accelkit: error: refusing politely" in err
    code, _, err = run_cli(capsys, "crash")  # not an accelkit error: its traceback, then whose command it is
    assert code == 1 and 'raise RuntimeError("disk on fire")' in err
    assert err.splitlines()[-1] == (
        "accelkit: error: command 'crash' of plugin 'acmecmd' (acme-commands 1.0.0) raised RuntimeError: disk on fire "
        "(the traceback above is the plugin's: report it to the authors of acme-commands)")


@IGNORE_FIT_CLAIM
def test_a_plugin_cannot_take_a_core_command_name(command_plugins, capsys):
    code, out, _ = run_cli(capsys, "plugins", "--json")
    report = json.loads(out)
    [conflict] = report["conflicts"]
    assert "command name 'fit'" in conflict and "acme-fitclaim 1.0.0" in conflict
    assert "stays accelkit (core)'s" in conflict
    mine = next(p for p in report["plugins"] if p["name"] == "acmecmd")
    assert [c["name"] for c in mine["provides"]["commands"]] == ["hello", "echo", "broken", "count", "refuse",
                                                                 "crash"]
    assert {c["name"] for c in report["core"]["provides"]["commands"]} == {
        "fit", "validate", "test", "predict", "plugins", "doctor", "run", "checkpoint"}


# ------------------------------------------------------------------------------------------- deprecated commands
#: a plugin written against the hook API 1.1 docs: its command is registered by accelkit.cli.command at import
LEGACY_COMMAND_PLUGIN = '''
from accelkit.cli import command

ACCELKIT_API = ">=1.1,<2"


def status_arguments(parser):
    parser.add_argument("--nodes", type=int, default=1)


@command("acme-status", "show the acme cluster's status", status_arguments)
def status(args):
    print(f"acme: {args.nodes} node(s)")
    return 0
'''


@pytest.fixture
def legacy_command_plugin(tmp_path, make_distribution, monkeypatch, clean_env):
    """An installed distribution whose plugin uses the deprecated ``accelkit.cli.command`` decorator."""
    make_distribution(tmp_path, "acme-legacy", "1.1.0", {"acmelegacy": "acme_legacy_cli"},
                      {"acme_legacy_cli": LEGACY_COMMAND_PLUGIN})
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("acme_legacy_cli", None)


def test_a_plugin_using_the_removed_cli_command_still_loads_and_runs_with_one_warning(legacy_command_plugin,
                                                                                      capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out, _ = run_cli(capsys, "acme-status", "--nodes", "2")
    assert (code, out) == (0, "acme: 2 node(s)\n")
    deprecations = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert deprecations == [
        "accelkit.cli.command is deprecated since hook API 1.2 and will be removed in 2.0: use an "
        "accelkit_register_commands hook returning accelkit.records.CommandRecord (see docs/plugins.rst, 'Adding a "
        "command') instead"]
    code, out, _ = run_cli(capsys, "plugins", "--json")
    mine = next(p for p in json.loads(out)["plugins"] if p["name"] == "acmelegacy")
    assert mine["status"] == "loaded"
    assert [c["name"] for c in mine["provides"]["commands"]] == ["acme-status"]


# ------------------------------------------------------------------------------------------- help as plain text
RST_MARKUP = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj|ref|doc):`|``|<class '")
CUT_OFF = re.compile(r".{30}\b(?:a|an|the|or|of|and|to|with),? \(type:")


def help_text(capsys, *words: str) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main([*words, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.slow  # builds the parser of every command
def test_help_of_every_command_is_plain_text(capsys):
    names = [record.name for record in load_commands()[0].registry.command_records()]
    assert {"fit", "validate", "test", "predict", "plugins", "doctor", "checkpoint"} <= set(names)
    for words in [(), *((name,) for name in names)]:
        text = help_text(capsys, *words)
        assert not RST_MARKUP.findall(text), (words, RST_MARKUP.findall(text))
        # no help cut off mid-sentence ("an accelerator name (...), an (type: ...")
        assert not CUT_OFF.findall(re.sub(r"\s+", " ", text)), (words, CUT_OFF.findall(re.sub(r"\s+", " ", text)))
    short = help_text(capsys, "fit", f"{EXAMPLE}:DigitsClassifier")  # the model first: the same --help
    fit = help_text(capsys, "fit")
    assert short == fit
    # one help for both spellings, with the first-run defaults
    assert "accelkit fit examples/digits.py:DigitsClassifier --max-epochs 3" in fit
    assert "accelkit fit --model examples/digits.py:DigitsClassifier --trainer.max_epochs 3" in fit
    assert "Defaults for a first run: 20 epochs" in fit and "seed 0" in fit
    assert "a step's values logged every 10 steps" in re.sub(r"\s+", " ", fit)
    assert "Not given, accelkit fit logs every 10 (the Trainer's own default is 50)" in re.sub(r"\s+", " ", fit)
    # a docstring continued on a line starting with a role is not cut off; tuple group titles are readable
    assert "an Accelerator instance" in re.sub(r"\s+", " ", fit)
    assert "\nLRScheduler or ReduceLROnPlateau:" in fit
    assert "\nTrainer.fit: Train model on loaders" in fit


def test_fit_help_gives_the_commands_own_max_epochs_default(capsys):
    """``accelkit fit --help`` said, under ``--trainer.max_epochs``, that a fit without it trains 1000 epochs (the
    Trainer's docstring), while the command trains 20 (its epilog); the option's help now says the command's."""
    text = re.sub(r"\s+", " ", help_text(capsys, "fit"))
    entry = text[text.index("--trainer.max_epochs MAX_EPOCHS stop"):]
    entry = entry[:entry.index("--trainer.min_epochs")]
    assert "Not given, accelkit fit trains 20 epochs when neither max_steps nor max_time is given" in entry, entry
    assert "as Lightning's: 1000" not in entry, entry


# ------------------------------------------------------------------------------------------- private core names
# A third-party plugin that imports a private name of the core (issue 36, case 11): it loads and runs, and before
# item 9 nothing told its author that the next release may remove the name.
PRIVATE_NAME_USER = '''
import accelkit.loggers.tensorboard
from accelkit.loggers.tensorboard import _flatten

ACCELKIT_API = ">=1.0,<2"
FLAT = _flatten({"a": {"b": 1}})  # it runs: the use is real
'''


@pytest.fixture
def private_name_plugin(tmp_path, make_distribution, clean_env):
    """``acme-private`` 2.0.0, installed on ``sys.path`` for this test only, whose entry point ``acmeprivate``
    imports ``accelkit.loggers.tensorboard._flatten``."""
    make_distribution(tmp_path, "acme-private", "2.0.0", {"acmeprivate": "acme_private_plugin"},
                      {"acme_private_plugin": PRIVATE_NAME_USER})
    clean_env.syspath_prepend(str(tmp_path))
    yield tmp_path / "acme_private_plugin.py"
    sys.modules.pop("acme_private_plugin", None)


def test_plugins_names_the_private_core_names_a_plugin_uses(private_name_plugin, capsys):
    code, out, _ = run_cli(capsys, "plugins", "--json")
    listed = {p["name"]: p for p in json.loads(out)["plugins"]}
    assert code == 0 and listed["acmeprivate"]["status"] == "loaded"
    assert listed["acmeprivate"]["private_names"] == [
        {"name": "accelkit.loggers.tensorboard._flatten", "module": "accelkit.loggers.tensorboard",
         "file": str(private_name_plugin), "line": 3}]
    code, out, _ = run_cli(capsys, "plugins")
    section = out[out.index("acmeprivate  [loaded]  acme-private 2.0.0"):]
    assert ("uses private core name(s), not covered by the stability promise (docs/plugins.rst, 'Stability')"
            in section)
    assert "accelkit.loggers.tensorboard._flatten (module accelkit.loggers.tensorboard, acme_private_plugin.py:3)" \
        in section


def test_doctor_warns_of_a_plugins_private_core_names_without_failing(private_name_plugin, capsys):
    code, out, _ = run_cli(capsys, "doctor", "--json")
    report = json.loads(out)
    assert code == (1 if report["problems"] else 0)
    assert not [p for p in report["problems"] if "acmeprivate" in p]  # a warning, not a problem
    [warning] = [w for w in report["warnings"] if "acmeprivate" in w]
    assert warning.startswith("plugin 'acmeprivate' (acme-private) uses private core name(s)")
    assert "accelkit.loggers.tensorboard._flatten (module accelkit.loggers.tensorboard" in warning
    plugin = next(p for p in report["plugins"] if p["name"] == "acmeprivate")
    assert [use["name"] for use in plugin["private_names"]] == ["accelkit.loggers.tensorboard._flatten"]
    _, out, _ = run_cli(capsys, "doctor")
    assert "\nWarnings:\n  - plugin 'acmeprivate' (acme-private) uses private core name(s)" in out


def test_the_first_party_plugins_use_no_private_core_name(clean_env, capsys):
    report = json.loads(run_cli(capsys, "plugins", "--json")[1])
    assert {p["name"]: p["private_names"] for p in report["plugins"] if p["private_names"]} == {}
    assert json.loads(run_cli(capsys, "doctor", "--json")[1])["warnings"] == []
