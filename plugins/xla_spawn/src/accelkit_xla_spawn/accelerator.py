"""The XLA accelerator: TPU cores (or any PJRT device) driven through torch_xla.

Everything a parent process calls here (:meth:`XLAAccelerator.is_available`, :meth:`~XLAAccelerator.device_count`,
:meth:`~XLAAccelerator.parse_devices`) decides from the environment and from
``importlib.util.find_spec("torch_xla")``. It never imports torch_xla: that import takes seconds, picks a
device, and a parent whose XLA runtime has started can no longer spawn replicas.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from accelkit import Accelerator
from accelkit.errors import ConfigurationError

#: environment variables that only exist on Cloud TPU VMs (or that a TPU launcher sets)
TPU_ENV_VARS = ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "TPU_NUM_DEVICES",
                "TPU_SKIP_MDS_QUERY", "TPU_PROCESS_BOUNDS")

#: PJRT_DEVICE values this plugin knows how to count without starting the runtime
KNOWN_PJRT_DEVICES = ("TPU", "CPU", "CUDA", "GPU")

_PJRT_HELP = (
    "Set PJRT_DEVICE=TPU on a Cloud TPU VM, or PJRT_DEVICE=CPU (with CPU_NUM_DEVICES=N for N replicas) to run "
    "XLA on the host CPU. XRT_TPU_CONFIG belongs to the retired XRT runtime and is ignored by torch_xla 2.x: "
    "remove it and set PJRT_DEVICE instead."
)


def tpu_device_files(root: str = "/dev") -> list[str]:
    """The TPU chip device files under ``root``: ``/dev/accel*`` (v2-v4) or ``/dev/vfio/<n>`` (v5e and later)."""
    accel = sorted(glob.glob(os.path.join(root, "accel*")))
    if accel:
        return accel
    return sorted(p for p in glob.glob(os.path.join(root, "vfio", "*")) if os.path.basename(p).isdigit())


def cores_per_chip(accelerator_type: str | None) -> int:
    """PJRT devices per TPU chip: 2 for v2/v3 (two TensorCores seen separately), 1 from v4 on (megacore or
    single-core chips). ``accelerator_type`` is the ``TPU_ACCELERATOR_TYPE`` value (``"v3-8"``)."""
    match = re.match(r"\s*v(\d+)", accelerator_type or "")
    return 2 if match and int(match.group(1)) <= 3 else 1


def local_device_count(env: Mapping[str, str], device_files: Sequence[str]) -> int:
    """Number of XLA devices this host would have, computed from ``env`` and the TPU ``device_files`` alone.

    * ``PJRT_DEVICE=CPU``: ``CPU_NUM_DEVICES`` (default 1).
    * ``PJRT_DEVICE=CUDA``/``GPU``: ``GPU_NUM_DEVICES`` (default 1).
    * A TPU: ``TPU_NUM_DEVICES`` if set; otherwise the chips (device files, or the chip ids listed in
      ``TPU_VISIBLE_CHIPS``) times :func:`cores_per_chip`.

    Returns 0 where no device can be counted.
    """
    pjrt = env.get("PJRT_DEVICE", "").strip().upper()
    if pjrt == "CPU":
        return _positive_int(env, "CPU_NUM_DEVICES", 1)
    if pjrt in ("CUDA", "GPU"):
        return _positive_int(env, "GPU_NUM_DEVICES", 1)
    if env.get("TPU_NUM_DEVICES"):
        return _positive_int(env, "TPU_NUM_DEVICES", 0)
    visible = env.get("TPU_VISIBLE_CHIPS", "").strip()
    chips = len([c for c in visible.split(",") if c.strip()]) if visible else len(device_files)
    return chips * cores_per_chip(env.get("TPU_ACCELERATOR_TYPE"))


def _positive_int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{key}={raw!r} is not an integer; set it to the number of devices (e.g. 4).") \
            from None
    if value < 1:
        raise ConfigurationError(f"{key}={raw!r} must be at least 1.")
    return value


def availability(env: Mapping[str, str], device_files: Sequence[str], torch_xla_installed: bool) -> tuple[bool, str]:
    """``(available, reason)`` for an environment; pure, so each branch is testable with a dict."""
    if not torch_xla_installed:
        return False, ("torch_xla is not installed: `pip install accelkit-xla-spawn[tpu]` (or the torch_xla wheel "
                       "matching your torch version). " + _PJRT_HELP)
    pjrt = env.get("PJRT_DEVICE", "").strip().upper()
    if pjrt and pjrt not in KNOWN_PJRT_DEVICES:
        return False, f"PJRT_DEVICE={env['PJRT_DEVICE']!r} is not one of {list(KNOWN_PJRT_DEVICES)}. " + _PJRT_HELP
    if pjrt and pjrt != "TPU":
        return True, ""
    has_tpu = bool(device_files) or bool(env.get("TPU_NUM_DEVICES"))
    if has_tpu or pjrt == "TPU":
        if local_device_count(env, device_files) < 1:
            return False, ("PJRT_DEVICE=TPU is set but no TPU chip was found (no /dev/accel* or /dev/vfio/<n> "
                           "device files, TPU_NUM_DEVICES unset). " + _PJRT_HELP)
        return True, ""
    hint = ""
    if env.get("XRT_TPU_CONFIG"):
        hint = " XRT_TPU_CONFIG is set, but XRT is retired: it is not a sign of a usable device."
    elif any(env.get(k) for k in TPU_ENV_VARS):
        hint = " TPU environment variables are set, but no TPU chip device file exists on this host."
    return False, "no TPU found (no /dev/accel* or /dev/vfio/<n>, PJRT_DEVICE unset)." + hint + " " + _PJRT_HELP


def torch_xla_installed() -> bool:
    """Whether torch_xla can be imported, without importing it."""
    return importlib.util.find_spec("torch_xla") is not None


class XLAAccelerator(Accelerator):
    """TPU cores or other PJRT devices through torch_xla (``accelerator="xla"`` or ``"tpu"``).

    ``devices`` accepts ``1`` (one core), ``N`` (N cores: every core of the host, as PJRT runs one replica per
    local device), ``[k]`` (the single core ``k``, 0-based) and ``"auto"`` (every local core).
    """

    name = "xla"
    distributed_backend = "xla"
    autocast_device_type = "xla"
    pin_memory = False
    supports_inference_mode = False  # XLA tensors made under inference mode break ("Cannot set version_counter")

    @classmethod
    def is_available(cls) -> bool:
        """A TPU is present or ``PJRT_DEVICE`` is set explicitly, and torch_xla is installed."""
        return availability(os.environ, tpu_device_files(), torch_xla_installed())[0]

    @classmethod
    def unavailable_reason(cls) -> str:
        """Why :meth:`is_available` is false, and how to set ``PJRT_DEVICE``."""
        return availability(os.environ, tpu_device_files(), torch_xla_installed())[1]

    @classmethod
    def device_count(cls) -> int:
        """Local XLA devices, from the environment only (see ``local_device_count()``)."""
        if not cls.is_available():
            return 0
        return local_device_count(os.environ, tpu_device_files())

    @classmethod
    def parse_devices(cls, devices: Any) -> list[int]:
        """``1`` -> ``[0]``; ``N`` -> all N local cores; ``[k]`` -> ``[k]``; ``"auto"`` -> all local cores."""
        return parse_xla_devices(devices, cls.device_count())

    @classmethod
    def auto_strategy(cls, num_devices: int, num_nodes: int) -> str:
        """``xla_single`` for one core on one host, ``xla_spawn`` otherwise."""
        return "xla_single" if num_devices * num_nodes == 1 else "xla_spawn"

    # ----------------------------------------------------------------- runtime (replicas)
    def device(self, index: int) -> torch.device:
        """The XLA device ``index`` of this process (imports torch_xla: call only in a replica)."""
        import torch_xla

        return torch_xla.device(index)

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """Memory figures torch_xla reports for ``device`` (bytes), where the device reports them."""
        import torch_xla.core.xla_model as xm

        try:
            info = xm.get_memory_info(device)
        except (RuntimeError, NotImplementedError):  # the CPU client has no memory statistics
            return {}
        return {f"xla_{k}": float(v) for k, v in info.items() if isinstance(v, (int, float))}


_ALLOWED = ("1 (one core), N equal to the number of local cores (one replica per core), [k] (the single core k, "
            "0-based) or 'auto' (every local core)")


def parse_xla_devices(devices: Any, available: int) -> list[int]:
    """Parse the ``devices`` value for XLA against ``available`` local cores; errors name what is allowed."""
    original = devices
    if isinstance(devices, str):
        text = devices.strip().lower()
        if text == "auto":
            if available < 1:
                raise ConfigurationError("devices='auto' found no XLA device on this host. " + _PJRT_HELP)
            return list(range(available))
        if text.isascii() and text.isdigit():
            devices = int(text)
        elif re.fullmatch(r"\[\s*\d+\s*\]", text):
            devices = [int(text.strip("[] "))]
        else:
            raise ConfigurationError(f"devices={original!r} is not valid for the xla accelerator; use {_ALLOWED}.")
    if isinstance(devices, int) and not isinstance(devices, bool):
        if devices == 1:
            if available < 1:
                raise ConfigurationError("devices=1 asks for an XLA device but none was found. " + _PJRT_HELP)
            return [0]
        if devices > 1 and devices == available:
            return list(range(devices))
        if devices > 1:
            raise ConfigurationError(
                f"devices={original!r}: PJRT runs one replica on every local core, and this host has {available} "
                f"XLA device{'s' if available != 1 else ''}; use {_ALLOWED}."
                + (" With PJRT_DEVICE=CPU, CPU_NUM_DEVICES sets the number of cores." if
                   os.environ.get("PJRT_DEVICE", "").upper() == "CPU" else "")
            )
        raise ConfigurationError(f"devices={original!r} is not valid for the xla accelerator; use {_ALLOWED}.")
    if isinstance(devices, (list, tuple)):
        if len(devices) == 1 and isinstance(devices[0], int) and not isinstance(devices[0], bool):
            core = devices[0]
            if 0 <= core < available:
                return [core]
            raise ConfigurationError(
                f"devices={original!r}: core index {core} does not exist; this host has {available} XLA "
                f"device{'s' if available != 1 else ''} (indices 0..{max(available - 1, 0)})."
            )
        raise ConfigurationError(
            f"devices={original!r}: a list selects exactly one core ([k]); to use several cores give their number "
            f"(PJRT runs on all local cores). Allowed: {_ALLOWED}."
        )
    raise ConfigurationError(f"devices={original!r} is not valid for the xla accelerator; use {_ALLOWED}.")
