"""``accelkit fit|validate|test|predict``: the :class:`~accelkit.cli.CLI` machinery as commands.

    accelkit fit examples/digits.py:DigitsClassifier --max-epochs 3
    accelkit fit --config run.yaml --model path/to/models.py:Net --data mypackage.data:Digits
    accelkit test --config lightning_logs/version_0/config.yaml --ckpt_path last

``--model``/``--data`` take ``path/to/file.py:Class`` or ``package.module:Class`` besides the dotted class paths
of the configuration files. ``accelkit fit FILE.py:Class --max-epochs 3`` (the model first, a Trainer argument
without its ``trainer.``) is another spelling of the same command (:func:`expand_short_form`), with the same
options and defaults (:data:`FIRST_RUN_MAX_EPOCHS`, :data:`FIRST_RUN_LOG_EVERY_N_STEPS`, :data:`FIRST_RUN_SEED`, a
test after the fit).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkit.cli.config import ArgumentParser

from accelkit.errors import ConfigurationError
from accelkit.trainer.summary import print_fit_summary

_TARGET_OPTIONS = {"--model": ("accelkit.module.module", "Module", "accelkit.Module"),
                   "--data": ("accelkit.module.datamodule", "DataModule", "accelkit.DataModule")}

#: ``accelkit fit`` trains this many epochs unless ``max_epochs``, ``max_steps`` or ``max_time`` says otherwise (the
#: Trainer's own default is Lightning's 1000): a first run ends in seconds and its numbers are the README's.
FIRST_RUN_MAX_EPOCHS = 20
#: ``accelkit fit`` logs a training step's values every this many steps unless ``log_every_n_steps`` (or
#: ``barebones``) is given (the Trainer's own default is Lightning's 50): a small first model's epoch (the digits
#: example's 20 batches) is still logged within the epoch, and the fit does not open with the Trainer's warning
#: that an epoch is shorter than the interval.
FIRST_RUN_LOG_EVERY_N_STEPS = 10
#: the ``--seed_everything`` default of the commands (a script's :class:`~accelkit.cli.CLI` keeps Lightning's
#: ``True``: the seed of ``ACCELKIT_SEED`` or ``PL_GLOBAL_SEED``, else 0 with a warning): a run repeated without a
#: configuration gives the same numbers.
FIRST_RUN_SEED = 0

#: words of the short spelling that are not ``--<Trainer argument>``: word -> what it stands for
SHORT_FORM_WORDS = {"--seed": "--seed_everything", "--ckpt-path": "--ckpt_path", "--plugins": "--trainer.plugins+",
                    "--no-progress-bar": "--trainer.enable_progress_bar=false", "--no-test": "--test_after_fit=false"}

FIT_HELP = f"""\
Train a Module; then, when it has a test split, report its test metrics. Two spellings of one command, with the
same options and defaults:

  accelkit fit examples/digits.py:DigitsClassifier --max-epochs 3 --accelerator cpu --init hidden=64
  accelkit fit --model examples/digits.py:DigitsClassifier --trainer.max_epochs 3 --trainer.accelerator cpu \\
      --model.hidden 64

The model is path/to/file.py:Class, package.module:Class or a dotted class path, named first (then it wins over
the model of a --config file, whose init_args it keeps) or with --model. A Trainer argument is --trainer.NAME or,
shorter, --NAME (dashes or underscores: --max-epochs 3); --init KEY=VALUE is
--model.KEY VALUE; --seed N is --seed_everything N; --no-progress-bar and --no-test turn those off.

Defaults for a first run: {FIRST_RUN_MAX_EPOCHS} epochs (when none of --trainer.max_epochs, max_steps or max_time is
given; the Trainer's own default is 1000), a step's values logged every {FIRST_RUN_LOG_EVERY_N_STEPS} steps (when
neither --trainer.log_every_n_steps nor barebones is given; the Trainer's own default is 50), seed {FIRST_RUN_SEED},
and the test loop after the fit when the model or the data has a test split (--test_after_fit false, or --no-test,
skips it; a choice of the command, not written into the configuration). --print_config prints the configuration,
which --config reads back, in this command and in validate, test and predict (and in a script's CLI); the run saves
it as config.yaml beside its logs.
"""


def expand_short_form(words: list[str]) -> list[str]:
    """The words of the short spelling in the configuration spelling: a model first (``file.py:Class``) becomes
    ``--model file.py:Class``, ``--max-epochs 3`` (any Trainer argument, with dashes or underscores, without
    ``trainer.``) ``--trainer.max_epochs 3``, ``--init KEY=VALUE`` ``--model.KEY VALUE``, and the words of
    :data:`SHORT_FORM_WORDS` what they stand for. Other words are kept. A model named first (not ``--model``,
    which keeps the parser's later-wins order, as Lightning's) wins over the ``model:`` of a ``--config`` file: it
    is given again after the last one.

    :raise ConfigurationError: an ``--init`` value without ``=``.
    """
    import inspect

    from accelkit.trainer.trainer import Trainer

    trainer_arguments = set(inspect.signature(Trainer.__init__).parameters) - {"self"}
    out = ["--model", words[0]] if words and not words[0].startswith("-") else []
    rest = iter(words[len(out) // 2:])
    for word in rest:
        option, equals, value = word.partition("=")
        name = option[2:].replace("-", "_")
        if option in SHORT_FORM_WORDS:
            out.append(SHORT_FORM_WORDS[option] + (f"={value}" if equals else ""))
        elif option == "--init":
            item = value if equals else next(rest, "")
            key, sep, init_value = item.partition("=")
            if not sep or not key:
                raise ConfigurationError(f"--init {item!r} is not KEY=VALUE; give a keyword argument of the "
                                         "model's constructor, as in --init hidden=64")
            out += [f"--model.{key}", init_value]
        elif option.startswith("--") and name in trainer_arguments:
            out.append(f"--trainer.{name}" + (f"={value}" if equals else ""))
        else:
            out.append(word)
    return _model_after_configs(out) if words and not words[0].startswith("-") else out


def _model_after_configs(words: list[str]) -> list[str]:
    """``words`` with the model named first given again after the last ``--config`` file: a file's ``model:``
    would otherwise replace the one the command names (later wins); the file's ``init_args`` are kept."""
    ends = [index + (1 if "=" in word else 2) for index, word in enumerate(words)
            if word in ("-c", "--config") or word.startswith("--config=")]
    if not ends:
        return words
    return words[:ends[-1]] + words[:2] + words[ends[-1]:]


def pop_test_after_fit(words: list[str]) -> tuple[list[str], bool]:
    """``words`` without their ``--test_after_fit true|false``, and its (last) value, ``True`` when absent. It is
    the command's choice, not the run's: it is not written into the configuration, which a script's
    :class:`~accelkit.cli.CLI` reads too.

    :raise ConfigurationError: a value other than true or false.
    """
    kept: list[str] = []
    value = "true"
    rest = iter(words)
    for word in rest:
        option, equals, given = word.partition("=")
        if option != "--test_after_fit":
            kept.append(word)
            continue
        value = given if equals else next(rest, "")
        if value.lower() not in ("true", "false"):
            raise ConfigurationError(f"--test_after_fit {value!r}: give true or false")
    return kept, value.lower() == "true"


def check_ckpt_path(ckpt_path: str | os.PathLike[str] | None, stage: str = "fit") -> None:
    """Refuse a ``--ckpt_path`` naming nothing that exists (``"last"`` is the Trainer's to find, and ``"best"`` that
    of a ``fit``; a ``validate``, ``test`` or ``predict`` command has no fit before it whose best it could be).

    :raise ConfigurationError: naming the path, the folder it was looked for in, and what works.
    """
    if str(ckpt_path) == "best" and stage != "fit":
        raise ConfigurationError(f"--ckpt_path 'best' names the best checkpoint of a fit in the same run, and "
                                 f"'accelkit {stage}' has none; give the checkpoint file (the fit printed its path) "
                                 "or 'last'")
    if ckpt_path is None or str(ckpt_path) in ("last", "best") or os.path.exists(ckpt_path):
        return
    raise ConfigurationError(f"--ckpt_path {str(ckpt_path)!r} does not exist (looked for from {os.getcwd()}); give "
                             "a checkpoint file, a sharded checkpoint folder, 'last' or 'best'")


def resolve_targets(words: list[str]) -> list[str]:
    """``--model``/``--data`` values of the form ``file.py:Class`` or ``package.module:Class`` rewritten as
    dotted class paths (the class imported, so configuration parsing finds it).

    :raise SystemExit: a value that is neither such a target, a dotted class path that imports, a configuration
        file nor an inline mapping, naming the forms that work.
    """
    out = list(words)
    for index, word in enumerate(out):
        option, equals, value = word.partition("=")
        if option not in _TARGET_OPTIONS:
            continue
        if equals:
            out[index] = f"{option}={_resolve_target(option, value)}"
        elif index + 1 < len(out):
            out[index + 1] = _resolve_target(option, out[index + 1])
    return out


def _resolve_target(option: str, value: str) -> str:
    import importlib

    from accelkit.cli.class_paths import dotted_class_path, load_class
    from accelkit.cli.saved_config import import_class_path

    module, name, kind = _TARGET_OPTIONS[option]
    base = getattr(importlib.import_module(module), name)
    if value.lstrip().startswith(("{", "[", "-")) or (os.path.isfile(value) and not value.endswith(".py")):
        return value  # inline configuration, a configuration file, or the next option (the parser reports it)
    if value.endswith(".py"):
        load_class(value, base, kind)  # a file without its class: raises, naming the form that works
    if ":" in value:
        return dotted_class_path(value, base, kind)
    try:
        import_class_path(value)
    except Exception:  # noqa: BLE001 - whatever stops the import, the value does not name a class here
        raise SystemExit(f"accelkit: {option} {value!r} names no class importable from here; give "
                         "path/to/file.py:Class, package.module:Class or a dotted class path") from None
    return value


def _make_cli_class(test_after_fit: bool = True, subcommand: str | None = None) -> type:
    from accelkit.cli.config import SaveConfigCallback
    from accelkit.cli.lightning_cli import CLI
    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.utilities.model_helpers import is_overridden

    class CommandCLI(CLI):
        """The CLI of the ``accelkit`` command: the first-run defaults, the test after the fit, a ``--ckpt_path``
        checked before anything starts, and lines saying what ran, where the configuration went and what the run
        measured."""

        @staticmethod
        def subcommands() -> dict[str, set[str]]:
            """The sub-command that runs (all four without one): the parsers of the others are not built, which
            would cost more than the rest of parsing."""
            every = CLI.subcommands()
            return every if subcommand is None else {subcommand: every[subcommand]}

        def add_arguments_to_parser(self, parser: ArgumentParser) -> None:
            """``--trainer.max_epochs``'s help says the command's own default (the Trainer's docstring gives the
            Trainer's, Lightning's 1000, which the command does not use)."""
            for action in parser._actions:  # argparse keeps no public list of a parser's options
                if action.dest == "trainer.max_epochs":
                    action.help = (f"stop after this many epochs (-1: no limit). Not given, accelkit fit trains "
                                   f"{FIRST_RUN_MAX_EPOCHS} epochs when neither max_steps nor max_time is given "
                                   "(the Trainer's own default is 1000).")
                elif action.dest == "trainer.log_every_n_steps":
                    action.help = (f"log a training step's values every this many steps. Not given, accelkit fit "
                                   f"logs every {FIRST_RUN_LOG_EVERY_N_STEPS} (the Trainer's own default is 50).")

        def before_instantiate_classes(self) -> None:
            trainer = self.config[str(self.subcommand)]["trainer"]
            if self.subcommand == "fit" and trainer.get("max_epochs") is None \
                    and trainer.get("max_steps") in (None, -1) and trainer.get("max_time") is None:
                trainer["max_epochs"] = FIRST_RUN_MAX_EPOCHS
            if self.subcommand == "fit" and trainer.get("log_every_n_steps") is None and not trainer.get("barebones"):
                trainer["log_every_n_steps"] = FIRST_RUN_LOG_EVERY_N_STEPS

        def _start(self) -> None:
            check_ckpt_path(self.config_init[str(self.subcommand)].get("ckpt_path"), str(self.subcommand))

        def before_fit(self) -> None:
            self._start()
            self.fit_started = time.perf_counter()  # the summary's time, as Trainer.fit's with a bar
            config = self.trainer.config
            print(f"accelkit: training {type(self.model).__name__} on {config.accelerator} devices={config.devices} "
                  f"strategy={config.strategy} precision={config.precision} num_nodes={config.num_nodes}")

        before_validate = before_test = before_predict = _start

        def _report(self, what: str) -> None:
            trainer = self.trainer
            if what == "fit" and trainer.progress_bar_callback is None:  # with a bar, fit() printed it
                print_fit_summary(trainer, time.perf_counter() - self.fit_started)
            if trainer.is_global_zero and self.save_config_callback is not None and not trainer.fast_dev_run:
                print(f"accelkit: configuration saved to {os.path.join(trainer.log_dir, 'config.yaml')} "
                      f"(repeat with --config)")

        def _has_test_split(self) -> bool:
            if not is_overridden("test_step", self.model, Module):
                return False
            if self.datamodule is not None:
                return is_overridden("test_dataloader", self.datamodule, DataModule)
            return is_overridden("test_dataloader", self.model, Module) and self.model.test_dataloader() is not None

        def after_fit(self) -> None:
            self._report("fit")
            if not test_after_fit or not self._has_test_split():
                return
            for callback in self.trainer.callbacks:  # the fit wrote it (in its workers, under a spawning strategy)
                if isinstance(callback, SaveConfigCallback):
                    callback.already_saved = True
            results = self.trainer.test(self.model, datamodule=self.datamodule)
            if self.trainer.is_global_zero:
                for name, value in sorted(results[0].items()):
                    print(f"accelkit: held-out {name} = {float(value):.4f}")

    return CommandCLI


def run_config_command(subcommand: str, words: list[str]) -> int:
    """Run ``subcommand`` through :class:`~accelkit.cli.CLI` with ``--model``/``--data`` given on the command
    line or in ``--config`` files, in either spelling (:func:`expand_short_form`)."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # class paths of modules in the current folder import, as with python -m
    words, test_after_fit = expand_short_form(words), False
    if subcommand == "fit":
        words, test_after_fit = pop_test_after_fit(words)
    try:
        cli_class = _make_cli_class(test_after_fit, subcommand)
    except ModuleNotFoundError as exc:
        if exc.name != "jsonargparse":
            raise
        raise ConfigurationError(f"accelkit {subcommand} needs jsonargparse, which is not installed: "
                                 "pip install \"accelkit[cli]\"") from None
    parser_kwargs: dict[str, object] = {"prog": "accelkit"}
    if subcommand == "fit":
        parser_kwargs["fit"] = {"description": FIT_HELP}
    cli_class(args=[subcommand, *resolve_targets(words)], parser_kwargs=parser_kwargs,
              seed_everything_default=FIRST_RUN_SEED)
    return 0


def run_fit(words: list[str]) -> int:
    """``accelkit fit``: train from ``--config`` files and options, or ``accelkit fit file.py:Class --max-epochs 3``
    (the same command, spelt shorter)."""
    return run_config_command("fit", words)


def run_validate(words: list[str]) -> int:
    """``accelkit validate``: the validation loop once, from ``--config`` files and options."""
    return run_config_command("validate", words)


def run_test(words: list[str]) -> int:
    """``accelkit test``: the test loop once, from ``--config`` files and options."""
    return run_config_command("test", words)


def run_predict(words: list[str]) -> int:
    """``accelkit predict``: prediction, from ``--config`` files and options."""
    return run_config_command("predict", words)


__all__ = ["FIRST_RUN_LOG_EVERY_N_STEPS", "FIRST_RUN_MAX_EPOCHS", "FIRST_RUN_SEED", "SHORT_FORM_WORDS",
           "check_ckpt_path", "expand_short_form", "pop_test_after_fit",
           "resolve_targets", "run_config_command", "run_fit", "run_predict", "run_test", "run_validate"]
