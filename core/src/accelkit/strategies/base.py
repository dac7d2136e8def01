"""The :class:`Strategy` base: how one run is laid out over devices and processes, device-neutral (it talks to
the device only through the accelerator and the precision); :class:`RunContext` and :class:`StepRouter`."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar, cast

import torch
from torch import nn

from accelkit.checkpoint import files as ckpt
from accelkit.utilities.apply_func import move_to_device

if TYPE_CHECKING:
    from accelkit.accelerator import Accelerator
    from accelkit.environments.base import ClusterEnvironment
    from accelkit.precision import Precision
    from accelkit.strategies.launchers.base import Launcher

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")

NULL_CONTEXT = contextlib.nullcontext()


class Strategy:
    """Base class: how the module, the data and the optimizer are laid out, and how processes talk.

    A strategy is configured in the parent process (:meth:`connect`), then :meth:`launch` runs the Trainer's
    work on every process through the strategy's :attr:`launcher` (in place, for single-process strategies).
    Inside a worker the Trainer calls :meth:`setup_runtime` first, then :meth:`setup_environment`,
    :meth:`setup_module`, :meth:`batch_to_device`, :meth:`backward`, :meth:`optimizer_step`, :meth:`step_end`,
    the collectives, and finally :meth:`teardown`.

    **Topology.** A strategy states its process layout separately from its devices:
    :attr:`processes_per_node` and :attr:`devices_per_process` (one process per device for DDP; one process over
    every local device for an SPMD strategy), and :attr:`data_parallel_size`/:attr:`data_parallel_rank`, which
    decide how the data is sharded. :attr:`world_size` counts *processes*, as ``trainer.world_size`` does in
    Lightning. See ``docs/topology.rst``.

    :param options: strategy options (from the record or the user).
    """

    #: canonical name, filled in from the record that chose this class
    name: str = ""
    #: how long a collective may wait for the other processes before the run fails, in seconds; the Trainer sets
    #: it from ``Trainer(collective_timeout=...)``
    collective_timeout_s: float = 600.0

    def __init__(self, **options: Any) -> None:
        self.options = options
        # (None until connect(), which the composition calls before anything uses them)
        self.accelerator: Accelerator = cast("Accelerator", None)
        self.precision: Precision = cast("Precision", None)
        self.devices: list[int] = [0]
        self.num_nodes = 1
        self._local_rank = 0
        self._node_rank = 0
        #: the cluster environment detected when the run was composed (torchrun, SLURM, ...), or ``None`` for a
        #: plain process; set by the resolver before :meth:`connect`
        self.cluster_environment: ClusterEnvironment | None = None
        #: what the Trainer is launching (stage and root folder); set right before :meth:`launch`
        self.run_context = RunContext()
        self._launcher: Launcher | None = None

    # ----------------------------------------------------------------- composition (parent)
    def connect(self, accelerator: Accelerator, devices: list[int], num_nodes: int, precision: Precision) -> None:
        """Receive the resolved accelerator, device indices, node count and precision."""
        self.accelerator = accelerator
        self.devices = list(devices)
        self.num_nodes = num_nodes
        self.precision = precision

    def validate(self) -> list[str]:
        """Problems with this composition (each a sentence naming the value and what works)."""
        return []

    # ----------------------------------------------------------------- topology
    @property
    def processes_per_node(self) -> int:
        """How many processes take part on each node: one per device by default."""
        return len(self.devices)

    @property
    def devices_per_process(self) -> int:
        """How many devices each process drives: one by default; all of the node's for an SPMD strategy."""
        return 1

    @property
    def world_size(self) -> int:
        """Number of processes taking part, across nodes (``trainer.world_size``)."""
        return self.processes_per_node * self.num_nodes

    @property
    def local_rank(self) -> int:
        """Index of this process among those on its node."""
        return self._local_rank

    @property
    def node_rank(self) -> int:
        """Index of this node."""
        return self._node_rank

    @property
    def global_rank(self) -> int:
        """Index of this process among all."""
        return self._node_rank * self.processes_per_node + self._local_rank

    @property
    def is_global_zero(self) -> bool:
        """Whether this is the process that writes files and prints."""
        return self.global_rank == 0

    @property
    def data_parallel_size(self) -> int:
        """Into how many parts the data is split: one per process by default. A strategy whose processes each
        shard the batch over their own devices (SPMD) counts processes, not devices."""
        return self.world_size

    @property
    def data_parallel_rank(self) -> int:
        """Which part of the data this process reads (``0 .. data_parallel_size - 1``)."""
        return self.global_rank

    @property
    def root_device(self) -> torch.device:
        """The device this process computes on (computed once per local rank)."""
        rank = self.local_rank
        cached = self.__dict__.get("_root_device")
        if cached is None or cached[0] != rank:
            cached = self.__dict__["_root_device"] = (rank, self.accelerator.device(self.devices[rank]))
        return cached[1]

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas``/``rank`` for the data sampler (from :attr:`data_parallel_size` and
        :attr:`data_parallel_rank`), or ``None`` when every process reads all data."""
        if self.data_parallel_size <= 1:
            return None
        return {"num_replicas": self.data_parallel_size, "rank": self.data_parallel_rank}

    # ----------------------------------------------------------------- launching
    @property
    def stage(self) -> str | None:
        """The stage being launched (``"fit"``, ``"validate"``, ``"test"``, ``"predict"``): ``run_context.stage``."""
        return self.run_context.stage

    @property
    def root_dir(self) -> Path | None:
        """The Trainer's ``default_root_dir`` for the run being launched: ``run_context.root_dir``."""
        return self.run_context.root_dir

    def create_launcher(self) -> Launcher:
        """The :class:`~accelkit.strategies.launchers.base.Launcher` this strategy's runs go through. In place by
        default;
        strategies that start processes return a :class:`~accelkit.strategies.launchers.spawn.SpawnLauncher` (or their
        own)."""
        from accelkit.strategies.launchers.in_place import InPlaceLauncher

        return InPlaceLauncher()

    @property
    def launcher(self) -> Launcher:
        """The launcher, created by :meth:`create_launcher` on first use (after :meth:`connect`)."""
        if self._launcher is None:
            self._launcher = self.create_launcher()
        return self._launcher

    @property
    def launches_workers(self) -> bool:
        """Whether the launcher starts workers of its own: the Trainer then sends the trained weights and
        results back to the caller's objects."""
        return bool(self.launcher.launches_workers)

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run ``function`` in every worker through :attr:`launcher` and return the global-zero worker's result
        (a :class:`~accelkit.strategies.launchers.result.WorkerResult` for the Trainer's work)."""
        return self.launcher.launch(self, function, *args, **kwargs)

    def worker_init(self, index: int) -> None:
        """Called in each worker a :class:`~accelkit.strategies.launchers.spawn.SpawnLauncher` started, right after it
        unpickled
        its copy of the run and before the work: ``index`` is the worker's local index. Set the rank here."""
        self._local_rank = index

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_launcher"] = None  # the workers need no launcher of their own (and it may hold the parent's state)
        return state

    # ----------------------------------------------------------------- lifecycle (worker)
    def setup_runtime(self) -> None:
        """First call in every worker, before anything reads :attr:`root_device`: configure the device runtime
        (an SPMD strategy switches torch_xla to SPMD mode here). Nothing by default."""

    def setup_environment(self) -> None:
        """Prepare this process: claim the device, join the process group."""
        self.accelerator.setup_device(self.root_device)

    def module_to_device(self, module: nn.Module) -> nn.Module:
        """Move ``module`` to :attr:`root_device`, then run its ``on_post_move_to_device`` hook.

        Weights tied before the move stay tied: a move to a device whose tensors cannot share storage with
        the CPU's replaces every parameter object, so the ties found before the move are re-made after it.
        If the hook then changes the number of distinct parameters, a warning says so.
        """
        before = len(list(module.parameters()))
        ties = _tied_parameter_names(module)
        module.to(self.root_device)
        for names in ties:
            shared = module.get_parameter(names[0])
            for name in names[1:]:
                owner, _, attribute = name.rpartition(".")
                setattr(module.get_submodule(owner), attribute, shared)
        hook = getattr(module, "on_post_move_to_device", None)
        if callable(hook):
            hook()
        after = len(list(module.parameters()))
        if before != after:
            warnings.warn(
                f"The model had {before} distinct parameters before the move to {self.root_device} and {after} "
                "after it: weights that were tied are no longer shared. Tie them again in the module's "
                "`on_post_move_to_device` hook.",
                UserWarning,
                stacklevel=2,
            )
        return module

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move and convert ``module``; return the object the Trainer calls (a wrapper, for DDP)."""
        module = self.module_to_device(module)
        return self.precision.convert_module(module)

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's module inside whatever :meth:`setup_module` returned."""
        while isinstance(model, (nn.parallel.DistributedDataParallel, StepRouter)):
            model = model.module
        return model

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Prepare an optimizer created for the moved module."""
        return optimizer

    def process_dataloader(self, dataloader: Iterable[object], stage: str) -> Iterable[object]:
        """Wrap a DataLoader for this device (a prefetching device loader, say). Identity by default. A wrapper keeps
        the DataLoader as its ``loader`` attribute, where the loops find its sampler to give it the epoch
        (:data:`~accelkit.strategies.sampler.WRAPPED_LOADER_ATTRIBUTES`)."""
        return dataloader

    def batch_to_device(self, batch: _T) -> _T:
        """Move a batch to :attr:`root_device`; non-tensor items pass through unchanged."""
        device = self.root_device
        return move_to_device(batch, device, non_blocking=bool(self.accelerator.pin_memory))

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate (through the precision, which may scale the loss)."""
        self.precision.backward(loss)

    def pre_manual_backward(self, model: nn.Module, loss: torch.Tensor) -> None:
        """Called before each backward pass of manual optimization (``self.manual_backward``), which runs inside
        the step's forward pass; a wrapper that syncs gradients during backward gets ready for it here."""

    def sync_buffers(self, model: nn.Module) -> None:
        """Before a manual-optimization step (which does not run inside the wrapper's forward): make the
        module's buffers agree across processes as the wrapper's forward would have."""

    def reduce_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Average gradients across replicas before the optimizer step (DDP does this during backward)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool | None:
        """Step the optimizer; ``False`` if the precision skipped the step, ``None`` if it cannot tell without a host
        sync (:meth:`~accelkit.Precision.optimizer_step`). Gradients are already reduced."""
        return self.precision.optimizer_step(optimizer)

    def step_end(self) -> None:
        """Called after every optimizer step (a lazy device cuts its graph here)."""

    def no_backward_sync(self, model: nn.Module, enabled: bool) -> contextlib.AbstractContextManager[object]:
        """Skip gradient synchronisation inside this context (used while accumulating gradients); a null
        context where there is nothing to skip."""
        return NULL_CONTEXT

    # ----------------------------------------------------------------- collectives
    def reduce(self, value: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """Reduce ``value`` across processes (``"mean"``, ``"sum"``, ``"max"``, ``"min"``)."""
        return value

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Gather ``tensor`` from every process along a new first dimension."""
        return tensor.unsqueeze(0)

    def barrier(self, name: str | None = None) -> None:
        """Wait until every process gets here."""

    def broadcast(self, obj: _T, src: int = 0) -> _T:
        """Send a picklable object from ``src`` to every process."""
        return obj

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:  # noqa: A002 - Lightning's name
        """Agree on ``decision`` across processes (one process here: the decision itself; the parallel strategies
        combine every process's, see :class:`~accelkit.strategies.parallel.ParallelStrategy`)."""
        return bool(decision)

    # ----------------------------------------------------------------- checkpoints
    def module_state_dict(self, model: nn.Module) -> dict[str, object]:
        """What a checkpoint's ``"state_dict"`` holds for ``model`` (the object :meth:`setup_module` returned, or
        the user's module): the unwrapped module's ``state_dict()``. A sharding strategy returns its shards."""
        return self.unwrap(model).state_dict()

    def optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, object]:
        """What a checkpoint holds for ``optimizer``: its ``state_dict()``. A sharding strategy returns shards."""
        return optimizer.state_dict()

    def full_state_dict(self, model: nn.Module) -> dict[str, object]:
        """The complete weights of ``model`` (on global zero at least), sent back to the caller's module after a
        spawned fit. :meth:`module_state_dict` by default; a sharding strategy gathers its shards."""
        return self.module_state_dict(model)

    def full_optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, object]:
        """The complete state of ``optimizer`` in ``optimizer.state_dict()``'s form, sent back to the caller after a
        spawned fit: :meth:`optimizer_state_dict` by default; a sharding strategy gathers its shards."""
        return self.optimizer_state_dict(model, optimizer)

    def end_run(self) -> None:
        """A Fabric run has ended in this process (the launched function returned, or the script that called
        ``launch()`` without one is ending): the place for what a strategy reports at the end. Nothing by default;
        the Trainer's runs end with :meth:`teardown`."""

    #: whether :meth:`setup_module` accepts a module created on the meta device and materialises it (a sharding
    #: strategy: after sharding, so each process allocates only its shards); ``Fabric.init_module(empty_init=True)``
    #: creates modules on the meta device only for such a strategy
    materializes_meta_modules: bool = False

    #: whether a checkpoint is read after :meth:`setup_module` (into the set-up module: a sharding strategy reads
    #: each process's shards) rather than before it, into the plain module
    restore_checkpoint_after_setup: bool = False

    #: whether every process holds the whole model and optimizer state (data-parallel replicas), so that one
    #: process can write a complete checkpoint alone, without a collective: what a run under a launcher that
    #: restarts it does when a peer is lost (:mod:`accelkit.loops.survivor`). ``False`` for a sharding strategy
    replicates_state: bool = False

    def load_module_state_dict(self, model: nn.Module, state_dict: dict[str, object],
                               strict: bool = True) -> object:
        """Load a checkpoint's ``"state_dict"`` into ``model`` (the plain module, or the set-up one when
        :attr:`restore_checkpoint_after_setup`): the unwrapped module's ``load_state_dict``."""
        return self.unwrap(model).load_state_dict(state_dict, strict=strict)

    def load_optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                                  state: dict[str, object]) -> None:
        """Load one of a checkpoint's ``"optimizer_states"`` into ``optimizer`` (a state keyed by parameter names,
        as sharded checkpoints hold it, is numbered first)."""
        from accelkit.checkpoint.sharded import optimizer_state_by_index

        optimizer.load_state_dict(optimizer_state_by_index(state))

    def save_checkpoint(self, checkpoint: dict[str, object], path: str | os.PathLike) -> None:
        """Write ``checkpoint`` atomically, from the global-zero process only; every process waits for it."""
        if self.is_global_zero:
            ckpt.atomic_save(ckpt.to_cpu(checkpoint), path)
        self.barrier("save_checkpoint")

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        """Remove the checkpoint at ``path`` (a file, a link or a sharded directory), from the global-zero process
        only, as Lightning's ``Strategy.remove_checkpoint``: a callback dropping a checkpoint it no longer keeps
        (``ModelCheckpoint``'s top-k, Lightning's own ``ModelCheckpoint`` too) calls it on every process.

        Only a checkpoint is removed (a ``torch.save`` file, a sharded checkpoint folder, or a symbolic link, which
        alone goes): anything else at ``path`` (a folder or file a checkpoint's state named) is kept, with a warning
        naming it (:func:`~accelkit.checkpoint.paths.is_checkpoint_file`)."""
        from accelkit.checkpoint import paths
        from accelkit.checkpoint import sharded as distributed_checkpoint

        if not self.is_global_zero:
            return
        if os.path.lexists(path) and not os.path.islink(path) and not paths.is_checkpoint_file(path):
            warnings.warn(f"remove_checkpoint({os.fspath(path)!r}) removed nothing: it is neither a checkpoint file "
                          "(torch.save's zip format) nor a sharded checkpoint folder; a callback asked to remove what "
                          "it did not write.", UserWarning, stacklevel=2)
            return
        distributed_checkpoint.remove(path)

    def load_checkpoint(self, path: str | os.PathLike, weights_only: bool = True) -> dict[str, object]:
        """Read a checkpoint onto the CPU: a file, or a whole sharded checkpoint directory (any world size)."""
        from accelkit.checkpoint import sharded as distributed_checkpoint

        if distributed_checkpoint.is_sharded_checkpoint(path):
            return distributed_checkpoint.load_full(path, weights_only=weights_only)
        distributed_checkpoint.check_complete(path)  # part of a sharded one: the missing file is named
        return ckpt.load(path, weights_only=weights_only)

    def teardown(self) -> None:
        """Undo :meth:`setup_environment`."""
        self.accelerator.teardown()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, devices={self.devices}, num_nodes={self.num_nodes})"


@dataclass
class RunContext:
    """What the Trainer is launching, passed to the strategy (:attr:`~accelkit.Strategy.run_context`) rather than
    guessed.

    :param stage: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"`` (``None`` before the first launch).
    :param root_dir: the Trainer's ``default_root_dir`` (a place for the strategy's own files).
    :param outlives_launch: the run goes on after ``launch`` returns (``Fabric.launch()`` without a function: the
        script itself is the work); :meth:`~accelkit.Strategy.end_run` is then called when the script ends.
    """

    stage: str | None = None
    root_dir: Path | None = None
    outlives_launch: bool = False


def _tied_parameter_names(module: nn.Module) -> list[list[str]]:
    """Groups of parameter names that refer to one shared parameter object (only groups of two or more)."""
    groups: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def _switching_to_hooks(
        method: Callable[Concatenate[nn.Module, _P], _R]) -> Callable[Concatenate[DirectCallModule, _P], _R]:
    """``method`` (one of ``nn.Module``'s hook registrations), for a :class:`DirectCallModule`: the instance
    becomes its :attr:`~DirectCallModule.hooked_class` first, so that its calls run the hook from then on."""

    def register(self: DirectCallModule, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return method(self.use_hooks(), *args, **kwargs)

    register.__name__ = register.__qualname__ = method.__name__
    register.__doc__ = f":meth:`torch.nn.Module.{method.__name__}`; calls run the module's hooks from then on."
    return register


class DirectCallModule(nn.Module):
    """Mixin for a module whose class is called without ``nn.Module.__call__``'s hook machinery (its ``__call__``
    is its forward, or close to it: a call once per step costs no more than the forward itself) until something
    needs that machinery: registering a hook on it (``register_forward_pre_hook``, ``register_forward_hook``,
    ``register_full_backward_hook``...) makes the instance its :attr:`hooked_class`, called through
    ``nn.Module.__call__``, which runs the hook. Module hooks registered globally
    (``torch.nn.modules.module.register_module_forward_hook``) are the subclass's own ``__call__``'s business.

    Put it first among the bases of a subclass of the :attr:`hooked_class` (it then overrides the registrations of
    ``nn.Module``): :class:`StepRouter` and the Fabric's module wrapper (:mod:`accelkit.fabric.wrappers`).
    """

    #: what an instance becomes when a hook is registered on it: the class it derives from, called through
    #: ``nn.Module.__call__``
    hooked_class: ClassVar[type[nn.Module]]

    def use_hooks(self) -> nn.Module:
        """This instance, from now on called through ``nn.Module.__call__`` (its :attr:`hooked_class`)."""
        object.__setattr__(self, "__class__", self.hooked_class)
        return self

    register_forward_pre_hook = _switching_to_hooks(nn.Module.register_forward_pre_hook)
    register_forward_hook = _switching_to_hooks(nn.Module.register_forward_hook)
    register_full_backward_pre_hook = _switching_to_hooks(nn.Module.register_full_backward_pre_hook)
    register_full_backward_hook = _switching_to_hooks(nn.Module.register_full_backward_hook)
    register_backward_hook = _switching_to_hooks(nn.Module.register_backward_hook)


class StepRouter(nn.Module):
    """Routes ``router("training_step", batch, idx)`` to the module's method through ``forward``.

    A wrapper such as DistributedDataParallel only sees work done through its ``forward``; wrapping this
    router (rather than the module) lets the Trainer call ``training_step`` while ``self(x)`` inside it still
    means the user's ``forward``.

    The wrapper calls the router once per step: that call goes straight to ``forward``, without
    ``nn.Module.__call__``'s hook machinery, as long as no hook is registered on the router (the user's module,
    called as ``self(x)``, runs its own hooks as usual): a new router is a :class:`DirectCallModule` subclass of
    this class. Registering a hook (``register_forward_pre_hook``, ``register_forward_hook``,
    ``register_full_backward_hook``...) makes it a plain :class:`StepRouter`, called through ``nn.Module.__call__``,
    so the hook runs; module hooks registered globally (``torch.nn.modules.module.register_module_forward_hook``)
    reach the user's module, not the router.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        # the same module, also as a plain attribute: read every step without nn.Module.__getattr__ (a submodule
        # is found only through it)
        object.__setattr__(self, "routed", module)
        if type(self) is StepRouter:  # called directly until a hook is registered (the class docstring)
            object.__setattr__(self, "__class__", _DirectStepRouter)

    def forward(self, method: str, *args: object, **kwargs: object) -> object:
        if kwargs:  # (a step's call has none: the call without merging them, one instruction less a step)
            return getattr(self.routed, method)(*args, **kwargs)
        return getattr(self.routed, method)(*args)


class _DirectStepRouter(DirectCallModule, StepRouter):
    """A :class:`StepRouter` with no hook registered on it: its call is the forward itself (see
    :class:`StepRouter`)."""

    hooked_class = StepRouter
    # the wrapper's call, once per step
    __call__ = StepRouter.forward
