"""The Accelerator base class: what a kind of device is and how many there are.

An accelerator knows nothing about how a run is split across devices (that is the
:class:`~accelkit.Strategy`) nor about number formats (the :class:`~accelkit.Precision`). Subclasses live in
plugins; the core never names a device.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, ClassVar

import torch

from accelkit.errors import ConfigurationError


class Accelerator:
    """Base class for a kind of device.

    Class-level methods (``is_available``, ``device_count``, ``parse_devices``, ``auto_strategy``) are called
    in the parent process while a run is being resolved: they must not initialise a device runtime, so a
    worker started later can still claim its device.
    """

    #: canonical name, set by subclasses (``"cpu"``)
    name: ClassVar[str] = ""
    #: the ``torch.distributed`` backend the core's DDP strategies use on this device
    distributed_backend: ClassVar[str] = "gloo"
    #: environment variables that pin this backend's sockets to one network interface (gloo's
    #: ``GLOO_SOCKET_IFNAME`` is always set): a run whose processes accelkit starts on one machine sets each to
    #: the loopback interface, unless the user set it (docs/topology.rst, "What a run opens to the network")
    socket_interface_variables: ClassVar[tuple[str, ...]] = ()
    #: the ``device_type`` given to :class:`torch.autocast`, or ``None`` where autocast does not apply
    autocast_device_type: ClassVar[str | None] = None
    #: whether DataLoaders should pin host memory by default for this device
    pin_memory: ClassVar[bool] = False
    #: whether evaluation may run under ``torch.inference_mode()`` (``Trainer(inference_mode=True)``); a lazy
    #: device whose tensors need version counters says ``False`` and gets ``torch.no_grad()``
    supports_inference_mode: ClassVar[bool] = True
    #: whether ``torch.nn.SyncBatchNorm`` runs on this device (``Trainer(sync_batchnorm=True)``)
    supports_sync_batchnorm: ClassVar[bool] = True
    #: whether this device counts as a graphics processor for code that asks ``Module.on_gpu`` (Lightning's name;
    #: ``Module.on_graphics_processor`` in accelkit); the plugin of such a device sets it, with :attr:`device_type`
    is_graphics_processor: ClassVar[bool] = False
    #: the ``torch.device(...).type`` of this accelerator's devices, where the plugin declares it (``None``: not
    #: declared); ``graphics_processor_device_types()`` reads it
    device_type: ClassVar[str | None] = None
    #: whether ``torch.compile`` makes a fresh torch optimizer ``capturable`` on this accelerator's devices (its step
    #: counters kept on the device, so that the compiled step reads no host value), as it does on the GPUs it
    #: supports; a fit resumed under ``Trainer(compile_step=...)`` gets the same, whatever its checkpoint says
    #: (:meth:`accelkit.loops.captured.CapturedStep.as_fresh`)
    compiled_optimizer_capturable: ClassVar[bool] = False

    # ----------------------------------------------------------------- resolution (parent process)
    @classmethod
    def is_available(cls) -> bool:
        """Whether this device can be used on this machine. Never initialises a runtime."""
        return True

    @classmethod
    def unavailable_reason(cls) -> str:
        """Why :meth:`is_available` is false, with what would fix it (shown in errors and ``accelkit doctor``)."""
        return ""

    @classmethod
    def device_count(cls) -> int:
        """Number of devices of this kind visible to this process. Never initialises a runtime."""
        return 1

    @classmethod
    def parse_devices(cls, devices: object) -> list[int]:
        """Turn the user's ``devices`` value into a list of local device indices.

        The default accepts ``N`` (the first N devices), a list of indices, a string ``"0,1"`` or ``"2"``,
        and ``-1``/``"auto"`` (all visible). Raises :class:`ConfigurationError` naming the bad value.
        """
        return parse_device_indices(devices, cls.device_count(), cls.name or cls.__name__)

    @classmethod
    def auto_strategy(cls, num_devices: int, num_nodes: int) -> str:
        """The strategy name ``strategy="auto"`` means for this device."""
        return "single_device" if num_devices * num_nodes == 1 else "ddp_spawn"

    # ----------------------------------------------------------------- runtime (worker process)
    def device(self, index: int) -> torch.device:
        """The ``torch.device`` for local device ``index``."""
        raise NotImplementedError(f"{type(self).__name__} must implement device(index)")

    def setup_device(self, device: torch.device) -> None:
        """Claim ``device`` for this process (called first thing in each worker)."""

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """Device statistics (memory and the like) that loggers may record. Empty by default."""
        return {}

    def teardown(self) -> None:
        """Release what :meth:`setup_device` claimed."""

    def is_out_of_memory(self, error: BaseException) -> bool:
        """Whether ``error`` says this device ran out of memory (the batch-size tuner then tries a smaller
        batch instead of failing). ``False`` here: each plugin recognises its own runtime's errors."""
        return False

    def rng_state(self) -> dict[str, Any]:
        """This device's random-generator states, for checkpoints that resume exactly: a mapping of plain data
        (tensors, numbers) that ``torch.load(weights_only=True)`` reads back. Its keys join the host's (``torch``,
        ``python``, ``numpy``), so choose names that cannot clash (the CUDA plugin uses ``"cuda"``). Empty by
        default: the device has no generator of its own, or it is seeded from torch's."""
        return {}

    def set_rng_state(self, states: dict[str, Any]) -> None:
        """Put back what :meth:`rng_state` returned. ``states`` is the whole saved mapping (host entries included);
        a missing key, or a state saved with another device count, is left alone. Nothing by default."""

    def configure_determinism(self, deterministic: bool | str | None, benchmark: bool | None) -> None:
        """Apply ``Trainer(deterministic=..., benchmark=...)`` in the worker before the run starts.

        torch's own switch (``torch.use_deterministic_algorithms``) is set by the core; this hook sets what the
        device needs besides (CUDA: ``CUBLAS_WORKSPACE_CONFIG`` and cuDNN's benchmark mode). The default has no
        benchmark mode and says so when one is asked for."""
        if benchmark:
            warnings.warn(f"Trainer(benchmark=True) has no effect on the {self.name or type(self).__name__!r} "
                          "accelerator: it has no kernel benchmark mode.", UserWarning, stacklevel=2)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def graphics_processor_device_types() -> set[str]:
    """The ``device_type`` of every :class:`Accelerator` class imported in this process that says
    :attr:`~Accelerator.is_graphics_processor` (what ``Module.on_gpu`` asks outside a run)."""
    found: set[str] = set()
    pending = list(Accelerator.__subclasses__())
    seen: set[type] = set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        pending.extend(cls.__subclasses__())
        if cls.is_graphics_processor and cls.device_type:
            found.add(cls.device_type)
    return found


_INTEGER = re.compile(r"[+-]?[0-9]+")


def parse_device_indices(devices: object, available: int, accelerator: str) -> list[int]:
    """Parse a ``devices`` specification against ``available`` visible devices (see
    :meth:`~accelkit.Accelerator.parse_devices`)."""
    allowed = (
        "an int N >= 1 (the first N devices), -1 or 'auto' (all), a list of distinct indices such as [0, 2], "
        "or a string such as '0,1'"
    )
    original = devices
    if isinstance(devices, str):
        text = devices.strip().lower()
        if text in ("auto", "-1"):
            devices = -1
        elif "," in text or text.startswith("["):
            inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
            parts = [p.strip() for p in inner.split(",")]
            if parts and not parts[-1]:
                parts.pop()  # "2," is the list [2]
            if "[" in inner or "]" in inner or not all(_INTEGER.fullmatch(p) for p in parts):
                raise ConfigurationError(f"devices={original!r} is not understood; use {allowed}.")
            devices = [int(p) for p in parts]
        else:
            if not _INTEGER.fullmatch(text):  # int() would also take "1_0" and non-ASCII digits
                raise ConfigurationError(f"devices={original!r} is not understood; use {allowed}.")
            devices = int(text)
    if isinstance(devices, bool) or devices is None:
        raise ConfigurationError(f"devices={original!r} is not understood; use {allowed}.")
    if isinstance(devices, int):
        if devices == -1:
            if available < 1:
                raise ConfigurationError(
                    f"devices={original!r} asks for every {accelerator} device, but none is visible.")
            return list(range(available))
        if devices < 1:
            raise ConfigurationError(f"devices={original!r} must be at least 1 (or -1/'auto' for all); use {allowed}.")
        if devices > available:
            raise ConfigurationError(
                f"devices={original!r} asks for {devices} {accelerator} devices but {available} "
                f"{'is' if available == 1 else 'are'} visible (indices {list(range(available))})."
            )
        return list(range(devices))
    if isinstance(devices, (list, tuple)):
        if not devices:
            raise ConfigurationError(f"devices={original!r} is empty; use {allowed}.")
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
            raise ConfigurationError(f"devices={original!r} must hold integer indices; use {allowed}.")
        if len(set(devices)) != len(devices):
            raise ConfigurationError(f"devices={original!r} names a device twice; use distinct indices.")
        bad = [d for d in devices if d < 0 or d >= available]
        if bad:
            raise ConfigurationError(
                f"devices={original!r}: {accelerator} device index {bad[0]} does not exist; "
                f"visible indices are {list(range(available))}."
            )
        return list(devices)
    raise ConfigurationError(f"devices={original!r} (a {type(original).__name__}) is not understood; use {allowed}.")
