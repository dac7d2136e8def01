"""``accelkit.Fabric``: Lightning Fabric's API (bring your own loop) over the Trainer's plugins.

The run is composed by the same code as the Trainer's (:func:`~accelkit.trainer.arguments.compose_arguments`):
the same accelerators, strategies, precisions, launchers and cluster environments. What the Fabric adds is the
user-facing wrappers (:mod:`accelkit.fabric.wrappers`) and the checkpoint of a user's state dict
(:mod:`accelkit.fabric.checkpoints`).
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

import torch
from torch import nn

from accelkit.fabric import checkpoints, script_replicas
from accelkit.fabric.wrappers import FabricDataLoader, FabricModule, FabricOptimizer, unwrap
from accelkit.plugins.compose import Composition
from accelkit.plugins.manager import PluginManager, portable_plugins, resolve_plugins
from accelkit.precision import TruePrecision
from accelkit.strategies.sampler import distribute_dataloader, seed_workers
from accelkit.trainer.arguments import compose_arguments, plugin_arguments
from accelkit.utilities.apply_func import apply_to_tensors
from accelkit.utilities.seed import seed_from_environment

if TYPE_CHECKING:
    from accelkit.accelerator import Accelerator
    from accelkit.loggers.base import Logger
    from accelkit.precision import Precision
    from accelkit.strategies.base import Strategy

_T = TypeVar("_T")
_R = TypeVar("_R")
_P = ParamSpec("_P")

_REDUCE_OPS = ("mean", "sum", "max", "min")


class Fabric:
    """Scale a training loop you write yourself: Lightning Fabric's API, run by accelkit's plugins.

    :param accelerator: ``"cpu"``, any name a plugin provides, an :class:`~accelkit.Accelerator`, or ``"auto"``.
    :param strategy: ``"ddp"``, ``"ddp_spawn"``, ``"fsdp"``... (any strategy a plugin provides), a
        :class:`~accelkit.Strategy` instance, or ``"auto"``. With ``"ddp"`` and no launcher (torchrun, srun),
        :meth:`launch` starts the other processes by running the script again.
    :param devices: how many devices, which ones, or ``"auto"``.
    :param num_nodes: number of machines.
    :param precision: ``"32-true"`` (default), ``"bf16-mixed"``, ``"16-mixed"``, ``"64-true"``... as the
        accelerator's plugins provide.
    :param plugins: as the Trainer's ``plugins=``: strategy or precision names and instances, a cluster
        environment, plugin objects, ``"no:NAME"`` to block an installed plugin.
    :param callbacks: objects whose methods :meth:`call` calls by name (one or a list).
    :param loggers: loggers :meth:`log` and :meth:`log_dict` write to (one or a list; see
        :mod:`accelkit.fabric.loggers`).
    """

    def __init__(self, *, accelerator: str | Accelerator = "auto", strategy: str | Strategy = "auto",
                 devices: int | str | list[int] = "auto", num_nodes: int = 1, precision: str | int | None = None,
                 plugins: object = None, callbacks: object = None,
                 loggers: Logger | list[Logger] | tuple[Logger, ...] | None = None) -> None:
        from accelkit.strategies.launchers.script import follow_parent

        self._blocked, names, self._plugin_objects = plugin_arguments(plugins)
        self._manager: PluginManager | None = None
        self._register_plugin_objects()
        given = {"accelerator": accelerator, "strategy": strategy, "devices": devices, "num_nodes": num_nodes,
                 "precision": precision}
        settings = settings_from_command_line(given)
        self._settings, self._plugin_names = settings, names
        outer = script_replicas.current()  # set in a worker that runs the script again (launch() on XLA...)
        #: this Fabric is the script's own in such a worker: it adopts the worker's run, set up already
        self._script_worker = outer is not None
        self._composition: Composition = (
            compose_fabric(self.plugin_manager, names, self._plugin_objects, **settings) if outer is None
            else outer._worker_composition(settings))
        #: the step's calls as :meth:`_step_calls` decides them for this composition (``None``: not decided yet)
        self._plain_calls: tuple[Callable[[torch.Tensor], None], bool] | None = None
        #: what :meth:`backward` calls without a frame of its own: ``Tensor.backward`` where the step is plain
        #: (:meth:`_step_calls`) and no accumulation window divides the loss; ``None``: :meth:`_backward` decides
        self._plain_backward: Callable[[torch.Tensor], None] | None = None
        #: the set-up optimizers, told how to step (:meth:`FabricOptimizer.follow`) when the plan or the window changes
        self._optimizer_wrappers: list[FabricOptimizer] = []
        self._callbacks: list[object] = _as_list(callbacks)
        self._loggers: list[Logger] = _as_list(loggers)
        self._launched = False
        self._environment_ready = self._script_worker
        self._ends_at_exit = False  # _end_run is registered with atexit
        self._run_ended = False
        #: what the strategy returned for each set-up module
        self._forward_modules: list[nn.Module] = []
        #: the set-up module each set-up optimizer's parameters belong to (a sharding strategy needs both)
        self._optimizer_modules: dict[int, nn.Module] = {}
        self._backward_since_step = False
        self._warned: set[str] = set()
        #: the set-up loader being iterated most recently (what :meth:`gather_for_metrics` and :meth:`accumulate`
        #: read: its last batch, its sampler's padding)
        self.active_loader: FabricDataLoader | None = None
        self._accumulating = False
        self._accumulation: dict[int, int] = {}
        self._loss_divisor = 1
        follow_parent()  # a process a ScriptLauncher started ends when its starter is gone
        if self._loggers:  # rows buffered in a logger reach its files when the script ends
            script_replicas.at_end(self._save_loggers)

    def _save_loggers(self) -> None:
        for logger in self._loggers:
            save = getattr(logger, "save", None)
            if callable(save):
                save()

    # ----------------------------------------------------------------- plugins (as the Trainer's)
    @property
    def plugin_manager(self) -> PluginManager:
        """The plugin manager (rebuilt inside each spawned worker)."""
        if self._manager is None:
            self._manager = PluginManager(blocked=self._blocked)
        return self._manager

    def _register_plugin_objects(self) -> None:
        from accelkit.environments.base import ClusterEnvironment
        from accelkit.precision import Precision
        from accelkit.strategies.base import Strategy

        for obj in self._plugin_objects:
            if not isinstance(obj, (Strategy, Precision, ClusterEnvironment)):
                self.plugin_manager.add_plugin(obj)

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_manager"] = None  # pluggy managers hold modules; workers rebuild theirs
        state["_optimizer_wrappers"] = []  # (set up in the process that runs the loop)
        state["_plugin_objects"] = portable_plugins(self._plugin_objects)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._plugin_objects = resolve_plugins(self._plugin_objects)
        self._register_plugin_objects()

    # ----------------------------------------------------------------- properties
    @property
    def accumulating(self) -> bool:
        """Whether the batch being run is an accumulation step of :meth:`accumulate` (no step, no sync)."""
        return self._accumulating

    @accumulating.setter
    def accumulating(self, value: bool) -> None:
        self._set_window(bool(value), self._loss_divisor)

    @property
    def strategy(self) -> Strategy:
        """The :class:`~accelkit.Strategy` of the run."""
        return self._composition.strategy

    @property
    def accelerator(self) -> Accelerator:
        """The :class:`~accelkit.Accelerator` of the run."""
        return self._composition.accelerator

    @property
    def precision(self) -> Precision:
        """The :class:`~accelkit.Precision` of the run."""
        return self._composition.strategy.precision

    @property
    def device(self) -> torch.device:
        """The device this process computes on."""
        return self.strategy.root_device

    @property
    def global_rank(self) -> int:
        """This process's index among all processes."""
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        """This process's index among the processes of its node."""
        return self.strategy.local_rank

    @property
    def node_rank(self) -> int:
        """This node's index."""
        return self.strategy.node_rank

    @property
    def world_size(self) -> int:
        """How many processes take part."""
        return self.strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        """Whether this is global rank 0."""
        return self.strategy.is_global_zero

    @property
    def loggers(self) -> list[Logger]:
        """Every logger given to the Fabric."""
        return self._loggers

    @property
    def logger(self) -> Logger | None:
        """The first logger (``None`` without one)."""
        return self._loggers[0] if self._loggers else None

    # ----------------------------------------------------------------- launching
    @overload
    def launch(self, function: None = None) -> None: ...

    @overload
    def launch(self, function: Callable[Concatenate[Fabric, _P], _R], *args: _P.args, **kwargs: _P.kwargs) -> _R: ...

    def launch(self, function: Callable[..., _R] | None = None, *args: object, **kwargs: object) -> _R | None:
        """Start the run's processes and set each one up (process group, device).

        Without ``function``, the script itself is the work: with ``strategy="ddp"`` and no launcher, the script is
        run again once per other local rank, and every process goes on after this call; ``ddp_spawn``/``ddp_fork``
        do the same as ``"ddp"``; a strategy that starts its workers from a function (``xla_spawn``) runs the script
        file again in each worker (:mod:`~accelkit.fabric.script_replicas`) and this process exits once they end.
        With ``function``, it is called as ``function(fabric, *args, **kwargs)`` in every process and its result
        (global rank 0's) returned.
        """
        if self._launched:
            raise RuntimeError("Fabric.launch() was already called for this Fabric; call it once, at the start")
        if function is not None:
            _check_launch_function(function)
        if self._script_worker:  # the script run again in a worker: that worker is launched and set up already
            self._launched = True
            return None if function is None else function(self, *args, **kwargs)
        launcher = self.strategy.launcher
        if launcher.launches_workers and function is None and self._join_instead_of_spawning():
            launcher = self.strategy.launcher
        if launcher.launches_workers and function is None:
            self._launch_script()
        self._launched = True
        from accelkit.strategies.base import RunContext

        self.strategy.run_context = RunContext(stage=None, root_dir=None, outlives_launch=function is None)
        if function is None:
            self._end_at_exit()  # the script is the run: it ends when the script does
        return self.strategy.launch(run_launched, self, function, args, kwargs)

    def _launch_script(self) -> None:
        """``launch()`` without a function on a strategy that starts its workers from a function (XLA's replicas):
        start them running this script again (:mod:`~accelkit.fabric.script_replicas`), wait for them, and exit
        this process (raises ``SystemExit(0)``; a failed worker raises its error), so that the code after
        ``launch()`` runs in the workers only."""
        from accelkit.strategies.base import RunContext

        path = script_replicas.script_path(self.strategy.name or type(self.strategy).__name__)
        self._launched = True
        self.strategy.run_context = RunContext(stage=None, root_dir=None, outlives_launch=False)
        carrier = Fabric.__new__(Fabric)  # the workers' script makes its own callbacks and loggers
        carrier.__dict__.update(self.__dict__, _callbacks=[], _loggers=[])
        with script_replicas.main_module_hidden():
            self.strategy.launch(run_launched, carrier, script_replicas.run_script, (path,), {})
        raise SystemExit(0)

    def _worker_composition(self, settings: dict[str, object]) -> Composition:
        """The run of this worker, for the script's own ``Fabric(...)`` in it; its arguments must name the same
        run as the launching process's (a strategy or accelerator object: the same class)."""
        from accelkit.errors import ConfigurationError

        differ = [f"Fabric({name}={value!r}) in a worker, but the launching process had {self._settings[name]!r}"
                  for name, value in settings.items() if not _same_setting(value, self._settings[name])]
        if differ:
            raise ConfigurationError([*differ, "the script runs again in every worker: build the Fabric there with "
                                      "the same arguments"])
        return self._composition

    def _end_run(self) -> None:
        """Tell the strategy that this process's run has ended (what it reports at the end, it reports now); once."""
        if self._environment_ready and not self._run_ended:
            self._run_ended = True
            self.strategy.end_run()

    def _end_at_exit(self) -> None:
        """End this process's run when the script ends (``launch()`` without a function, or a script that never
        calls ``launch()``: the launcher started its processes); registered once."""
        if not self._ends_at_exit:
            self._ends_at_exit = True
            atexit.register(self._end_run)

    def _join_instead_of_spawning(self) -> bool:
        """``launch()`` without a function on a strategy that spawns its workers from a function (``ddp_spawn``,
        ``ddp_fork``, the default of several devices): compose the run again as ``"ddp"``, whose processes run the
        script itself (started here by running it again, or by a launcher); ``False`` where the strategy is no
        data-parallel one (it keeps refusing)."""
        from accelkit.strategies.ddp import DDPStrategy

        strategy = self.strategy
        if not isinstance(strategy, DDPStrategy):
            return False
        settings = {**self._settings, "strategy": "ddp"}
        self._composition = compose_fabric(self.plugin_manager, self._plugin_names, self._plugin_objects, **settings)
        self._plain_calls = None
        self._step_calls()  # the new composition's plan
        if self._settings["strategy"] != "auto" and self.strategy.is_global_zero:
            print(f"accelkit: Fabric(strategy={strategy.name!r}).launch() without a function: the script runs again "
                  "in each process, as with strategy='ddp' (give launch() a function to start the processes from it "
                  "instead)", flush=True)
        return True

    def setup_environment(self) -> None:
        """Set this process up for the run once (device runtime, process group, the rank that ``rank_zero_only``
        reads); the other methods call it when needed, :meth:`launch` first of all."""
        if self._environment_ready:
            return
        from accelkit.utilities.rank_zero import set_global_rank

        strategy = self.strategy
        launcher = strategy.launcher
        if not self._launched and strategy.world_size > 1 and (
                launcher.launches_workers or hasattr(launcher, "start_children")):
            raise RuntimeError(f"Fabric(strategy={strategy.name!r}) runs {strategy.world_size} processes: call "
                               "fabric.launch() first (it starts them)")
        strategy.setup_runtime()
        strategy.setup_environment()
        set_global_rank(strategy.global_rank)
        from accelkit.strategies.launchers import watchdog

        # from here this process runs the user's loop (not a collective): the watchdog's diagnosis of a rank that
        # does not reach a collective names it as behind, and reads its backward pass as such
        watchdog.mark(watchdog.STEP_PHASE)
        self._environment_ready = True
        if not self._launched:  # no launch(): the script is the run (its process group ends before the interpreter)
            self._end_at_exit()

    # ----------------------------------------------------------------- setup
    def setup(self, module: nn.Module, *optimizers: torch.optim.Optimizer, scheduler: object = None,
              move_to_device: bool = True) -> Any:  # Lightning's: unpacked as the call's arguments decide
        """Set up a module and its optimizers for the run: returns the wrapped module alone, or ``(module,
        *optimizers)`` (and the ``scheduler``, unchanged, last, when given)."""
        self._check_not_wrapped(module, optimizers)
        wrapped = self._setup_module(module, move_to_device, optimizers)
        if not optimizers:
            return wrapped if scheduler is None else (wrapped, scheduler)
        fabric_optimizers = [self._setup_optimizer(o, wrapped) for o in optimizers]
        return (wrapped, *fabric_optimizers) + ((scheduler,) if scheduler is not None else ())

    def setup_module(self, module: nn.Module, move_to_device: bool = True) -> FabricModule:
        """Set up a module alone (its optimizers later with :meth:`setup_optimizers`, made from the returned module's
        parameters: a sharding strategy replaces them)."""
        self._check_not_wrapped(module, ())
        return self._setup_module(module, move_to_device, ())

    @overload
    def setup_optimizers(self, optimizer: torch.optim.Optimizer, /) -> FabricOptimizer: ...

    @overload
    def setup_optimizers(self, first: torch.optim.Optimizer, second: torch.optim.Optimizer, /,
                         *optimizers: torch.optim.Optimizer) -> tuple[FabricOptimizer, ...]: ...

    def setup_optimizers(self, *optimizers: torch.optim.Optimizer) -> FabricOptimizer | tuple[FabricOptimizer, ...]:
        """Set up optimizers of an already set-up module: one wrapped optimizer, or a tuple of them."""
        self._check_not_wrapped(None, optimizers)
        if not optimizers:
            raise ValueError("setup_optimizers() needs at least one optimizer")
        wrapped = [self._setup_optimizer(o, None) for o in optimizers]
        return wrapped[0] if len(wrapped) == 1 else tuple(wrapped)

    def _check_not_wrapped(self, module: object, optimizers: Iterable[object]) -> None:
        if isinstance(module, FabricModule):
            raise ValueError("this module was already set up by Fabric.setup(); set up each module once")
        if any(isinstance(o, FabricOptimizer) for o in optimizers):
            raise ValueError("this optimizer was already set up by Fabric.setup(); set up each optimizer once")
        if module is not None and not isinstance(module, nn.Module):
            raise TypeError(f"Fabric.setup() needs a torch.nn.Module, got {type(module).__name__}")

    def _setup_module(self, module: nn.Module, move_to_device: bool,
                      optimizers: tuple[torch.optim.Optimizer, ...]) -> FabricModule:
        self.setup_environment()
        strategy = self.strategy
        names = {id(p): n for n, p in module.named_parameters()}
        if move_to_device or strategy.world_size > 1:
            if not move_to_device:
                warnings.warn(f"setup(move_to_device=False) is ignored with {strategy.world_size} processes: the "
                              f"strategy {strategy.name!r} places the module itself", UserWarning, stacklevel=3)
            forward_module = strategy.setup_module(module)
        else:
            forward_module = strategy.precision.convert_module(module)
        _rebind_parameters(module, names, optimizers)
        from accelkit.module.module import Module

        if isinstance(module, Module):
            module.fabric = self
        self._forward_modules.append(forward_module)
        return FabricModule(forward_module, module, self)

    def _setup_optimizer(self, optimizer: torch.optim.Optimizer, module: FabricModule | None) -> FabricOptimizer:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"Fabric.setup() takes torch optimizers after the module, got {type(optimizer).__name__}")
        optimizer = self.strategy.setup_optimizer(optimizer)
        owner = module.forward_module if module is not None else None
        if owner is None:
            owner = self._owner_of(optimizer)
        if owner is not None:
            self._optimizer_modules[id(optimizer)] = owner
        wrapper = FabricOptimizer(optimizer, self)
        self._optimizer_wrappers.append(wrapper)
        self._plan_fast_paths(self._plain_calls or self._step_calls())
        return wrapper

    def _owner_of(self, optimizer: torch.optim.Optimizer) -> nn.Module | None:
        """The set-up module holding the optimizer's parameters, if any."""
        first = next((p for g in optimizer.param_groups for p in g["params"]), None)
        for forward_module in self._forward_modules:
            if any(p is first for p in forward_module.parameters()):
                return forward_module
        return None

    @overload
    def setup_dataloaders(self, dataloader: Iterable[object], /, *, use_distributed_sampler: bool = True,
                          move_to_device: bool = True) -> FabricDataLoader: ...

    @overload
    def setup_dataloaders(self, first: Iterable[object], second: Iterable[object], /,
                          *dataloaders: Iterable[object], use_distributed_sampler: bool = True,
                          move_to_device: bool = True) -> list[FabricDataLoader]: ...

    def setup_dataloaders(self, *dataloaders: Iterable[object], use_distributed_sampler: bool = True,
                          move_to_device: bool = True) -> FabricDataLoader | list[FabricDataLoader]:
        """Prepare loaders for the run: each process reads its shard (a sampler of the user's is sharded, not
        replaced; one that already knows its rank is kept), workers are seeded after
        ``seed_everything(workers=True)``, and iterating moves batches to the device and gives the sampler the
        epoch. Returns one loader or a list."""
        if not dataloaders:
            raise ValueError("setup_dataloaders() needs at least one data loader")
        self.setup_environment()
        prepared = [self._setup_dataloader(d, use_distributed_sampler, move_to_device) for d in dataloaders]
        return prepared[0] if len(prepared) == 1 else prepared

    def _setup_dataloader(self, loader: Iterable[object], use_distributed_sampler: bool,
                          move_to_device: bool) -> FabricDataLoader:
        if isinstance(loader, FabricDataLoader):
            raise ValueError("this data loader was already set up by Fabric.setup_dataloaders(); set it up once")
        strategy = self.strategy
        if use_distributed_sampler:
            shards = strategy.distributed_sampler_kwargs or {"num_replicas": 1, "rank": 0}
            hooks = self.plugin_manager.hook
            # the shuffle's base seed: seed_everything's (ACCELKIT_SEED / PL_GLOBAL_SEED), as Lightning Fabric's
            loader = distribute_dataloader(loader, hooks.accelkit_distributed_sampler, shards["num_replicas"],
                                           shards["rank"], seed_from_environment(0), "fit",
                                           shard_iterable=hooks.accelkit_shard_iterable)
        loader = seed_workers(loader, strategy.global_rank)
        loader = strategy.process_dataloader(loader, "fit")
        return FabricDataLoader(loader, self.device if move_to_device else None, self)

    # ----------------------------------------------------------------- the step
    def backward(self, tensor: torch.Tensor, *args: Any, model: FabricModule | None = None, **kwargs: Any) -> None:
        """Back-propagate ``tensor`` through the strategy and the precision (a gradient scaler scales it); extra
        arguments go to ``Tensor.backward`` (``retain_graph=True``...)."""
        plain = self._plain_backward
        if plain is None or args or kwargs or model is not None:
            self._backward(tensor, args, kwargs, model)
            return
        plain(tensor)  # the plain step (no scaler: nothing reads _backward_since_step), outside a window

    def _backward(self, tensor: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any],
                  model: FabricModule | None) -> None:
        """:meth:`backward` through the strategy's and the precision's methods where they customise it."""
        if model is not None and not isinstance(model, FabricModule):
            raise TypeError(f"backward(model=...) takes a module set up with Fabric.setup(), got "
                            f"{type(model).__name__}")
        if self._loss_divisor != 1:  # inside accumulate(): each batch's share of the window's gradient
            tensor = tensor / self._loss_divisor
        if args or kwargs:
            self.precision.scale_loss(tensor).backward(*args, **kwargs)
        else:
            (self._plain_calls or self._step_calls())[0](tensor)
        self._backward_since_step = True

    def _step_calls(self) -> tuple[Callable[[torch.Tensor], None], bool]:
        """What :meth:`backward` calls, and whether :meth:`optimizer_step` may call the optimizer's own ``step``
        alone, decided once per composition: where neither the strategy nor the precision customises that part of
        the step (the plain precision on one process or DDP), the tensor's own ``backward`` and ``True``, which is
        what their default methods come down to, without their frames; else the strategy's ``backward`` and
        ``False`` (:meth:`_full_step`)."""
        from accelkit.precision import Precision
        from accelkit.strategies.base import Strategy
        from accelkit.utilities.model_helpers import is_overridden

        strategy, precision = self.strategy, self.precision
        plain_backward = not is_overridden("backward", strategy, Strategy) and not any(
            is_overridden(name, precision, Precision) for name in ("backward", "scale_loss"))
        plain_step = not getattr(precision, "use_scaler", False) and not is_overridden(
            "optimizer_step", precision, Precision) and not any(
            is_overridden(name, strategy, Strategy) for name in ("reduce_gradients", "optimizer_step", "step_end"))
        plan = (torch.Tensor.backward if plain_backward else strategy.backward, plain_step)
        self._plain_calls = plan
        self._plan_fast_paths(plan)
        return plan

    def _plan_fast_paths(self, plan: tuple[Callable[[torch.Tensor], None], bool]) -> None:
        """Set the step's paths without frames of their own from the composition's ``plan`` (:meth:`_step_calls`)
        and the accumulation window: :meth:`backward`'s, and each set-up optimizer's
        (:meth:`FabricOptimizer.follow <accelkit.fabric.wrappers.FabricOptimizer.follow>`)."""
        backward, plain_step = plan
        plain = backward is torch.Tensor.backward and plain_step and self._loss_divisor == 1
        self._plain_backward = backward if plain else None
        for wrapper in self._optimizer_wrappers:
            wrapper.follow(plain_step, self._accumulating)

    def _set_window(self, accumulating: bool, divisor: int) -> None:
        """Enter or leave an accumulation step of :meth:`accumulate` (``divisor``: each batch's share of the
        window's loss), and plan the step's fast paths for it."""
        self._accumulating, self._loss_divisor = accumulating, divisor
        self._plan_fast_paths(self._plain_calls or self._step_calls())

    def optimizer_step(self, optimizer: torch.optim.Optimizer,
                       closure: Callable[[], float] | None = None) -> float | None:
        """Step ``optimizer`` (the user's, not the wrapper) through the strategy: gradients reduced where the
        strategy does so, the precision's scaler, the strategy's step end. :meth:`FabricOptimizer.step
        <accelkit.fabric.wrappers.FabricOptimizer.step>` calls it."""
        if closure is None and (self._plain_calls or self._step_calls())[1]:
            optimizer.step()  # what the default strategy and precision do, without their frames
            self._backward_since_step = False
            return None
        return self._full_step(optimizer, closure)

    def _full_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], float] | None) -> float | None:
        """:meth:`optimizer_step` through the strategy's and the precision's methods (the scaler's check first)."""
        precision, strategy = self.precision, self.strategy
        if getattr(precision, "use_scaler", False) and not self._backward_since_step and closure is None:
            raise RuntimeError(
                f"optimizer.step() with precision={precision.name!r}, which scales the loss, but no "
                "fabric.backward(loss) since the last step: gradients from loss.backward() bypass the scaler and "
                "would be unscaled wrongly. Call fabric.backward(loss) instead of loss.backward().")
        strategy.reduce_gradients(optimizer)
        if closure is None:
            outcome: bool | float | None = strategy.optimizer_step(optimizer)
        else:
            results: list[float | None] = []
            precision.optimizer_step(optimizer, step=lambda: results.append(optimizer.step(closure)))
            outcome = results[0] if results else None
        strategy.step_end()
        self._backward_since_step = False
        return outcome if closure is not None else None

    def clip_gradients(self, module: nn.Module, optimizer: torch.optim.Optimizer | FabricOptimizer,
                       clip_val: float | None = None,
                       max_norm: float | None = None, norm_type: float = 2.0,
                       error_if_nonfinite: bool = True) -> torch.Tensor | None:
        """Clip the gradients of ``module``'s parameters by value (``clip_val``) or by their total norm
        (``max_norm``; returns that norm, over every process's shard where the strategy shards them), after the
        precision unscales them."""
        if (clip_val is None) == (max_norm is None):
            raise ValueError(f"clip_gradients(clip_val={clip_val!r}, max_norm={max_norm!r}): give exactly one of "
                             "them (clip_val clips each value, max_norm the total norm)")
        if self.accumulating:  # inside accumulate(): the window's gradients are clipped once, at its last batch
            return None
        self.precision.unscale_gradients(unwrap(optimizer))
        parameters = [p for p in unwrap(module).parameters() if p.grad is not None]
        if clip_val is not None:
            torch.nn.utils.clip_grad_value_(parameters, clip_val)
            return None
        assert max_norm is not None  # exactly one of the two was given
        total = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type,
                                               error_if_nonfinite=error_if_nonfinite)
        full = getattr(total, "full_tensor", None)  # a sharded norm (DTensor): its value over every process
        return full() if callable(full) else total

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision's context for code outside the set-up module's forward (autocast for mixed precision)."""
        return self.precision.forward_context()

    def no_backward_sync(self, module: FabricModule, enabled: bool = True) -> contextlib.AbstractContextManager:
        """Skip the gradient synchronisation of backward passes inside this context (while accumulating gradients);
        a warning says so when the strategy cannot skip it."""
        if not isinstance(module, FabricModule):
            raise TypeError(f"no_backward_sync() takes a module set up with Fabric.setup(), got "
                            f"{type(module).__name__}")
        if not enabled:
            return contextlib.nullcontext()
        context = self.strategy.no_backward_sync(module.forward_module, True)
        if isinstance(context, contextlib.nullcontext) and self.world_size > 1 and "no_sync" not in self._warned:
            self._warned.add("no_sync")
            warnings.warn(f"no_backward_sync(): strategy {self.strategy.name!r} cannot skip the gradient "
                          "synchronisation, so every backward pass in it still synchronises (correct, but no "
                          "faster)", UserWarning, stacklevel=2)
        return context

    @contextlib.contextmanager
    def accumulate(self, module: FabricModule, every: int) -> Iterator[None]:
        """Run one batch of a gradient-accumulation window of ``every`` batches (accelkit's, beyond Lightning; as
        Hugging Face Accelerate's ``accumulate``): on its accumulation steps the backward pass skips the gradient
        synchronisation and ``optimizer.step()``, ``optimizer.zero_grad()`` and :meth:`clip_gradients` do nothing;
        on the window's last batch (or the loader's last batch of the epoch) they run once, unscaling and clipping
        the whole window's gradients. Each batch's loss counts ``1/every`` of the window's. Write the loop as for
        one batch per step::

            for batch in loader:
                with fabric.accumulate(model, every=4):
                    fabric.backward(loss_of(model, batch))
                    fabric.clip_gradients(model, optimizer, max_norm=1.0)
                    optimizer.step()
                    optimizer.zero_grad()
        """
        if not isinstance(module, FabricModule):
            raise TypeError(f"accumulate() takes a module set up with Fabric.setup(), got {type(module).__name__}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"accumulate(every={every!r}): give the number of batches per optimizer step, an int >= 1")
        if self._loss_divisor != 1 or self.accumulating:
            raise RuntimeError("accumulate() is already active: one window at a time, one batch per `with` block")
        count = self._accumulation.get(id(module), 0) + 1
        loader = self.active_loader
        last = count % every == 0 or (loader is not None and loader.at_last_batch)
        self._accumulation[id(module)] = 0 if last else count
        self._set_window(not last, every)
        try:
            with self.no_backward_sync(module, enabled=not last):
                yield
        finally:
            self._set_window(False, 1)

    def gather_for_metrics(self, data: object) -> Any:  # shaped as data, numbers made tensors
        """Gather tensors (or collections of them) from every process and join them along the first dimension,
        without the samples the distributed sampler repeated to give every process as many (in the last batch of
        the epoch): each sample of the data set once, for exact distributed evaluation (accelkit's, beyond
        Lightning; Hugging Face Accelerate's ``gather_for_metrics``). One process returns ``data`` unchanged."""
        if self.world_size == 1:
            return data
        gathered = self.all_gather(data)
        loader = self.active_loader
        padding = loader.padding if loader is not None and loader.at_last_batch else 0
        keep_whole = self.world_size - padding  # ranks from here on hold a repeated sample last

        def join(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.ndim < 2:  # one value per process
                return tensor[:keep_whole] if padding else tensor
            parts = [tensor[r] if r < keep_whole else tensor[r][:-1] for r in range(tensor.shape[0])]
            return torch.cat(parts)

        return apply_to_tensors(gathered, join)

    # ----------------------------------------------------------------- creating on the device
    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Create modules directly on the device, in the precision's dtype for the true precisions.

        ``empty_init=True`` under a strategy that materialises meta-device modules (``fsdp``): the module is created
        on the meta device (no memory, no initialisation) and :meth:`setup` initialises it after sharding, each
        process allocating its shards only (sub-modules need ``reset_parameters``); the weights equal a normal
        initialisation with the same seed. Under other strategies it warns and initialises as usual."""
        self.setup_environment()
        if empty_init and getattr(self.strategy, "materializes_meta_modules", False):
            with self._default_dtype(), torch.device("meta"):
                yield
            return
        if empty_init and "empty_init" not in self._warned:
            self._warned.add("empty_init")
            warnings.warn(f"init_module(empty_init=True): strategy {self.strategy.name!r} initialises the weights "
                          "anyway (a checkpoint loaded afterwards gives the same result; only the time is not "
                          "saved); the fsdp strategy creates the module on the meta device instead", UserWarning,
                          stacklevel=3)
        with self.init_tensor():
            yield

    @contextlib.contextmanager
    def init_tensor(self) -> Iterator[None]:
        """Create tensors directly on the device, in the precision's dtype for the true precisions."""
        self.setup_environment()
        with self._default_dtype(), torch.device(self.device):
            yield

    @contextlib.contextmanager
    def _default_dtype(self) -> Iterator[None]:
        """The precision's dtype as torch's default dtype, for the true precisions; nothing otherwise."""
        precision = self.precision
        if not isinstance(precision, TruePrecision):
            yield
            return
        previous = torch.get_default_dtype()
        torch.set_default_dtype(precision.dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(previous)

    @overload
    def to_device(self, obj: nn.Module) -> nn.Module: ...

    @overload
    def to_device(self, obj: _T) -> _T: ...

    def to_device(self, obj: object) -> object:
        """Move a module, a tensor or a collection of tensors to the device."""
        if isinstance(obj, nn.Module):
            return self.strategy.module_to_device(obj)
        return self.strategy.batch_to_device(obj)

    # ----------------------------------------------------------------- processes
    @contextlib.contextmanager
    def rank_zero_first(self, local: bool = False) -> Iterator[None]:
        """Rank 0 (of the node with ``local=True``) runs the block first, the others after it (downloading data
        once, say)."""
        rank = self.local_rank if local else self.global_rank
        if rank > 0:
            self.barrier("rank_zero_first")
        yield
        if rank == 0:
            self.barrier("rank_zero_first")

    def barrier(self, name: str | None = None) -> None:
        """Wait until every process gets here."""
        self.setup_environment()
        self.strategy.barrier(name)

    def broadcast(self, obj: _T, src: int = 0) -> _T:
        """Send a picklable object from ``src`` to every process."""
        self.setup_environment()
        return self.strategy.broadcast(obj, src)

    def all_gather(self, data: object, group: object = None, sync_grads: bool = False) -> Any:  # shaped as data
        """Gather tensors (or collections of them) from every process along a new first dimension; a single
        process returns them unchanged, as Lightning's."""
        _no_group(group, "all_gather")
        if sync_grads:
            raise ValueError("all_gather(sync_grads=True) is not supported; gathered tensors carry no gradient")
        if self.world_size == 1:
            return data
        self.setup_environment()
        return apply_to_tensors(self._as_tensors(data), self.strategy.all_gather)

    def all_reduce(self, data: object, group: object = None, reduce_op: str = "mean") -> Any:  # shaped as data
        """Reduce tensors (or numbers, or collections of them) across processes: ``"mean"``, ``"sum"``, ``"max"``
        or ``"min"``."""
        _no_group(group, "all_reduce")
        op = str(reduce_op).lower()
        if op not in _REDUCE_OPS:
            raise ValueError(f"all_reduce(reduce_op={reduce_op!r}): use one of {list(_REDUCE_OPS)}")
        self.setup_environment()
        reduce = self.strategy.reduce
        return apply_to_tensors(self._as_tensors(data), lambda t: reduce(t, op))

    def _as_tensors(self, data: object) -> object:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return torch.tensor(data, device=self.device)
        if isinstance(data, Mapping):
            return {k: self._as_tensors(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return type(data)(self._as_tensors(v) for v in data)
        return data

    def print(self, *args: object, **kwargs: Any) -> None:
        """``print`` on local rank 0 only."""
        if self.local_rank == 0:
            print(*args, **kwargs)

    @staticmethod
    def seed_everything(seed: int | None = None, workers: bool | None = None, verbose: bool = True) -> int:
        """Seed Python, NumPy and torch (and, by default, the loaders' worker processes); returns the seed."""
        from accelkit.utilities.seed import seed_everything

        return seed_everything(seed, workers=True if workers is None else workers, verbose=verbose)

    # ----------------------------------------------------------------- logging and callbacks
    def log(self, name: str, value: object, step: int | None = None) -> None:
        """Log one value to every logger (from global rank 0)."""
        self.log_dict({name: value}, step=step)

    def log_dict(self, metrics: Mapping[str, object], step: int | None = None) -> None:
        """Log values (numbers or one-element tensors) to every logger (from global rank 0)."""
        if not self.is_global_zero:
            return
        values = {name: apply_to_tensors(value, lambda t: t.item() if t.numel() == 1 else t)
                  for name, value in metrics.items()}
        for logger in self._loggers:
            logger.log_metrics(values, step=step)

    def call(self, hook_name: str, *args: object, **kwargs: object) -> None:
        """Call ``hook_name`` on every callback that has it, with the keyword arguments its signature takes."""
        for callback in self._callbacks:
            method = getattr(callback, hook_name, None)
            if not callable(method):
                continue
            method(*args, **_accepted(method, kwargs))

    # ----------------------------------------------------------------- checkpoints
    def save(self, path: str | os.PathLike, state: Mapping[str, object],
             filter: Mapping[str, Callable[[str, Any], bool]] | None = None) -> None:  # noqa: A002 - Lightning's name
        """Save ``state`` (modules, optimizers and anything picklable, by name) atomically: one file, or a sharded
        checkpoint directory where the strategy shards. Every process calls it."""
        checkpoints.save(self, path, state, filter)

    def load(self, path: str | os.PathLike, state: dict[str, Any] | None = None, strict: bool = True,
             weights_only: bool | None = None) -> dict[str, Any]:
        """Load a checkpoint :meth:`save` wrote into ``state``'s modules and optimizers (others are replaced in
        ``state``); returns what the checkpoint holds beyond ``state``, or all of it without ``state``. Loads
        weights only (no arbitrary pickled objects) unless ``weights_only=False``."""
        return checkpoints.load(self, path, state, strict, weights_only)

    def load_raw(self, path: str | os.PathLike, obj: nn.Module | torch.optim.Optimizer | FabricOptimizer,
                 strict: bool = True, weights_only: bool | None = None) -> None:
        """Load a plain ``state_dict`` file (``torch.save(model.state_dict())``) into a module or optimizer."""
        checkpoints.load_raw(self, path, obj, strict, weights_only)

    def optimizer_module(self, optimizer: torch.optim.Optimizer | FabricOptimizer) -> nn.Module | None:
        """The set-up module whose parameters ``optimizer`` (wrapped or not) steps, if known."""
        return self._optimizer_modules.get(id(unwrap(optimizer)))


#: the composition arguments ``accelkit run`` sets for the script's Fabric, and the variables that carry them
COMMAND_LINE_SETTINGS = {"accelerator": "ACCELKIT_FABRIC_ACCELERATOR", "strategy": "ACCELKIT_FABRIC_STRATEGY",
                         "devices": "ACCELKIT_FABRIC_DEVICES", "num_nodes": "ACCELKIT_FABRIC_NUM_NODES",
                         "precision": "ACCELKIT_FABRIC_PRECISION"}
#: the defaults of the Fabric's composition arguments (an argument left at its default takes ``accelkit run``'s)
DEFAULTS = {"accelerator": "auto", "strategy": "auto", "devices": "auto", "num_nodes": 1, "precision": None}


def settings_from_command_line(given: Mapping[str, object]) -> dict[str, object]:
    """The composition arguments after ``accelkit run``'s options (``ACCELKIT_FABRIC_*`` variables, see
    :mod:`accelkit.cli.run_command`): an argument left at its default takes the option's value; one given otherwise
    must agree with it."""
    from accelkit.errors import ConfigurationError

    settings, problems = dict(given), []
    for name, variable in COMMAND_LINE_SETTINGS.items():
        raw = os.environ.get(variable)
        if raw is None:
            continue
        value: int | str = int(raw) if name in ("devices", "num_nodes") and raw.strip().isdigit() else raw
        mine = given[name]
        if mine != DEFAULTS[name] and str(mine) != str(value):
            problems.append(f"Fabric({name}={mine!r}) conflicts with `accelkit run --{name.replace('_', '-')} "
                            f"{raw}`; remove one of them")
        settings[name] = value
    if problems:
        raise ConfigurationError(problems)
    return settings


def compose_fabric(manager: PluginManager, plugin_names: list[str], plugin_objects: list[object], accelerator: object,
                   strategy: object, devices: object, num_nodes: object, precision: object) -> Composition:
    """The Fabric's run, composed as the Trainer's (:func:`~accelkit.trainer.arguments.compose_arguments`); when no
    launcher started this process, a :class:`~accelkit.environments.script.ScriptEnvironment` lets ``"ddp"`` start
    the other processes itself."""
    from accelkit.environments.base import ClusterEnvironment
    from accelkit.environments.detection import detect_cluster_environment
    from accelkit.environments.script import ScriptEnvironment

    objects = list(plugin_objects)
    if not any(isinstance(o, ClusterEnvironment) for o in objects) and detect_cluster_environment(manager) is None:
        objects.append(ScriptEnvironment())
    arguments = {"accelerator": accelerator, "devices": devices, "strategy": strategy, "num_nodes": num_nodes,
                 "precision": "32-true" if precision is None else precision, "extra": {}}
    return compose_arguments(manager, arguments, plugin_names, objects, [], Fabric.__init__)


def run_launched(fabric: Fabric, function: Callable[..., _R] | None, args: tuple[object, ...],
                 kwargs: dict[str, object]) -> _R | None:
    """What :meth:`Fabric.launch` runs in every process: set the process up, then the user's function."""
    fabric._launched = True  # noqa: SLF001 - a spawned worker's own copy of the Fabric
    fabric.setup_environment()
    if function is None:
        return None
    result = function(fabric, *args, **kwargs)
    fabric._end_run()  # noqa: SLF001 - the launched function was the run
    return result


def _check_launch_function(function: object) -> None:
    if not callable(function):
        raise TypeError(f"Fabric.launch(function): {function!r} is not callable")
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return
    if not parameters:
        raise TypeError(f"Fabric.launch({getattr(function, '__name__', function)}): the function is called as "
                        "function(fabric, *args); give it a first parameter for the Fabric")


def _same_setting(mine: object, theirs: object) -> bool:
    """Two values of a composition argument name the same thing: equal, or objects of one class."""
    if isinstance(mine, (str, int, float, list, tuple, type(None))):
        return bool(mine == theirs)
    return type(mine) is type(theirs)


def _as_list(value: _T | list[_T] | tuple[_T, ...] | None) -> list[_T]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _no_group(group: object, method: str) -> None:
    if group is not None:
        raise ValueError(f"{method}(group=...) is not supported: it runs over every process; leave group=None")


def _accepted(method: Callable[..., object], kwargs: dict[str, object]) -> dict[str, object]:
    """The keyword arguments ``method``'s signature takes (all of them when it takes ``**kwargs``)."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in parameters}


def _rebind_parameters(module: nn.Module, names: dict[int, str], optimizers: Iterable[torch.optim.Optimizer]) -> None:
    """Point ``optimizers``' parameter groups at ``module``'s parameters after the strategy replaced them (a
    sharding strategy, a device whose tensors cannot share the CPU's storage), matched by name; the groups stay the
    same objects, so a scheduler made before ``setup`` keeps working."""
    current = dict(module.named_parameters())
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            params = group["params"]
            for i, param in enumerate(params):
                name = names.get(id(param))
                new = current.get(name) if name is not None else None
                if new is not None and new is not param:
                    if param in optimizer.state:
                        optimizer.state[new] = optimizer.state.pop(param)
                    params[i] = new
