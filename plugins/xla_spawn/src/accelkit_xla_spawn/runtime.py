"""The XLA runtime as this plugin sees it: whether PJRT already started in this process, a pod's host layout,
and what to say when a launch fails."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from accelkit.errors import ConfigurationError


# --------------------------------------------------------------------------------------------- parent checks
def xla_runtime_initialized() -> bool:
    """Whether this process has already started the XLA runtime.

    Answers ``False`` without importing anything when torch_xla was never imported; otherwise asks torch_xla's
    C extension, which does not start the runtime by being asked.
    """
    module = sys.modules.get("torch_xla")
    if module is None:
        return False
    xlac = getattr(module, "_XLAC", None)
    probe = getattr(xlac, "_xla_runtime_is_initialized", None)
    return bool(probe()) if callable(probe) else False


RUNTIME_TOUCHED_MESSAGE = (
    "the XLA runtime is already running in this (parent) process, so torch_xla cannot start one replica per "
    "core (older torch_xla said 'Cannot replicate if number of devices (1) is different from 8'; newer says "
    "'Runtime is already initialized'). Something used an XLA device before Trainer.fit(): a tensor created "
    "with device=torch_xla.device()/xm.xla_device(), a model moved to it, or a torch_xla.runtime query such as "
    "xr.world_size(). Move that code into the module: its methods and hooks run inside the replicas, or "
    "use devices=1 (strategy 'xla_single') which needs no spawn."
)


@dataclass(frozen=True)
class PodPlan:
    """What one host of a TPU pod computes from its environment before launching its replicas.

    :param host_index: this host's index (``TPU_WORKER_ID``, or ``CLOUD_TPU_TASK_ID``; 0 on a single host).
    :param num_hosts: hosts taking part (entries of ``TPU_WORKER_HOSTNAMES``; 1 when unset).
    :param local_world_size: replicas on this host (its local XLA devices).
    """

    host_index: int
    num_hosts: int
    local_world_size: int

    @property
    def world_size(self) -> int:
        """Replicas across all hosts."""
        return self.num_hosts * self.local_world_size

    @property
    def global_ordinals(self) -> range:
        """The global ordinals of this host's replicas (host-major, as PJRT numbers them)."""
        start = self.host_index * self.local_world_size
        return range(start, start + self.local_world_size)


def pod_plan(env: Mapping[str, str], local_devices: int) -> PodPlan:
    """Compute this host's place in a pod from ``env`` (pure: testable with a dict).

    Raises :class:`ConfigurationError` when the variables contradict each other.
    """
    hostnames = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    num_hosts = len(hostnames) or 1
    raw_index = env.get("TPU_WORKER_ID") or env.get("CLOUD_TPU_TASK_ID") or "0"
    try:
        host_index = int(raw_index)
    except ValueError:
        raise ConfigurationError(f"TPU_WORKER_ID={raw_index!r} is not an integer host index.") from None
    if not 0 <= host_index < num_hosts:
        raise ConfigurationError(
            f"TPU_WORKER_ID={host_index} but TPU_WORKER_HOSTNAMES lists {num_hosts} host(s) "
            f"({', '.join(hostnames) or 'none'}); the worker id must be in 0..{num_hosts - 1}."
        )
    if local_devices < 1:
        raise ConfigurationError("this host has no XLA device to run replicas on.")
    return PodPlan(host_index=host_index, num_hosts=num_hosts, local_world_size=local_devices)


CPU_COLLECTIVES_NOTE = (
    "PJRT_DEVICE=CPU with more than one replica: torch_xla 2.x on the CPU is known to abort in XLA's rendezvous "
    "on cross-replica collectives (xm.all_reduce, xm.rendezvous; pytorch/xla#5005, #9089), which this strategy "
    "needs for the gradients. Use devices=1 on the CPU, or run on a TPU."
)


def launch_failure_hint(env: Mapping[str, str], world_size: int) -> str:
    """Extra explanation for a failed launch, from the environment it ran in (empty when there is none)."""
    if env.get("PJRT_DEVICE", "").strip().upper() == "CPU" and world_size > 1:
        return " " + CPU_COLLECTIVES_NOTE
    return ""
