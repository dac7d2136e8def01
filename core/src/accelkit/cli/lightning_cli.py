"""The :class:`CLI` class (Lightning's ``LightningCLI``, importable from :mod:`accelkit.cli`); the parser pieces live in
:mod:`accelkit.cli.config`."""

from __future__ import annotations

import inspect
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
from jsonargparse import ActionConfigFile, Namespace

from accelkit.cli.class_paths import translate_word
from accelkit.cli.config import (
    LIGHTNING_ONLY_TRAINER_ARGUMENTS,
    TRAINER_TYPES,
    ArgsType,
    ArgumentParser,
    ClassInit,
    ConfiguredOptimizers,
    ReduceLROnPlateau,
    SaveConfigCallback,
    SchedulerType,
    class_init,
    instantiate_config,
    param_help,
)
from accelkit.errors import ConfigurationError
from accelkit.module.datamodule import DataModule
from accelkit.module.module import Module
from accelkit.trainer.trainer import Trainer
from accelkit.utilities.model_helpers import is_overridden
from accelkit.utilities.seed import seed_everything

#: sub-command -> the Trainer method's parameters the CLI fills in itself (the others become arguments)
SUBCOMMANDS: dict[str, set[str]] = {
    "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
    "validate": {"model", "dataloaders", "datamodule"},
    "test": {"model", "dataloaders", "datamodule"},
    "predict": {"model", "dataloaders", "datamodule"},
}


def add_trainer_arguments(parser: ArgumentParser, trainer_class: type[Trainer] = Trainer) -> None:
    """Every argument of ``trainer_class`` under ``--trainer.*``: typed from its signature, with the types of
    :data:`~accelkit.cli.config.TRAINER_TYPES` where the signature says ``Any``, plus the Lightning-only
    arguments of :data:`~accelkit.cli.config.LIGHTNING_ONLY_TRAINER_ARGUMENTS` at their defaults."""
    parameters = inspect.signature(trainer_class.__init__).parameters
    retyped = {name for name in TRAINER_TYPES if name in parameters}
    parser.add_class_arguments(trainer_class, "trainer", instantiate=False, fail_untyped=False, sub_configs=True,
                               skip=retyped)
    helps = param_help(Trainer)
    for name in sorted(retyped):
        parser.add_argument(f"--trainer.{name}", type=TRAINER_TYPES[name], default=parameters[name].default,
                            help=helps.get(name, ""))
    for name, (kind, default, why) in LIGHTNING_ONLY_TRAINER_ARGUMENTS.items():
        if name not in parameters:
            parser.add_argument(f"--trainer.{name}", type=kind, default=default,
                                help=f"Lightning's; accepted only as {default!r} ({why}).")


class CLI:
    """Lightning's ``LightningCLI`` for accelkit: ``fit``/``validate``/``test``/``predict`` from YAML files and the
    command line.

    :param model_class: the :class:`~accelkit.Module` class (or ``None``: any, chosen with ``--model``).
    :param datamodule_class: the :class:`~accelkit.DataModule` class (or ``None``: optional, any, ``--data``).
    :param save_config_callback: the callback class writing the resolved configuration next to the logs
        (``None``: not written).
    :param save_config_kwargs: its keyword arguments (``{"overwrite": True}``...).
    :param trainer_class: the :class:`~accelkit.Trainer` class (a subclass may add arguments).
    :param trainer_defaults: Trainer argument defaults; ``callbacks`` given here are always added.
    :param seed_everything_default: ``--seed_everything`` default: an int, ``True`` (``ACCELKIT_SEED``'s or
        ``PL_GLOBAL_SEED``'s seed, else 0 with a warning, as Lightning's; written to the saved configuration) or
        ``False`` (no seeding).
    :param parser_kwargs: keyword arguments of every :class:`~accelkit.cli.config.ArgumentParser` (or, under a
        sub-command name, of that sub-command's).
    :param subclass_mode_model: accept any subclass of ``model_class`` by class path.
    :param subclass_mode_data: likewise for ``datamodule_class``.
    :param args: the arguments (a list of words, a dict or a ``Namespace``); ``None``: ``sys.argv[1:]``.
    :param run: add the sub-commands and run the chosen one; ``False`` only builds ``model``, ``datamodule`` and
        ``trainer`` from the arguments.
    :param auto_configure_optimizers: add ``--optimizer``/``--lr_scheduler`` and, when given, replace the
        module's ``configure_optimizers`` with them.

    After construction: ``config`` (parsed), ``config_init`` (with instances), ``model``, ``datamodule``,
    ``trainer`` and ``subcommand``. Override :meth:`add_arguments_to_parser`, :meth:`before_instantiate_classes`,
    :meth:`after_instantiate_classes`, ``before_<subcommand>``/``after_<subcommand>`` as with Lightning.
    """

    def __init__(self, model_class: type[Module] | None = None,
                 datamodule_class: type[DataModule] | None = None,
                 save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
                 save_config_kwargs: dict[str, Any] | None = None, trainer_class: type = Trainer,
                 trainer_defaults: dict[str, Any] | None = None, seed_everything_default: bool | int = True,
                 parser_kwargs: dict[str, Any] | None = None, subclass_mode_model: bool = False,
                 subclass_mode_data: bool = False, args: ArgsType = None, run: bool = True,
                 auto_configure_optimizers: bool = True) -> None:
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = save_config_kwargs or {}
        self.trainer_class = trainer_class
        self.trainer_defaults = trainer_defaults or {}
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = parser_kwargs or {}
        self.auto_configure_optimizers = auto_configure_optimizers
        self.model_class = model_class
        self._model_class = model_class or Module
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.datamodule_class = datamodule_class
        self._datamodule_class = datamodule_class or DataModule
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data

        main_kwargs = {k: v for k, v in self.parser_kwargs.items() if k not in SUBCOMMANDS}
        sub_kwargs = {k: v for k, v in self.parser_kwargs.items() if k in SUBCOMMANDS}
        self.setup_parser(run, main_kwargs, sub_kwargs)
        self.parse_arguments(self.parser, args)
        self.subcommand = self.config["subcommand"] if run else None
        self._set_seed()
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    # ----------------------------------------------------------------- the parser
    def init_parser(self, **kwargs: Any) -> ArgumentParser:
        """A parser with ``-c/--config`` (repeatable YAML files; ``--print_config`` comes with it)."""
        parser = ArgumentParser(**kwargs)
        parser.add_argument("-c", "--config", action=ActionConfigFile,
                            help="a YAML configuration file; repeat to merge several (later ones win)")
        return parser

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict[str, Any], sub_kwargs: dict[str, Any]) -> None:
        """Build ``parser`` (with a sub-parser per sub-command when ``add_subcommands``)."""
        self.parser = self.init_parser(**main_kwargs)
        self._subcommand_parsers: dict[str, ArgumentParser] = {}
        self._subcommand_method_arguments: dict[str, list[str]] = {}
        if not add_subcommands:
            self._add_arguments(self.parser)
            return
        subcommands = self.parser.add_subcommands()
        for name, skip in self.subcommands().items():
            method = getattr(self.trainer_class, name)
            description = (inspect.getdoc(method) or "").split("\n\n")[0].replace("\n", " ")
            kwargs = {"description": description, **sub_kwargs.get(name, {})}
            parser = self.init_parser(**kwargs)
            self._add_arguments(parser)
            added = parser.add_method_arguments(self.trainer_class, name, skip=set(skip))
            self._subcommand_method_arguments[name] = added
            for group in parser._action_groups:  # titled by the docstring's first line, which may stop mid-sentence
                if any(action.dest in added for action in group._group_actions):
                    group.title = f"Trainer.{name}: {description.rstrip('.')}"
            self._subcommand_parsers[name] = parser
            subcommands.add_subcommand(name, parser, help=description)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The sub-commands and the Trainer method parameters each fills in itself."""
        return {name: set(skip) for name, skip in SUBCOMMANDS.items()}

    def add_default_arguments_to_parser(self, parser: ArgumentParser) -> None:
        """``--seed_everything``."""
        parser.add_argument("--seed_everything", type=bool | int, default=self.seed_everything_default,
                            help="an int seeds Python, NumPy and torch before the classes are built; true seeds with "
                                 "ACCELKIT_SEED or PL_GLOBAL_SEED, else 0 with a warning (written to the saved "
                                 "configuration); false does not seed")

    def add_core_arguments_to_parser(self, parser: ArgumentParser) -> None:
        """``--trainer.*``, ``--model`` and ``--data``."""
        add_trainer_arguments(parser, self.trainer_class)
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        parser.add_lightning_class_args(self._datamodule_class, "data", subclass_mode=self.subclass_mode_data,
                                        required=self.datamodule_class is not None)

    def add_arguments_to_parser(self, parser: ArgumentParser) -> None:
        """Override to add arguments or links (``parser.link_arguments("data.classes", "model.classes")``)."""

    def _add_arguments(self, parser: ArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            if not parser.optimizer_classes:
                parser.add_optimizer_args()
            if not parser.lr_scheduler_classes:
                parser.add_lr_scheduler_args()
        for key, (classes, link_to) in {**parser.optimizer_classes, **parser.lr_scheduler_classes}.items():
            if link_to != "AUTOMATIC":
                compute = None if isinstance(classes, tuple) else (lambda init, c=classes: class_init(init, c))
                parser.link_arguments(key, link_to, compute_fn=compute)

    def _parser(self, subcommand: str | None) -> ArgumentParser:
        return self.parser if subcommand is None else self._subcommand_parsers[subcommand]

    # ----------------------------------------------------------------- parsing and building
    def parse_arguments(self, parser: ArgumentParser, args: ArgsType) -> None:
        """Parse ``args`` into ``config`` (Lightning class paths among the words mapped to accelkit's)."""
        from accelkit.cli.saved_config import fixed_classes

        classes: dict[str, type] = {}
        for each in (parser, *self._subcommand_parsers.values()):
            classes.update(getattr(each, "fixed_classes", {}))
        with fixed_classes(classes):  # their groups also read the class_path form of saved configurations
            if isinstance(args, (dict, Namespace)):
                self.config = parser.parse_object(args)
                return
            words = sys.argv[1:] if args is None else list(args)
            self.config = parser.parse_args([translate_word(str(word)) for word in words])

    def _get(self, config: Namespace, key: str, default: object = None) -> Any:
        return config.get(str(self.subcommand), config).get(key, default)

    def _set_seed(self) -> None:
        seed = self._get(self.config, "seed_everything")
        if seed is False:
            return
        # True: the seed of ACCELKIT_SEED or PL_GLOBAL_SEED, else 0 with a warning, as Lightning's (not a random one)
        seed = seed_everything(None if seed is True else seed, workers=True)
        (self.config[self.subcommand] if self.subcommand else self.config)["seed_everything"] = seed

    def before_instantiate_classes(self) -> None:
        """Override to run code before the classes are built."""

    def instantiate_classes(self) -> None:
        """Build the model, the data module and the Trainer from ``config``."""
        self.config_init = instantiate_config(self.parser, self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self._add_configure_optimizers_method_to_model(self.subcommand)
        self.trainer = self.instantiate_trainer()

    def after_instantiate_classes(self) -> None:
        """Override to run code after the classes are built."""

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer from ``--trainer.*`` (``kwargs`` win), with the callbacks of ``trainer_defaults``, those of
        argument groups added with ``add_lightning_class_args`` and the configuration-saving callback."""
        extra = [self._get(self.config_init, key) for key in self._parser(self.subcommand).callback_keys]
        config = self._get(self.config_init, "trainer", default=Namespace())
        config = {**(config.as_dict() if isinstance(config, Namespace) else dict(config)), **kwargs}
        return self._instantiate_trainer(config, extra)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[object]) -> Trainer:
        for name, (_, default, why) in LIGHTNING_ONLY_TRAINER_ARGUMENTS.items():
            value = config.pop(name, default)
            if value != default:
                raise ConfigurationError(f"trainer.{name}={value!r} is not supported: {why}; remove it or set it "
                                         f"to {default!r}")
        given = config.get("callbacks")
        config["callbacks"] = [] if given is None else (list(given) if isinstance(given, list) else [given])
        config["callbacks"].extend(callbacks)
        persistent = self.trainer_defaults.get("callbacks")
        if persistent is not None:
            config["callbacks"].extend(persistent if isinstance(persistent, list) else [persistent])
        if self.save_config_callback is not None and not config.get("fast_dev_run"):
            config["callbacks"].append(self.save_config_callback(
                self._parser(self.subcommand), self.config.get(str(self.subcommand), self.config),
                **self.save_config_kwargs))
        return self.trainer_class(**config)

    # ----------------------------------------------------------------- optimizers
    @staticmethod
    def configure_optimizers(module: Module, optimizer: torch.optim.Optimizer,
                             lr_scheduler: SchedulerType | None = None) -> Any:
        """What the module's ``configure_optimizers`` returns when ``--optimizer`` is given; override to change
        it. A :class:`~accelkit.cli.config.ReduceLROnPlateau` steps on its ``monitor`` metric."""
        if lr_scheduler is None:
            return optimizer
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lr_scheduler,
                                                             "monitor": lr_scheduler.monitor}}
        return [optimizer], [lr_scheduler]

    def _add_configure_optimizers_method_to_model(self, subcommand: str | None) -> None:
        if not self.auto_configure_optimizers or self.model is None:
            return
        parser = self._parser(subcommand)
        optimizers = [k for k, (_, link) in parser.optimizer_classes.items() if link == "AUTOMATIC"]
        schedulers = [k for k, (_, link) in parser.lr_scheduler_classes.items() if link == "AUTOMATIC"]
        if not optimizers:
            return
        if len(optimizers) > 1 or len(schedulers) > 1:
            raise ConfigurationError(f"at most one optimizer and one lr_scheduler group can be AUTOMATIC, found "
                                     f"{optimizers + schedulers}; link the others (link_to=...) and write "
                                     "configure_optimizers yourself")
        optimizer = class_init(self._get(self.config_init, optimizers[0]), parser.optimizer_classes[optimizers[0]][0])
        if optimizer is None:
            return
        scheduler = None
        if schedulers:
            scheduler = class_init(self._get(self.config_init, schedulers[0]),
                                    parser.lr_scheduler_classes[schedulers[0]][0])
        if is_overridden("configure_optimizers", self.model, Module):
            warnings.warn(self._replaced_optimizers_message(optimizer, scheduler), UserWarning, stacklevel=2)
        self.model.configure_optimizers = ConfiguredOptimizers(self.model, optimizer, scheduler,
                                                                self.configure_optimizers)

    def _replaced_optimizers_message(self, optimizer: ClassInit, scheduler: ClassInit | None) -> str:
        """The warning when ``--optimizer`` replaces the module's own ``configure_optimizers``, in the user's names:
        the module's class, the configured classes, and the CLI class's ``configure_optimizers`` only where the
        user's CLI subclass overrides it (never accelkit's own ``CLI`` or the ``accelkit`` command's)."""
        configured = f"--optimizer {optimizer['class_path'].rsplit('.', 1)[-1]}"
        if scheduler is not None:
            configured += f" and --lr_scheduler {scheduler['class_path'].rsplit('.', 1)[-1]}"
        owner = next(klass for klass in type(self).__mro__ if "configure_optimizers" in vars(klass))
        through = "" if owner.__module__.startswith("accelkit.") else \
            f" through {owner.__name__}.configure_optimizers"
        return (f"{type(self.model).__name__}.configure_optimizers is overridden by the configuration's "
                f"{configured}{through}; leave out --optimizer to train with {type(self.model).__name__}'s own")

    # ----------------------------------------------------------------- running
    def _run_subcommand(self, subcommand: str) -> None:
        before: Callable[[], object] | None = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        method = getattr(self, subcommand, None) or getattr(self.trainer, subcommand)
        method(**self._prepare_subcommand_kwargs(subcommand))
        after = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, object]:
        given = self.config_init[subcommand]
        kwargs = {k: given[k] for k in self._subcommand_method_arguments[subcommand] if k in given}
        kwargs["model"] = self.model
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        return kwargs
