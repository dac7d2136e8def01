"""Where the processes of a ``torch.distributed`` run listen, and what reaches them.

A run opens two kinds of listening sockets: the rendezvous store (a TCP key-value store that rank 0 hosts at
``MASTER_ADDR:MASTER_PORT``, through which the processes find each other) and the process-group backend's own
connections (gloo opens one listening socket per process; other backends, such as the one a GPU plugin brings,
open theirs).

* A run whose processes accelkit starts on this machine (``ddp_spawn``, ``fsdp`` from a plain ``python``) listens
  on the loopback interface only: the store on ``127.0.0.1``, gloo (and any backend whose accelerator names its
  interface variable in ``Accelerator.socket_interface_variables``) on the loopback interface. Nothing is
  reachable from another machine. A variable the user set (``GLOO_SOCKET_IFNAME=eth0``...) is kept.
* A run whose processes a launcher started (``torchrun``, ``srun``, ``mpirun``...) listens where the launcher
  says: under torchrun the launcher's agent hosts the store and the processes only connect to it; otherwise rank
  0 hosts the store on the address ``MASTER_ADDR`` names (resolved on rank 0's machine), not on every interface.
  The backend listens where its variables say (``GLOO_SOCKET_IFNAME``), else on the address of the machine's
  host name (gloo's default).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import sys
import warnings
from collections.abc import MutableMapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from torch.distributed import Store

#: the variable that pins gloo's sockets to one network interface
GLOO_INTERFACE_VARIABLE = "GLOO_SOCKET_IFNAME"
#: the address a run on one machine listens on
LOOPBACK_ADDRESS = "127.0.0.1"
_IFF_LOOPBACK = 0x8
#: stores rank zero hosted before its process group (for the processes to agree on the attempt,
#: :func:`agreement_store`), by address; :func:`rendezvous_store` takes each one over, once
HOSTED_EARLY: dict[tuple[str, int], Store] = {}


def loopback_interface() -> str | None:
    """The name of this machine's loopback network interface (``lo`` on Linux, ``lo0`` on macOS), or ``None``
    where it cannot be told."""
    net = Path("/sys/class/net")
    if net.is_dir():
        for device in sorted(net.iterdir()):
            try:
                if int((device / "flags").read_text().strip(), 16) & _IFF_LOOPBACK:
                    return device.name
            except (OSError, ValueError):
                continue
    names = {name for _, name in socket.if_nameindex()} if hasattr(socket, "if_nameindex") else set()
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


def listen_on_loopback(environ: MutableMapping[str, str], variables: tuple[str, ...] = ()) -> None:
    """Point a run on this machine at the loopback interface: ``MASTER_ADDR`` is ``127.0.0.1``, and gloo's
    interface variable (plus ``variables``, an accelerator's own) names the loopback interface unless the user
    set it."""
    environ["MASTER_ADDR"] = LOOPBACK_ADDRESS
    interface = loopback_interface()
    if interface is None:
        return
    for name in (GLOO_INTERFACE_VARIABLE, *variables):
        environ.setdefault(name, interface)


def uses_launcher_store(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Whether torchrun's agent hosts the rendezvous store (the processes then only connect to it)."""
    return environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def attempt_prefix(environ: MutableMapping[str, str] = os.environ) -> str:
    """The prefix of this attempt's keys in the rendezvous store (``PrefixStore`` adds the ``/``), under torchrun's
    agent store (else empty): ``accelkit/attempt_<token>``, the token the attempt's processes agreed on
    (:func:`~accelkit.environments.torchrun.agreed_attempt`, new in each attempt, the same in every process, on one
    machine or several).

    torchrun's agent keeps one store for every restart of its workers (torch 2.9's c10d rendezvous shares it), and
    neither torch's ``env://`` rendezvous nor the process group puts the attempt in the keys. Without this prefix a
    restarted process can read the keys the killed attempt wrote: gloo's listening address of a process that is
    gone among them, so the new attempt fails with "Gloo connectFullMesh failed ... Connection refused" whenever
    one process reads a peer's key before that peer rewrote it (a loaded machine). Each agent counts its own
    restarts (one that restarts because another node failed does not count it), so the restart count is no
    attempt number common to the processes of several machines.
    """
    if not uses_launcher_store(environ):
        return ""
    from accelkit.environments.torchrun import agreed_attempt

    agreed = agreed_attempt(environ)
    return f"accelkit/attempt_{agreed[0]}" if agreed is not None else ""


def in_this_attempt(store: Store) -> Store:
    """``store`` seen through this attempt's ``attempt_prefix()`` (``store`` itself where there is none)."""
    import torch.distributed as dist

    prefix = attempt_prefix()
    return dist.PrefixStore(prefix, store) if prefix else store


def agreement_store(rank: int, world_size: int, timeout_s: float, spans_machines: bool) -> Store:
    """The store at ``MASTER_ADDR:MASTER_PORT`` opened before the process group, for the processes of an attempt to
    agree on it where each attempt has a store of its own (torchrun with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``,
    :attr:`~accelkit.environments.TorchrunEnvironment.store_opener`): rank 0 hosts it as :func:`rendezvous_store`
    would, and keeps it for the process group (:data:`HOSTED_EARLY`); the others connect."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank != 0:  # (a client counts itself in, as rank 0's store waits for every process to connect)
        return rendezvous_store(rank, world_size, timeout_s, spans_machines)
    if (host, port) not in HOSTED_EARLY:
        HOSTED_EARLY[host, port] = rendezvous_store(0, world_size, timeout_s, spans_machines)
    return HOSTED_EARLY[host, port]


class StoreOptions(TypedDict):
    """The keyword arguments :func:`rendezvous_store` gives ``torch.distributed.TCPStore`` (as torch's env://
    store)."""

    world_size: int
    timeout: timedelta
    multi_tenant: bool
    use_libuv: bool


def rendezvous_store(rank: int, world_size: int, timeout_s: float, spans_machines: bool) -> Store:
    """The store of a run joined through ``MASTER_ADDR``/``MASTER_PORT``: rank 0 hosts it on the address
    ``MASTER_ADDR`` names, the others connect. Under torchrun's agent store every process connects to the agent's
    store, seen through this attempt's ``attempt_prefix()`` where there is one.

    :param spans_machines: whether the run has processes on other machines: an address that resolves to a
        loopback one on rank 0's machine (a host name mapped to ``127.0.1.1`` in ``/etc/hosts``) cannot be where
        the others connect, so the store then listens on every interface, and a warning says so.
    """
    import torch.distributed as dist

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    timeout = timedelta(seconds=timeout_s)
    options: StoreOptions = {  # as torch's env:// store
        "world_size": world_size, "timeout": timeout, "multi_tenant": True,
        "use_libuv": os.environ.get("USE_LIBUV", "0" if sys.platform == "win32" else "1") == "1"}
    if uses_launcher_store():
        return in_this_attempt(dist.TCPStore(host, port, is_master=False, **options))
    if rank != 0:
        return dist.TCPStore(host, port, is_master=False, **options)
    early = HOSTED_EARLY.pop((host, port), None)
    if early is not None:  # hosted for the attempt's agreement: the process group's from here on
        early.set_timeout(timeout)
        return early
    listener, why = listening_socket(host, port, spans_machines)
    if listener is None:
        if why:
            warnings.warn(f"the rendezvous store of this run listens on every network interface at port {port}: "
                          f"{why}. Set MASTER_ADDR to an address of this machine that the other machines reach.",
                          UserWarning, stacklevel=3)
        return dist.TCPStore(host, port, is_master=True, **options)
    return dist.TCPStore(host, port, is_master=True, master_listen_fd=listener.detach(), **options)


def listening_socket(host: str, port: int, spans_machines: bool) -> tuple[socket.socket | None, str]:
    """A socket listening on ``host``'s address at ``port`` (the first address ``host`` resolves to that this
    machine has; with ``spans_machines``, not a loopback one); else ``None`` and why (empty when torch's own
    attempt would fail the same way, a port in use, say: torch then reports it)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return None, f"MASTER_ADDR={host!r} does not resolve here ({exc})"
    loopback_only = True
    for family, kind, proto, _, address in found:
        if spans_machines and ipaddress.ip_address(str(address[0]).split("%")[0]).is_loopback:
            continue
        loopback_only = False
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(2048)
            return sock, ""
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRNOTAVAIL:
                return None, ""
    if loopback_only:
        return None, (f"MASTER_ADDR={host!r} resolves to a loopback address on this machine, which the other "
                      "machines of the run cannot reach")
    return None, f"MASTER_ADDR={host!r} is not an address of this machine"
