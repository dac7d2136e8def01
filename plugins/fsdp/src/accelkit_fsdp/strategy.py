"""``FSDPStrategy``: parameters, gradients and optimizer state sharded over processes with PyTorch's FSDP2
(:func:`torch.distributed.fsdp.fully_shard`).

Device-neutral: the process-group backend is the accelerator's ``distributed_backend`` (gloo on the CPU, nccl on
CUDA) and the device mesh is built on the accelerator's device type. Checkpoints are sharded directories written
through :mod:`torch.distributed.checkpoint` (:mod:`accelkit.checkpoint.sharded`), loadable at any world size.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from accelkit import checkpoint as ckpt
from accelkit.checkpoint import sharded as dcp_io
from accelkit.errors import ConfigurationError
from accelkit.records import load_target
from accelkit.strategies import DDPStrategy, LocalRendezvous, find_free_port
from accelkit.strategies.rendezvous import rendezvous_store

#: the precision names FSDP maps to its mixed-precision policy: (parameter/compute dtype, gradient-reduce dtype)
PRECISIONS: dict[str, tuple[torch.dtype | None, torch.dtype | None]] = {
    "32-true": (None, None),
    "bf16-mixed": (torch.bfloat16, torch.float32),
    "16-mixed": (torch.float16, torch.float32),
}

#: the methods of the user's module that run FSDP's forward hooks (parameters gathered around the whole step)
_STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


class FSDPStrategy(LocalRendezvous, DDPStrategy):
    """Fully sharded data parallel (FSDP2): each of N processes holds 1/N of every parameter, gradient and
    optimizer state, gathers a layer's parameters just before computing with it and frees them after.

    Launch: from a plain ``python script.py`` it starts one process per device itself (as ``ddp_spawn`` does);
    when a launcher (torchrun, ``srun``...) started the processes, it joins them instead. After ``fit`` the
    caller's module holds the trained full weights.

    :param auto_wrap_policy: which sub-modules become their own FSDP unit (gathered and freed on their own):
        module classes (classes or ``"package.module:Class"`` strings), an int (every module holding at least
        that many parameters not already in a unit), or ``None`` (only the root). The root module is sharded
        last and holds what no unit took.
    :param activation_checkpointing: module classes (or strings) whose activations are recomputed in backward
        instead of stored.
    :param cpu_offload: keep the sharded parameters, gradients and optimizer step on the CPU
        (:class:`torch.distributed.fsdp.CPUOffloadPolicy`).
    :param reshard_after_forward: free gathered parameters after each unit's forward (``True``, less memory) or
        keep them for backward (``False``, fewer all-gathers).
    :param save_distributed_checkpoint: ``True`` (default): checkpoints are sharded directories, every process
        writes its own shards; ``False``: the full state is gathered and global zero writes one file.
    :param timeout_s: the process group's timeout.

    The precision is mapped to FSDP's :class:`~torch.distributed.fsdp.MixedPrecisionPolicy`: ``bf16-mixed``
    computes with bfloat16 parameters and reduces gradients in float32, ``16-mixed`` likewise with float16,
    ``32-true`` keeps float32. The module's ``*_step`` methods run inside FSDP's forward hooks, so parameters
    may be read anywhere in them.
    """

    OPTIONS = ("auto_wrap_policy", "activation_checkpointing", "cpu_offload", "reshard_after_forward",
               "save_distributed_checkpoint", "timeout_s")

    #: ``Fabric.init_module(empty_init=True)`` creates modules on the meta device; :meth:`setup_module` shards them,
    #: then gives each process storage for its shards only and initialises them (``reset_parameters``)
    materializes_meta_modules = True
    #: each process holds its shards only: no process can write the whole state alone (after a lost peer the
    #: run keeps its last periodic checkpoint, see docs/elastic.rst)
    replicates_state = False

    def __init__(self, auto_wrap_policy: Any = None, activation_checkpointing: Any = None, cpu_offload: bool = False,
                 reshard_after_forward: bool = True, save_distributed_checkpoint: bool = True,
                 timeout_s: float = 1800.0, **options: Any) -> None:
        if options:
            raise ConfigurationError(
                f"unknown fsdp option(s) {sorted(options)}; the fsdp strategy accepts: {list(self.OPTIONS)}")
        super().__init__(timeout_s=timeout_s)
        self.auto_wrap_policy = _wrap_policy(auto_wrap_policy)
        self.activation_checkpointing = _classes(activation_checkpointing, "activation_checkpointing")
        self.cpu_offload = bool(cpu_offload)
        self.reshard_after_forward = bool(reshard_after_forward)
        self.save_distributed_checkpoint = bool(save_distributed_checkpoint)
        self._spawns = True
        self._module: nn.Module | None = None

    # ----------------------------------------------------------------- composition and launch
    def connect(self, accelerator: Any, devices: list[int], num_nodes: int, precision: Any) -> None:
        """Decide once, in the caller's process, whether to start the processes or join a launcher's."""
        super().connect(accelerator, devices, num_nodes, precision)
        self._spawns = self._launcher_env() is None

    def _launcher_env(self) -> Any:
        """The launcher environment DDP would join (its ``cluster_environment``), or ``None``."""
        return DDPStrategy.launcher_environment(self)

    def launcher_environment(self) -> Any:
        """``None`` when this strategy starts its own processes, else the launcher environment it joins."""
        return None if self._spawns else super().launcher_environment()

    def validate(self) -> list[str]:
        problems = []
        name = self.precision.name if self.precision is not None else "32-true"
        if name not in PRECISIONS:
            problems.append(f"strategy 'fsdp' maps the precision to FSDP's mixed-precision policy and knows "
                            f"{sorted(PRECISIONS)}, not precision={name!r}; use one of those.")
        elif name == "16-mixed":
            problems.append("strategy 'fsdp' with precision='16-mixed' is refused for now: float16 needs a gradient "
                            "scaler whose skip-this-step decision every rank shares (torch's ShardedGradScaler), "
                            "and the precision plugin's scaler decides on each rank's shards alone, so ranks could "
                            "skip different steps. Use precision='bf16-mixed' (no scaler needed).")
        if self._spawns and self.num_nodes != 1:
            problems.append(f"strategy 'fsdp' started from a plain process starts processes on this machine only; "
                            f"for num_nodes={self.num_nodes} start every node with torchrun (or srun): it then "
                            "joins them.")
        elif not self._spawns:
            problems += super().validate()
        return problems

    def create_launcher(self) -> Any:
        """A :class:`~accelkit.strategies.launchers.spawn.SpawnLauncher` of one process per device, or, when a launcher
        started
        the processes, an :class:`~accelkit.strategies.launchers.in_place.ExternalLauncher` that joins them."""
        from accelkit.strategies.launchers import SpawnLauncher

        return SpawnLauncher(len(self.devices)) if self._spawns else DDPStrategy.create_launcher(self)

    def _init_process_group(self) -> None:
        # FSDP needs a process group even for one process (its device mesh is built on it).
        if self.world_size == 1 and dist.is_available() and not dist.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(find_free_port()))
            timeout = self.timeout_s if self.timeout_s is not None else self.collective_timeout_s
            store = rendezvous_store(0, 1, timeout, spans_machines=False)  # listens where MASTER_ADDR says
            dist.init_process_group(backend=self.accelerator.distributed_backend, rank=0, world_size=1,
                                    store=store)
            self._owns_process_group = True
            return
        super()._init_process_group()

    # ----------------------------------------------------------------- the module
    def mixed_precision_policy(self) -> Any:
        """The :class:`~torch.distributed.fsdp.MixedPrecisionPolicy` for this run's precision."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        name = self.precision.name if self.precision is not None else "32-true"
        if name not in PRECISIONS:
            raise ConfigurationError(self.validate())
        param_dtype, reduce_dtype = PRECISIONS[name]
        return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype if param_dtype else None)

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move the module, checkpoint the chosen activations, shard the auto-wrap units, then the root."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, fully_shard, register_fsdp_forward_method

        if isinstance(module, FSDPModule):  # sharded by an earlier stage of this process (under a launcher)
            self._module = module
            return module
        if not _on_meta(module):  # a meta-device module gets its storage after sharding, on every process
            module = self.module_to_device(module)
        if self.activation_checkpointing:
            from torch.distributed._composable import checkpoint

            for sub in list(module.modules()):
                if sub is not module and isinstance(sub, self.activation_checkpointing):
                    checkpoint(sub)
        mesh = init_device_mesh(self.root_device.type, (self.world_size,))
        kwargs: dict[str, Any] = {"mesh": mesh, "mp_policy": self.mixed_precision_policy(),
                                  "reshard_after_forward": self.reshard_after_forward}
        if self.cpu_offload:
            # pinned host memory needs a device runtime (CUDA); on a CPU-only run there is nothing to pin
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=self.root_device.type == "cuda")
        for sub in self._units(module):
            fully_shard(sub, **kwargs)
        fully_shard(module, **kwargs)
        materialize_after_sharding(module, self.root_device)
        for method in _STEP_METHODS:
            original = getattr(module, method, None)
            if callable(original):
                register_fsdp_forward_method(module, method)
                _keep_signature(getattr(module, method), original)
        self._module = module
        return module

    def _units(self, module: nn.Module) -> list[nn.Module]:
        """The sub-modules the auto-wrap policy makes units of, deepest first (children before parents)."""
        policy = self.auto_wrap_policy
        if policy is None:
            return []
        if isinstance(policy, int):
            taken: set[int] = set()
            units = []
            for sub in reversed(list(module.modules())):  # post-order: children before their parents
                if sub is module:
                    continue
                count = sum(p.numel() for p in sub.parameters() if id(p) not in taken)
                if count >= policy:
                    units.append(sub)
                    taken.update(id(p) for p in sub.parameters())
            return units
        return [sub for sub in reversed(list(module.modules())) if sub is not module and isinstance(sub, policy)]

    def no_backward_sync(self, model: nn.Module, enabled: bool) -> Any:
        """While accumulating: no reduce-scatter, each process keeps its unsharded gradients until the step."""
        return _no_sync(model) if enabled and hasattr(model, "set_requires_gradient_sync") else \
            contextlib.nullcontext()

    # ----------------------------------------------------------------- checkpoint state
    def module_state_dict(self, model: nn.Module) -> dict[str, Any]:
        """This process's shards (DTensors), or the full weights (on every process) without sharded saving."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = not self.save_distributed_checkpoint
        return get_model_state_dict(self.unwrap(model),
                                    options=StateDictOptions(full_state_dict=full, cpu_offload=full))

    def optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's state keyed by parameter names (sharded, or full without sharded saving)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        full = not self.save_distributed_checkpoint
        return get_optimizer_state_dict(self.unwrap(model), optimizer,
                                        options=StateDictOptions(full_state_dict=full, cpu_offload=full))

    def full_state_dict(self, model: nn.Module) -> dict[str, Any]:
        """The complete weights on the CPU, gathered from every process (a collective: every process calls it)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.unwrap(model),
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def full_optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The complete optimizer state in the usual (index-keyed) form, gathered from every process."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        state = get_optimizer_state_dict(self.unwrap(model), optimizer,
                                         options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return dcp_io.optimizer_state_by_index(state)

    @staticmethod
    def _sharded_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(module, optimizer)

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        """Checkpoints load into the sharded module (each process reads the shards it owns now)."""
        return True

    def load_module_state_dict(self, model: nn.Module, state_dict: dict[str, Any], strict: bool = True) -> Any:
        """Load weights into the sharded module: shards (DTensors) in place, or full tensors sharded here."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        full = not any(_is_dtensor(v) for v in state_dict.values())
        return set_model_state_dict(self.unwrap(model), state_dict,
                                    options=StateDictOptions(full_state_dict=full, strict=strict))

    def load_optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                                  state: dict[str, Any]) -> None:
        """Load optimizer state saved sharded (names and DTensors) or whole (``optimizer.state_dict()``)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        module = self.unwrap(model)
        if isinstance(state, dcp_io.DeferredState):
            key = str(state.index)
            template = {"optimizer_states": {key: self._sharded_optimizer_state(module, optimizer)}}
            state = dcp_io.load_into(state.path, template, state.weights_only)["optimizer_states"][key]
        if dcp_io.keyed_by_index(state):
            state = dcp_io.optimizer_state_by_name(state, module, optimizer)
        options = StateDictOptions(full_state_dict=_whole_optimizer_state(state))
        set_optimizer_state_dict(module, optimizer, state, options=options)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
        """A sharded checkpoint directory written by every process (atomically), or one file from global zero
        when ``save_distributed_checkpoint=False``."""
        if self.save_distributed_checkpoint:
            dcp_io.save(checkpoint, path, barrier=self.barrier, broadcast=self.broadcast,
                        is_global_zero=self.is_global_zero)
            return
        if self.is_global_zero:
            checkpoint = dict(checkpoint)
            checkpoint["optimizer_states"] = [dcp_io.optimizer_state_by_index(s)
                                              for s in checkpoint.get("optimizer_states", [])]
            ckpt.atomic_save(ckpt.to_cpu(checkpoint), path)
        self.barrier("save_checkpoint")

    def load_checkpoint(self, path: str | os.PathLike, weights_only: bool = True) -> dict[str, Any]:
        """A sharded directory: its non-tensor parts, the weights read into the sharded module (resharded to this
        run's world size), the optimizer state deferred until the optimizers exist. A file: read whole."""
        if not dcp_io.is_sharded_checkpoint(path) or self._module is None:
            return super().load_checkpoint(path, weights_only)
        checkpoint = dcp_io.load_metadata(path, weights_only=weights_only)
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        template = {"state_dict": get_model_state_dict(self._module)}  # this run's shards, filled in place
        checkpoint["state_dict"] = dcp_io.load_into(path, template, weights_only)["state_dict"]
        count = int(checkpoint.pop(dcp_io.OPTIMIZER_COUNT_KEY, -1))
        if count >= 0:
            checkpoint["optimizer_states"] = [dcp_io.DeferredState(str(path), i, weights_only) for i in range(count)]
        return checkpoint

    def teardown(self) -> None:
        """Forget the module, then leave the process group of spawned workers. Under a launcher the process group
        stays: the caller's module is still sharded over it, and ``strategy.full_state_dict(model)``,
        ``trainer.save_checkpoint`` and later stages (``trainer.test``) use it."""
        self._module = None
        if not self._spawns:
            self._owns_process_group = False
        super().teardown()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(devices={self.devices}, num_nodes={self.num_nodes}, "
                f"auto_wrap_policy={self.auto_wrap_policy!r}, cpu_offload={self.cpu_offload})")


def materialize_after_sharding(module: nn.Module, device: torch.device) -> None:
    """Give a sharded module created on the meta device (``Fabric.init_module(empty_init=True)``) real storage on
    ``device`` and initialise it: each sub-module holding meta tensors runs its ``reset_parameters`` once, in module
    order, on full-size parameters of which each process keeps its own shard. With the same seed the weights equal
    those of a module created normally (whose constructors initialise in that order), while no process ever holds
    more than one sub-module's full parameters. A module without meta tensors is left as it is.

    :raises ConfigurationError: a sub-module with meta tensors has no ``reset_parameters`` (nothing to initialise
        it with), named with what would work.
    """
    pending = [(name, sub) for name, sub in module.named_modules()
               if any(t.is_meta for t in (*sub.parameters(recurse=False), *sub.buffers(recurse=False)))]
    if not pending:
        return
    missing = [name or type(module).__name__ for name, sub in pending if not callable(getattr(sub, "reset_parameters",
                                                                                               None))]
    if missing:
        raise ConfigurationError(f"init_module(empty_init=True) under strategy 'fsdp': the sub-module(s) {missing} "
                                 "hold meta-device tensors but define no reset_parameters(), so they cannot be "
                                 "initialised after sharding; give them a reset_parameters() method, or create the "
                                 "module with empty_init=False (or load a checkpoint into it before setup).")
    module.to_empty(device=device)
    with torch.no_grad():
        for _, sub in pending:
            _reset_full_size(sub)


def _on_meta(module: nn.Module) -> bool:
    """Whether any parameter or buffer of ``module`` is on the meta device."""
    return any(t.is_meta for t in (*module.parameters(), *module.buffers()))


def _reset_full_size(sub: nn.Module) -> None:
    """Run ``sub.reset_parameters()`` on full-size stand-ins for its sharded parameters, then keep this process's
    shard of each (cut locally: every process computed the same full values from the same random stream)."""
    from torch.distributed.tensor import distribute_tensor

    sharded = {name: param for name, param in sub.named_parameters(recurse=False) if _is_dtensor(param)}
    for name, param in sharded.items():
        local = param.to_local()
        sub._parameters[name] = nn.Parameter(torch.empty(param.shape, dtype=local.dtype, device=local.device),
                                             requires_grad=param.requires_grad)
    try:
        sub.reset_parameters()
        for name, param in sharded.items():
            full = sub._parameters[name]
            assert full is not None
            shard = distribute_tensor(full.detach(), param.device_mesh, param.placements, src_data_rank=None)
            param.to_local().copy_(shard.to_local())
    finally:
        for name, param in sharded.items():
            sub._parameters[name] = param


def _keep_signature(wrapped: Any, original: Any) -> None:
    """Let ``inspect.signature`` of the wrapped bound method show the original's parameters (the Trainer reads
    them to decide whether ``batch_idx`` is passed); torch's wrapper, bound again, would hide one."""
    import inspect

    function = getattr(wrapped, "__func__", None)
    if function is None:
        return
    signature = inspect.signature(original)
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    function.__signature__ = signature.replace(parameters=[self_parameter, *signature.parameters.values()])


@contextlib.contextmanager
def _no_sync(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _whole_optimizer_state(state: dict[str, Any]) -> bool:
    """Whether optimizer ``state`` holds whole (unsharded) per-parameter tensors that torch must shard on loading.

    A sharded state holds DTensors; a state with no tensor of one or more dimensions (plain SGD without momentum
    keeps none, an optimizer may keep only scalar step counts) has nothing to shard, and torch's whole-state path
    refuses it (it asserts it found the device of a tensor to shard), so it is loaded as this process's own."""
    values = [t for s in state.get("state", {}).values() for t in s.values() if isinstance(t, torch.Tensor)]
    return not any(_is_dtensor(t) for t in values) and any(t.dim() > 0 for t in values)


def _is_dtensor(value: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def _classes(value: Any, option: str) -> tuple[type, ...]:
    """Module classes from a class, a ``"package.module:Class"`` string, or a list of them."""
    if value is None or value == () or value == []:
        return ()
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    classes = []
    for item in items:
        try:
            cls = load_target(item)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigurationError(f"fsdp option {option}={item!r} names no importable class ({exc}); give module "
                                     "classes or 'package.module:Class' strings") from None
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise ConfigurationError(f"fsdp option {option}={item!r} is not a torch.nn.Module subclass; give module "
                                     "classes or 'package.module:Class' strings")
        classes.append(cls)
    return tuple(classes)


def _wrap_policy(value: Any) -> Any:
    """``None``, a minimum parameter count (int), or a tuple of module classes."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigurationError(f"fsdp option auto_wrap_policy={value} must be a parameter count >= 1, module "
                                     "classes, or None")
        return value
    return _classes(value, "auto_wrap_policy")
