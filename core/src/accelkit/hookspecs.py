"""Hook specifications: the contract between the accelkit core and its plugins.

A plugin is any object or module carrying functions marked with :data:`accelkit.hookimpl` whose names
match the specifications below. Installed plugins are found through the ``accelkit`` entry-point group;
others are passed to ``Trainer(plugins=[...])``.

Rules that keep this contract stable (see ``docs/plugins.rst``):

* Every hook is prefixed ``accelkit_``. A misspelt hook name is rejected when the plugin registers.
* An implementation may accept a *subset* of a specification's arguments, so a specification can gain an
  argument in a minor API version without breaking existing plugins.
* ``accelkit_register_*`` hooks return a list of records (:mod:`accelkit.records`); the core flattens them,
  normalises names once and refuses a name claimed twice.
* Hooks marked ``firstresult`` stop at the first implementation that returns something other than ``None``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from collections.abc import Iterable

    from torch.utils.data import Dataset, IterableDataset, Sampler

    from accelkit.records import (
        AcceleratorRecord,
        CallbackRecord,
        ClusterEnvironmentRecord,
        CommandRecord,
        LoggerRecord,
        PrecisionRecord,
        ProfilerRecord,
        RunConfig,
        StrategyRecord,
    )

PROJECT_NAME = "accelkit"

#: Version of this hook contract. Plugins declare the range they support in a module-level
#: ``ACCELKIT_API`` string (a :pep:`440` specifier such as ``">=1.0,<2"``).
HOOK_API_VERSION = "1.3"

#: the entry-point group installed plugins announce themselves in
ENTRY_POINT_GROUP = "accelkit"
#: set (to anything) to skip entry-point discovery: only plugins passed to the Trainer load
DISABLE_AUTOLOAD_ENV = "ACCELKIT_DISABLE_PLUGIN_AUTOLOAD"
#: a comma-separated list of plugin names not to load (``Trainer(plugins=["no:NAME"])`` does the same per run)
BLOCK_ENV = "ACCELKIT_BLOCK_PLUGINS"
#: which distribution loads when two claim one entry-point name: ``"NAME=DISTRIBUTION,..."``
PREFER_ENV = "ACCELKIT_PREFER"

#: Decorator marking a hook *specification* of the ``accelkit`` project (used in this module only).
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Decorator marking a plugin's hook *implementation*: ``@accelkit.hookimpl`` on a function named like a
#: specification (``accelkit_register_accelerators``...); ``tryfirst``/``trylast`` order it.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def accelkit_register_accelerators() -> list[AcceleratorRecord]:
    """Name the accelerators this plugin provides.

    :return: a list of :class:`~accelkit.records.AcceleratorRecord`. Each names an
        :class:`~accelkit.Accelerator` subclass (or an ``"module:Class"`` string, imported only when the
        accelerator is used), its aliases, and its priority for ``accelerator="auto"``.

    Called once per plugin manager. Must be cheap: importing a device runtime here is a bug, because
    discovery runs in every process, including a parent that is about to spawn workers.
    """


@hookspec
def accelkit_register_strategies() -> list[StrategyRecord]:
    """Name the strategies this plugin provides.

    :return: a list of :class:`~accelkit.records.StrategyRecord`. A record says on which accelerators the
        strategy runs (``accelerators=None``: on any), so two plugins may register the same strategy name for
        different accelerators (``ddp_spawn`` for ``cpu`` and for another device).
    """


@hookspec
def accelkit_register_precisions() -> list[PrecisionRecord]:
    """Name the precisions this plugin provides.

    :return: a list of :class:`~accelkit.records.PrecisionRecord`. As with strategies, a record names the
        accelerators it applies to, so ``"16-mixed"`` can mean float16 autocast on one device and bfloat16 on
        another.
    """


@hookspec
def accelkit_register_cluster_environments() -> list[ClusterEnvironmentRecord]:
    """Name the cluster environments (schedulers, launchers) this plugin can recognise.

    :return: a list of :class:`~accelkit.records.ClusterEnvironmentRecord`. Each names an
        :class:`~accelkit.environments.base.ClusterEnvironment` subclass (or a ``"module:Class"`` string) and its
        detection priority. When a run is composed, the environments are asked highest priority first (ties by
        name); the first whose ``detect(env)`` answers ``True`` describes the process (its ranks, world size and
        rendezvous address), and ``strategy="auto"`` then joins the processes its launcher started.

    Added in hook API 1.1. Detection reads only the environment mapping it is given: it must not start a device
    runtime or talk to the network.
    """


@hookspec(firstresult=True)
def accelkit_default_strategy(config: RunConfig) -> str | None:
    """Choose the strategy name for ``strategy="auto"``.

    :param config: the run being composed; ``config.accelerator`` is resolved, ``config.devices`` parsed,
        ``config.strategy`` is ``"auto"``.
    :return: a registered strategy name, or ``None`` to let the next implementation (ultimately the
        accelerator's :meth:`~accelkit.Accelerator.auto_strategy`) decide. Stops at first non-None result.
    """


@hookspec
def accelkit_validate_config(config: RunConfig) -> list[str] | None:
    """Report problems with a fully resolved run before anything starts.

    :param config: the resolved run (accelerator, devices, strategy and precision names, number of nodes).
    :return: a list of human-readable problems (each naming the bad value and what would work), or ``None``.

    The core collects the problems of every plugin and raises them together in one
    :class:`~accelkit.ConfigurationError`; nothing has been spawned or initialised at that point.
    """


@hookspec(firstresult=True)
def accelkit_distributed_sampler(
    dataset: Dataset[object],
    sampler: Sampler[int] | Iterable[int],
    shuffle: bool,
    num_replicas: int,
    rank: int,
    seed: int,
    stage: str,
) -> Iterable[int] | None:
    """Return the sampler a rank should use in a distributed run.

    :param dataset: the DataLoader's dataset.
    :param sampler: the sampler the user's DataLoader had (a ``SequentialSampler``/``RandomSampler`` for plain
        loaders, or the user's own sampler); for a loader built with ``batch_sampler=``, that batch sampler's
        ``sampler``, whose answer the batches are then drawn from.
    :param shuffle: whether the data should be shuffled (``True`` for training with a random sampler).
    :param num_replicas: the number of ranks reading data.
    :param rank: this rank's index among them.
    :param seed: the base seed; shuffling must be identical on every rank and change with each epoch.
    :param stage: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
    :return: a sampler (it should have ``set_epoch(epoch)`` if it shuffles), or ``None`` to defer.
        Stops at first non-None result. The core's own implementation runs last. Not called for a loader whose
        sampler already knows its rank (a ``DistributedSampler`` the user built): that loader is used as given.
    """


@hookspec(firstresult=True)
def accelkit_shard_iterable(dataset: IterableDataset[object], num_replicas: int, rank: int, stage: str
                            ) -> IterableDataset[object] | None:
    """Return the part of a stream (an ``IterableDataset``) a rank should read in a distributed run.

    :param dataset: the DataLoader's ``IterableDataset``.
    :param num_replicas: the number of ranks reading data.
    :param rank: this rank's index among them.
    :param stage: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
    :return: an ``IterableDataset`` that yields only this rank's items (the loader is rebuilt around it, every
        other setting kept), or ``None`` to defer. Stops at first non-None result. Without an answer the core
        leaves the stream whole and warns that every rank reads all of it. The loader's workers each run the
        returned dataset's ``__iter__``: split by ``torch.utils.data.get_worker_info()`` there too, or every worker
        of a rank reads the rank's whole part.

    Added in hook API 1.3. Asked under the same conditions as ``accelkit_distributed_sampler``, for the loaders that
    hook is not asked about because their dataset is an ``IterableDataset``.
    """


@hookspec(historic=True)
def accelkit_configure(manager: pluggy.PluginManager) -> None:
    """Called once when the plugin registers, with the :class:`~accelkit.plugins.manager.PluginManager`.

    :param manager: the manager; a plugin may read ``manager.blocked`` or register helper plugins.
        Historic: a plugin registered late still receives the call.
    """


@hookspec
def accelkit_translate_arguments(arguments: dict[str, object]) -> None:
    """Rewrite Trainer arguments before resolution (legacy spellings such as a device-specific ``*_cores=``).

    :param arguments: a mutable dict with the keys ``accelerator``, ``devices``, ``strategy``, ``precision``,
        ``num_nodes`` and ``extra`` (a dict of keyword arguments the Trainer does not know). An implementation
        pops the ``extra`` keys it understands and sets the others accordingly, printing a deprecation note
        if it likes. Keys left in ``extra`` afterwards make the Trainer raise ``TypeError``.
    """


@hookspec
def accelkit_environment_variables() -> dict[str, str] | None:
    """Name the environment variables that matter to this plugin's devices, for ``accelkit doctor``.

    :return: a dict mapping a variable name to a one-line description; a name ending in ``*`` stands for every
        variable with that prefix (``"SLURM_*"``). ``accelkit doctor`` shows each one's current value (or that it
        is unset). Must not import a device runtime.
    """


@hookspec
def accelkit_diagnose(environ: dict[str, str]) -> list[str] | None:
    """Report problems with this machine's setup, each with its fix, for ``accelkit doctor``.

    :param environ: a copy of the process environment.
    :return: human-readable problems, each naming what is wrong and how to fix it (a legacy variable set without
        its replacement, say), or ``None``. Must not initialise a device runtime.
    """


@hookspec
def accelkit_register_loggers() -> list[LoggerRecord]:
    """Name the experiment loggers (trackers) this plugin provides.

    :return: a list of :class:`~accelkit.records.LoggerRecord`. Each names an :class:`~accelkit.loggers.Logger`
        subclass (or a ``"module:Class"`` string, imported only when the logger is used) and its aliases, so that
        ``Trainer(logger="mlflow")``, ``logger=["csv", "mlflow"]`` and ``--trainer.logger mlflow`` build it. A
        logger chosen by name is constructed as ``cls(save_dir=<default_root_dir>)``.

    Added in hook API 1.1. Must be cheap: importing the tracker's package here is a bug.
    """


@hookspec
def accelkit_register_commands() -> list[CommandRecord]:
    """Name the sub-commands of the ``accelkit`` command this plugin provides (``accelkit NAME ...``).

    :return: a list of :class:`~accelkit.records.CommandRecord`: a name, a help line, a function adding the
        command's options to an :mod:`argparse` parser and a function running it (either may be a
        ``"module:function"`` string, imported only when the command is used).

    Added in hook API 1.2. Called every time ``accelkit`` starts, before its parser is built, so it must be cheap.
    A name the core uses (``fit``, ``plugins``, ``doctor`` ...) stays the core's: a plugin claiming it is reported
    by ``accelkit plugins`` and ``accelkit doctor`` and its command is left out. If the hook raises, the plugin is
    reported as failed and every other command keeps working.
    """


@hookspec
def accelkit_register_callbacks() -> list[CallbackRecord]:
    """Name the callbacks this plugin provides, so users can ask for them by name.

    :return: a list of :class:`~accelkit.records.CallbackRecord`: a name, an :class:`~accelkit.Callback` subclass
        (or a ``"module:Class"`` string, imported only when the callback is used), aliases and a description.
        ``Trainer(callbacks=["ema"])`` and ``--trainer.callbacks ema`` build it as ``cls()``.

    Added in hook API 1.3. Must be cheap: import nothing heavy here.
    """


@hookspec
def accelkit_register_profilers() -> list[ProfilerRecord]:
    """Name the profilers this plugin provides, so users can ask for them by name.

    :return: a list of :class:`~accelkit.records.ProfilerRecord`: a name, an :class:`~accelkit.profilers.Profiler`
        subclass (or a ``"module:Class"`` string, imported only when the profiler is used), aliases and a
        description. ``Trainer(profiler="nvtx")`` builds it as ``cls()``; the core's ``"simple"`` and ``"pytorch"``
        stay the core's.

    Added in hook API 1.3. Must be cheap: import no profiling runtime here.
    """
