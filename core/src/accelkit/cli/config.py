"""``accelkit.cli.CLI``: a command with ``fit``/``validate``/``test``/``predict`` driven by YAML configurations.

The job of Lightning's ``LightningCLI``, built on jsonargparse: every constructor argument of the Module, the
DataModule and the :class:`~accelkit.Trainer` is settable from ``--config`` files or the command line, optimizers,
schedulers, callbacks and loggers are chosen by class path, and the resolved configuration is saved next to the
run's logs so that ``--config`` that file repeats the run. A LightningCLI script runs after changing only its
imports (``from accelkit.cli import CLI as LightningCLI``); Lightning class paths in its YAML files are mapped to
accelkit's classes (:mod:`accelkit.cli.class_paths`).

This module imports jsonargparse; ``import accelkit`` does not import it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypedDict, cast

import torch

try:
    from jsonargparse import ArgumentParser as _JsonArgParser
    from jsonargparse import Namespace, get_loader, set_loader
except ModuleNotFoundError as _missing:  # the core's optional extra
    raise ModuleNotFoundError("accelkit.cli.CLI and `accelkit fit|validate|test|predict --config` need jsonargparse: "
                              "pip install \"accelkit[cli]\"  (or  pip install \"jsonargparse[signatures]\")",
                              name="jsonargparse") from _missing

from accelkit.__about__ import __version__
from accelkit.accelerator import Accelerator
from accelkit.callbacks import Callback
from accelkit.cli.class_path_safety import only_classes_are_built, values_of_any_stay_data
from accelkit.cli.class_paths import translate_value
from accelkit.cli.config_errors import error_lines, explain
from accelkit.cli.help_text import PlainHelpFormatter
from accelkit.cli.saved_config import (
    accept_class_paths,
    file_form_class_paths,
    import_class_path,
    started_in,
    with_class_paths,
)
from accelkit.errors import ConfigurationError
from accelkit.loggers import Logger
from accelkit.loggers import tensorboard as _tensorboard  # noqa: F401  (class name resolution needs it imported)
from accelkit.module.datamodule import DataModule
from accelkit.module.module import Module
from accelkit.profilers import Profiler
from accelkit.strategies.base import Strategy
from accelkit.trainer.trainer import Trainer
from accelkit.utilities.bounded import DataBombError, check_yaml_text

if TYPE_CHECKING:
    from accelkit.module.module import Module

#: What ``args=`` accepts: a list of command-line words, a dict, a jsonargparse ``Namespace`` or ``None``
#: (``sys.argv``); Lightning's type, so that a LightningCLI program's annotations still check.
ArgsType = list[str] | dict[str, Any] | Namespace | None

#: The parser mode: YAML, with Lightning class paths in the loaded data rewritten to accelkit's.
PARSER_MODE = "accelkit_yaml"


def _load(text: str) -> object:
    # bounded first: every step below walks the loaded data, which aliases could make a billion values
    check_yaml_text(text, "the configuration")
    # a group a CLI builds with a fixed class also reads the class_path form the saved configuration writes; a
    # file-form class path (lib/nets.py:Net) stays text here: its file is imported only where the argument's
    # annotation asks for a class (accelkit.cli.class_path_safety)
    return accept_class_paths(translate_value(get_loader("yaml")(text)))


set_loader(PARSER_MODE, _load, exceptions=(__import__("yaml").YAMLError, DataBombError))

#: Trainer arguments whose signature says ``Any``, with the types the command line and files accept. The others
#: come from the Trainer's signature as they are.
TRAINER_TYPES: dict[str, object] = {
    "accelerator": str | Accelerator,
    "strategy": str | Strategy,
    "devices": int | list[int] | str,
    "precision": int | str | None,
    "logger": bool | Logger | str | list[Logger | str] | None,
    "callbacks": list[Callback | str] | Callback | str | None,
    "profiler": Profiler | str | None,
    "plugins": str | list[str] | None,
    "deterministic": bool | Literal["warn"] | None,
    "max_time": str | dict[str, int] | None,
    "default_root_dir": str | None,
}
#: Arguments of Lightning's Trainer that accelkit's lacks, accepted at the value Lightning's ``--print_config``
#: writes by default so that such files load; another value is an error naming the argument.
LIGHTNING_ONLY_TRAINER_ARGUMENTS: dict[str, tuple[object, object, str]] = {
    "enable_autolog_hparams": (bool, True, "accelkit always logs the module's hyper-parameters to its loggers"),
    "model_registry": (str | None, None, "it names Lightning AI's cloud model registry, which accelkit does not"
                                         + " talk to"),
}


_FIELD = re.compile(r":\w+(?: [^:`]*)?:(?:\s|$)")  # a field of a docstring (":param x:", ":raises:")


def param_help(cls: type) -> dict[str, str]:
    """``:param name: text`` entries of a class docstring (one logical line each)."""
    found: dict[str, str] = {}
    current = None
    for line in (cls.__doc__ or "").splitlines():
        text = line.strip()
        if text.startswith(":param "):
            name, _, rest = text[len(":param "):].partition(":")
            current = name.strip()
            found[current] = rest.strip()
        elif current and text and not _FIELD.match(text):  # a continuation may start with a role (:class:`X`)
            found[current] += " " + text
        else:
            current = None
    return found


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """``torch.optim.lr_scheduler.ReduceLROnPlateau`` with the metric it watches, for ``--lr_scheduler``.

    :param optimizer: the optimizer (filled in by the CLI).
    :param monitor: the logged metric passed to ``step()`` (``"val_loss"``).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


#: What ``--lr_scheduler`` accepts, as Lightning's LightningCLI: torch's schedulers and the ReduceLROnPlateau above,
#: not torch's, so that the short name ``ReduceLROnPlateau`` names one class (torch's, a subclass of LRScheduler,
#: is still accepted by its full path; a short name two classes share is an error naming both, as in Lightning)
LR_SCHEDULER_CLASSES = (torch.optim.lr_scheduler.LRScheduler, ReduceLROnPlateau)

#: the classes an optimizer or scheduler group takes: one class (its arguments only) or base classes (by class path)
OptimClasses = type | tuple[type, ...]
#: what ``configure_optimizers`` gets besides the module: the built scheduler, if one was configured
SchedulerType = torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau


class ClassInit(TypedDict):
    """A class to build and its constructor's keyword arguments, as configurations write it."""

    class_path: str
    init_args: dict[str, object]


def instantiate_class(args: object, init: Mapping[str, Any]) -> Any:
    """Build ``init["class_path"]`` with positional ``args`` (one value or a tuple) and ``init["init_args"]``.
    (``init`` and the result are typed as Lightning's function types them: configuration data in, any class out.)

    :param init: ``{"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}}``.
    """
    # a configuration builds only classes (accelkit.cli.class_path_safety.only_classes_are_built)
    cls = cast("Callable[..., object]", import_class_path(init["class_path"]))
    positional = args if isinstance(args, tuple) else (args,)
    return cls(*positional, **dict(init.get("init_args") or {}))


def instantiate_config(parser: _JsonArgParser, config: Namespace) -> Namespace:
    """``config`` with its classes built (jsonargparse's ``instantiate``, ``instantiate_classes`` before 4.49)."""
    method = getattr(parser, "instantiate", None)
    return method(config) if callable(method) else parser.instantiate_classes(config)


def dump_config(parser: _JsonArgParser, config: Namespace) -> str:
    """``config`` as YAML with every key, ``null`` values included (so that the file repeats the run)."""
    try:
        text = parser.dump(config, skip_unset=False)
    except TypeError:  # jsonargparse before 4.49 (its signature is hidden behind a wrapper, so ask by calling)
        text = parser.dump(config, skip_none=False)
    classes = getattr(parser, "fixed_classes", None)
    # the model and data classes are named even where this CLI fixes them, so that every command reads the file
    return with_class_paths(text, config, classes) if classes else text


class ArgumentParser(_JsonArgParser):
    """jsonargparse's parser with the argument groups a CLI needs (Lightning's ``LightningArgumentParser``).

    Errors name the key, the bad value, what is accepted and the closest key (:mod:`accelkit.cli.config_errors`).
    """

    def __init__(self, *args: Any, description: str = "accelkit command line tool", **kwargs: Any) -> None:
        # "yaml", Lightning's mode, which programs name (parser_kwargs={"parser_mode": "yaml"}), is read as YAML by
        # this mode, which maps Lightning's class paths too (under jsonargparse's own "yaml" they were refused)
        kwargs["parser_mode"] = PARSER_MODE if kwargs.get("parser_mode", "yaml") == "yaml" else kwargs["parser_mode"]
        kwargs.setdefault("dump_header", [f"accelkit=={__version__}"])
        kwargs.setdefault("allow_abbrev", False)  # a misspelt key is reported with the close one, not guessed
        kwargs.setdefault("formatter_class", PlainHelpFormatter)
        super().__init__(*args, description=description, **kwargs)
        #: keys of callback argument groups added with :meth:`add_lightning_class_args`
        self.callback_keys: list[str] = []
        #: Module and DataModule groups added with a fixed class (``{"model": Net}``; see
        #: ``accelkit.cli.saved_config``)
        self.fixed_classes: dict[str, type] = {}
        self.optimizer_classes: dict[str, tuple[OptimClasses, str]] = {}
        self.lr_scheduler_classes: dict[str, tuple[OptimClasses, str]] = {}

    def add_lightning_class_args(self, cls: type, nested_key: str, subclass_mode: bool = False,
                                 required: bool = True) -> list[str]:
        """Add the constructor arguments of a Trainer, Module, DataModule or Callback class under ``nested_key``
        (any subclass of it by class path with ``subclass_mode``). A callback added this way joins the run's
        callbacks. The name is Lightning's, so ``add_arguments_to_parser`` overrides run unchanged."""
        if not (isinstance(cls, type) and issubclass(cls, (Trainer, Module, DataModule, Callback))):
            raise TypeError(f"add_lightning_class_args({cls!r}): give a subclass of accelkit's Trainer, Module, "
                            "DataModule or Callback")
        if issubclass(cls, Callback):
            self.callback_keys.append(nested_key)
        if subclass_mode:
            return self.add_subclass_arguments(cls, nested_key, fail_untyped=False, required=required)
        if issubclass(cls, (Module, DataModule)):
            self.fixed_classes[nested_key] = cls
        return self.add_class_arguments(cls, nested_key, fail_untyped=False, sub_configs=True,
                                        instantiate=not issubclass(cls, Trainer))

    def add_optimizer_args(self, optimizer_class: OptimClasses = (torch.optim.Optimizer,),
                           nested_key: str = "optimizer", link_to: str = "AUTOMATIC") -> None:
        """Add ``--optimizer`` (a class path with ``init_args``; ``params`` is filled in by the CLI)."""
        self._add_optim_group(optimizer_class, nested_key, link_to, "params", self.optimizer_classes)

    def add_lr_scheduler_args(self, lr_scheduler_class: OptimClasses = LR_SCHEDULER_CLASSES,
                              nested_key: str = "lr_scheduler",
                              link_to: str = "AUTOMATIC") -> None:
        """Add ``--lr_scheduler`` (a class path with ``init_args``; ``optimizer`` is filled in by the CLI)."""
        self._add_optim_group(lr_scheduler_class, nested_key, link_to, "optimizer", self.lr_scheduler_classes)

    def _add_optim_group(self, classes: OptimClasses, key: str, link_to: str, skip: str,
                         table: dict[str, tuple[OptimClasses, str]]) -> None:
        if isinstance(classes, tuple):
            self.add_subclass_arguments(classes, key, required=False, instantiate=False, fail_untyped=False,
                                        skip={skip})
        else:
            self.add_class_arguments(classes, key, sub_configs=True, instantiate=False, fail_untyped=False,
                                     skip={skip})
        table[key] = (classes, link_to)

    def parse_object(self, cfg_obj: Namespace | dict[str, Any], *args: Any, **kwargs: Any) -> Namespace:
        """As jsonargparse's, with Lightning class paths in ``cfg_obj`` mapped to accelkit's."""
        if isinstance(cfg_obj, Namespace):
            cfg_obj = cfg_obj.as_dict()
        with values_of_any_stay_data():
            return super().parse_object(accept_class_paths(translate_value(cfg_obj)), *args, **kwargs)

    def parse_string(self, *args: Any, **kwargs: Any) -> Namespace:
        """As jsonargparse's (see :meth:`parse_args`)."""
        with values_of_any_stay_data():
            return super().parse_string(*args, **kwargs)

    def parse_path(self, *args: Any, **kwargs: Any) -> Namespace:
        """As jsonargparse's (see :meth:`parse_args`)."""
        with values_of_any_stay_data():
            return super().parse_path(*args, **kwargs)

    def parse_env(self, *args: Any, **kwargs: Any) -> Namespace:
        """As jsonargparse's (see :meth:`parse_args`)."""
        with values_of_any_stay_data():
            return super().parse_env(*args, **kwargs)

    def dump(self, *args: Any, **kwargs: Any) -> str:
        """As jsonargparse's (see :meth:`parse_args`), with classes of files outside the current folder named by
        their file (:func:`~accelkit.cli.saved_config.file_form_class_paths`), so that the text loads back from
        here."""
        with values_of_any_stay_data():
            return file_form_class_paths(super().dump(*args, **kwargs))

    def instantiate(self, *args: Any, **kwargs: Any) -> Namespace:
        """As jsonargparse's (see :meth:`parse_args`; ``instantiate_classes`` before jsonargparse 4.49)."""
        only_classes_are_built(args[0] if args else kwargs.get("cfg"))
        with values_of_any_stay_data():
            return super().instantiate(*args, **kwargs)

    def instantiate_classes(self, *args: Any, **kwargs: Any) -> Namespace:
        """As jsonargparse's (see :meth:`parse_args`); jsonargparse's name for :meth:`instantiate` before 4.49."""
        only_classes_are_built(args[0] if args else kwargs.get("cfg"))
        with values_of_any_stay_data():
            return super().instantiate_classes(*args, **kwargs)

    # (jsonargparse's parse_args, overridden here, already differs from argparse's: it returns jsonargparse's Namespace)
    def parse_args(self, args: Sequence[str] | None = None, *more: Any,  # type: ignore[override]
                   **kwargs: Any) -> Namespace:
        """As jsonargparse's, with three differences: a value given for an ``Any``/untyped argument stays data (see
        :func:`~accelkit.cli.class_path_safety.values_of_any_stay_data`, as in every method of this parser that
        reads, writes or builds values); the words are kept, so that an error names every unknown key among them;
        files named in configurations are also looked for from the current folder (see
        :func:`~accelkit.cli.saved_config.started_in`)."""
        self.parsed_words = [str(word) for word in (sys.argv[1:] if args is None else args)]
        with started_in(Path.cwd()), values_of_any_stay_data():
            return super().parse_args(args, *more, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        """Report a parse error: with ``exit_on_error``, every unknown key with its closest known one (or the key,
        the value and what is accepted; :mod:`accelkit.cli.config_errors`) and one line on where to find help, on
        stderr, then exit with 2; without, raise with what :func:`~accelkit.cli.config_errors.explain` adds."""
        if not self.exit_on_error:
            super().error(explain(self, message), ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        prog = parser.prog.replace(" [options]", "")
        lines = error_lines(self, message, getattr(self, "parsed_words", []))
        sys.stderr.write("".join(f"{prog}: error: {line}\n" for line in lines)
                         + f"Run '{prog} --help' to see every key and the values it accepts.\n")
        self.exit(2)


class SaveConfigCallback(Callback):
    """Write the run's resolved configuration to ``<trainer.log_dir>/config.yaml`` when it starts, so that
    ``--config`` that file repeats the run. The text is made in the launching process, so the callback travels to
    spawned workers without the parser.

    :param parser: the parser that read the configuration.
    :param config: the parsed configuration (of the sub-command).
    :param config_filename: the file name.
    :param overwrite: replace an existing file (otherwise an existing one is an error, to protect a former run).
    :param multifile: accepted for Lightning compatibility; the configuration is always written as one file.
    :param save_to_log_dir: write the file; ``False`` only makes sense in a subclass overriding
        :meth:`save_config`.
    """

    def __init__(self, parser: ArgumentParser, config: Namespace, config_filename: str = "config.yaml",
                 overwrite: bool = False, multifile: bool = False, save_to_log_dir: bool = True) -> None:
        self.parser = parser
        self.config = config
        self.config_text = dump_config(parser, config)
        self.config_filename = config_filename
        self.overwrite = overwrite
        self.multifile = multifile
        self.save_to_log_dir = save_to_log_dir
        self.already_saved = False
        if not save_to_log_dir and type(self).save_config is SaveConfigCallback.save_config:
            raise ValueError("SaveConfigCallback(save_to_log_dir=False) writes nothing; override save_config() in a "
                             "subclass to save the configuration elsewhere")

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["parser"] = None  # parsers hold functions and modules; the text is what the workers need
        return state

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Write the file (global rank zero), refusing to overwrite one unless ``overwrite=True``."""
        if self.already_saved:
            return
        if self.save_to_log_dir:
            path = os.path.join(trainer.log_dir, self.config_filename)
            exists = trainer.strategy.broadcast(os.path.isfile(path) if trainer.is_global_zero else False)
            if exists and not self.overwrite:
                raise ConfigurationError(f"{path} exists already: a former run's configuration. Delete it, "
                                         "choose another trainer.default_root_dir, pass save_config_kwargs="
                                         "{'overwrite': True}, or save_config_callback=None")
            if trainer.is_global_zero:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(self.config_text)
        if trainer.is_global_zero:
            self.save_config(trainer, pl_module, stage)
        self.already_saved = True

    def save_config(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Override to save the configuration somewhere else too (runs on global rank zero only; the text is
        ``config_text``)."""


class ConfiguredOptimizers:
    """A module's ``configure_optimizers`` built from ``--optimizer``/``--lr_scheduler``: the optimizer is made
    when the Trainer asks (in the worker, on the parameters as they are then)."""

    def __init__(self, module: Module, optimizer: ClassInit, scheduler: ClassInit | None,
                 configure: Callable[[Module, torch.optim.Optimizer, SchedulerType | None], object]) -> None:
        self.module, self.optimizer, self.scheduler, self.configure = module, optimizer, scheduler, configure

    def __call__(self) -> object:
        optimizer = instantiate_class(self.module.parameters(), self.optimizer)
        scheduler = instantiate_class(optimizer, self.scheduler) if self.scheduler else None
        return self.configure(self.module, optimizer, scheduler)


def class_init(value: Any, classes: OptimClasses) -> ClassInit | None:
    """``{"class_path", "init_args"}`` from a parsed optimizer/scheduler group (a dict or a Namespace)."""
    if value is None:
        return None
    value = value.as_dict() if isinstance(value, Namespace) else dict(value)
    if "class_path" in value:
        return {"class_path": value["class_path"], "init_args": dict(value.get("init_args") or {})}
    if not value:
        return None
    cls = classes if isinstance(classes, type) else classes[0]
    return {"class_path": f"{cls.__module__}.{cls.__name__}", "init_args": value}


__all__ = ["ArgsType", "ArgumentParser", "ReduceLROnPlateau", "SaveConfigCallback", "instantiate_class"]
