"""The torchrun / TorchElastic environment: ranks and rendezvous from the variables torchrun sets."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import ClassVar, Protocol

from accelkit.environments.base import ClusterEnvironment
from accelkit.errors import WorkerError

#: the store key under which global rank zero announces the attempt of the processes it joins
ATTEMPT_KEY = "accelkit/attempt"
#: seconds the processes of an attempt wait for each other to agree on it (the default collective timeout)
AGREE_TIMEOUT_S = 600.0
#: the attempts agreed in this process, by store address, run id, restart count and rank (a worker process lives
#: within one attempt)
AGREED_ATTEMPTS: dict[tuple[str, ...], tuple[str, int]] = {}
#: the store key under which each process of an attempt posts what it knows of the attempt (store of its own)
EVIDENCE_KEY = "accelkit/attempt_evidence"
#: the name of the marker files a group of workers leaves in its agent's log folder (one per group)
GROUP_MARKER = "accelkit-worker-group-"
#: the attempts agreed in this process where each attempt has a store of its own, by store address and rank
MAX_ATTEMPTS: dict[tuple[str, ...], int] = {}


def agreed_attempt(env: Mapping[str, str], timeout_s: float = AGREE_TIMEOUT_S) -> tuple[str, int] | None:
    """``(token, number)`` of the attempt this process belongs to, the same in every process of the attempt, where
    torchrun's processes share its agent's store (torch's default, ``TORCHELASTIC_USE_AGENT_STORE=True``); else
    ``None``. ``number`` counts the attempts of the run (0: the first), ``token`` is new in each.

    That store outlives the attempts: it keeps what every earlier attempt wrote, and no variable torchrun sets is the
    same in every process of an attempt (``TORCHELASTIC_RESTART_COUNT`` is each agent's own count: an agent that
    restarts its workers because another node failed does not count it). So the processes agree through the store:
    global rank zero takes the next number (an atomic add), announces ``<random token>.<number>`` under
    :data:`ATTEMPT_KEY`, and confirms it to each other rank that asks for it with a nonce of its own; a rank that
    read an earlier attempt's announcement gets no answer (that rank zero is gone) and reads it again. Asked once
    per process (cached); waits at most ``timeout_s`` for the other processes."""
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_PORT" not in env or "RANK" not in env:
        return None
    key = (env.get("MASTER_ADDR", "127.0.0.1"), env["MASTER_PORT"], env.get("TORCHELASTIC_RUN_ID", ""),
           env.get("TORCHELASTIC_RESTART_COUNT", ""), env["RANK"])
    if key not in AGREED_ATTEMPTS:
        AGREED_ATTEMPTS[key] = _agree(key[0], int(key[1]), int(env["RANK"]), int(env.get("WORLD_SIZE", "1")),
                                      timeout_s)
    return AGREED_ATTEMPTS[key]


def _agree(host: str, port: int, rank: int, world: int, timeout_s: float) -> tuple[str, int]:
    import secrets
    import time

    import torch.distributed as dist

    store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    deadline = time.monotonic() + timeout_s

    def left() -> timedelta:
        return timedelta(seconds=max(0.1, deadline - time.monotonic()))

    if rank == 0:
        number = int(store.add("accelkit/attempts", 1)) - 1
        token = f"{secrets.token_hex(8)}.{number}"
        store.set(ATTEMPT_KEY, token)
        for other in range(1, world):  # each waits for its answer: this is where the attempt's processes meet
            try:
                store.wait([f"{ATTEMPT_KEY}/ask/{token}/{other}"], left())
            except RuntimeError as exc:  # torch's DistStoreError
                raise agreement_timeout(rank, timeout_s, f"{host}:{port}", f"global rank {other} never asked") from exc
            nonce = store.get(f"{ATTEMPT_KEY}/ask/{token}/{other}").decode()
            store.set(f"{ATTEMPT_KEY}/yes/{token}/{other}/{nonce}", "1")
        return token, number
    nonce = secrets.token_hex(8)
    while True:
        try:
            store.wait([ATTEMPT_KEY], left())  # a first announcement
        except RuntimeError as exc:
            raise agreement_timeout(rank, timeout_s, f"{host}:{port}", "global rank 0 never announced it") from exc
        token = store.get(ATTEMPT_KEY).decode()
        store.set(f"{ATTEMPT_KEY}/ask/{token}/{rank}", nonce)
        try:
            store.wait([f"{ATTEMPT_KEY}/yes/{token}/{rank}/{nonce}"], timedelta(seconds=2))
            return token, int(token.rsplit(".", 1)[1])
        except RuntimeError as exc:  # an earlier attempt's announcement, or a slow rank zero
            if time.monotonic() > deadline:
                raise agreement_timeout(rank, timeout_s, f"{host}:{port}",
                                        "global rank 0 of this attempt never confirmed it") from exc


def agreement_timeout(rank: int, timeout_s: float, where: str, what: str) -> WorkerError:
    """The error of a process whose peers did not come to agree on the attempt within ``timeout_s``."""
    return WorkerError(
        f"rank {rank} waited {timeout_s:.0f} s (the collective timeout, Trainer(collective_timeout=...)) for the "
        f"processes of this attempt to agree on it in the rendezvous store at {where}, and stops: {what}. A process "
        "of this attempt did not start or died (its launcher's output names its failure); the launcher restarts "
        "the attempt while --max-restarts allows (a store timeout).")


def earlier_worker_groups(env: Mapping[str, str]) -> int:
    """How many groups of workers this process's torchrun agent started before the one this process belongs to.

    An agent restarts its workers on a failure (and counts it, ``TORCHELASTIC_RESTART_COUNT``) and on a change of
    membership (a node joined: not counted), and writes each group's files under one log folder of its own, made when
    the agent starts: ``<log dir>/<run id>_<random>/attempt_<restart count>/<local rank>/error.json``, the last one
    given to each worker as ``TORCHELASTIC_ERROR_FILE``. Each group leaves a marker there, named after its
    ``attempt_<n>`` folder (made anew for each group); the markers of other groups are the groups before. 0 where
    the variable is not set or not shaped so (a launcher with other log specifications)."""
    error_file = env.get("TORCHELASTIC_ERROR_FILE")
    if not error_file:
        return 0
    group_folder = Path(error_file).parent.parent
    if not group_folder.name.startswith("attempt_"):
        return 0
    try:
        made = group_folder.stat()
        mine = f"{GROUP_MARKER}{made.st_ino}-{made.st_ctime_ns}"
        others = {p.name for p in group_folder.parent.glob(f"{GROUP_MARKER}*")} - {mine}
        (group_folder.parent / mine).touch()
    except OSError:
        return 0
    return len(others)


class AgreementStore(Protocol):
    """What :func:`agree_on_max` uses of a ``torch.distributed`` store (a ``TCPStore``; torch's type stubs lack the
    ``timeout`` it has)."""

    @property
    def timeout(self) -> timedelta:
        """How long :meth:`wait` waits."""

    def set(self, key: str, value: str) -> None:
        """Post ``value`` under ``key``."""

    def wait(self, keys: list[str]) -> None:
        """Wait until every key is posted (raises after :attr:`timeout`)."""

    def check(self, keys: list[str]) -> bool:
        """Whether every key is posted."""

    def get(self, key: str) -> bytes:
        """The value posted under ``key``."""


def agree_on_max(store: AgreementStore, rank: int, world: int, value: int) -> int:
    """The largest ``value`` over the ``world`` processes of an attempt, each posting its own in ``store`` (a store
    of this attempt's own) and reading the others'; waits for them at most the store's timeout."""
    store.set(f"{EVIDENCE_KEY}/{rank}", str(value))
    keys = [f"{EVIDENCE_KEY}/{other}" for other in range(world)]
    try:
        store.wait(keys)
    except RuntimeError as exc:  # torch's DistStoreError
        missing = [other for other, key in enumerate(keys) if not store.check([key])]
        raise agreement_timeout(rank, store.timeout.total_seconds(), "MASTER_ADDR:MASTER_PORT",
                                f"global rank(s) {missing} never came") from exc
    return max(int(store.get(key).decode()) for key in keys)


class TorchrunEnvironment(ClusterEnvironment):
    """Processes started by ``torchrun`` (TorchElastic), or by anything exporting ``RANK``, ``WORLD_SIZE`` and
    ``LOCAL_RANK`` for ``torch.distributed``'s ``env://`` rendezvous (a hand-written launch script, say)."""

    name = "torchrun"
    required = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    variables: ClassVar[dict[str, str]] = {
        "RANK": "global rank",
        "WORLD_SIZE": "processes across nodes",
        "LOCAL_RANK": "rank on this node",
        "LOCAL_WORLD_SIZE": "processes on this node (torchrun's --nproc-per-node)",
        "GROUP_RANK": "this node's index (torchrun's --node-rank)",
        "GROUP_WORLD_SIZE": "number of nodes (torchrun's agents)",
        "MASTER_ADDR": "rendezvous host (rank 0's)",
        "MASTER_PORT": "rendezvous port",
        "TORCHELASTIC_RUN_ID": "set by torchrun only: tells it from a hand-made launch",
        "TORCHELASTIC_RESTART_COUNT": "how many times this node's agent restarted its workers",
        "TORCHELASTIC_USE_AGENT_STORE": "'True': the processes share the agent's store (they agree on the "
                                        "attempt there)",
        "TORCHELASTIC_ERROR_FILE": "where a worker writes its error; its folder is the agent's, one per group of "
                                   "workers (tells a group its agent started before)",
    }
    #: opens this attempt's rendezvous store at ``MASTER_ADDR:MASTER_PORT`` (global rank zero hosts it) for the
    #: processes to agree on the attempt where each attempt has a store of its own
    #: (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``); set by the strategy that joins the processes, which knows
    #: where a run listens. ``None``: over several nodes such an attempt is not told (``restart_attempt`` is
    #: ``None``).
    store_opener: Callable[[], AgreementStore] | None = None
    #: how long the processes of an attempt wait for each other to agree on it (seconds): the collective timeout
    #: of the strategy that joins them (set by it); ``None``: ``AGREE_TIMEOUT_S``
    wait_limit_s: Callable[[], float] | None = None

    def validate(self) -> list[str]:
        """The base checks, and variables that look left over in the shell: ``torch.distributed``'s ``env://``
        rendezvous needs ``MASTER_ADDR``, which torchrun and hand-written launchers set; without it (and without
        torchrun's ``TORCHELASTIC_RUN_ID``) nobody is going to start the other ranks, and joining would wait for
        them until the collective timeout."""
        problems = super().validate()
        if not problems and "TORCHELASTIC_RUN_ID" not in self.env and "MASTER_ADDR" not in self.env and \
                self.world_size > 1:
            problems.append(
                f"RANK={self.env['RANK']}, WORLD_SIZE={self.env['WORLD_SIZE']}, LOCAL_RANK={self.env['LOCAL_RANK']} "
                "are set, but neither TORCHELASTIC_RUN_ID (torchrun) nor MASTER_ADDR (any launcher's rendezvous "
                "host): they look left over in the shell, and joining would wait for ranks nobody starts. Unset "
                "them (`unset RANK WORLD_SIZE LOCAL_RANK`), or set MASTER_ADDR/MASTER_PORT if a launcher of your "
                "own started these processes.")
        return problems

    def reason(self) -> str:
        """Names the three rank variables, and ``TORCHELASTIC_RUN_ID`` when torchrun itself set them."""
        launcher = ("torchrun (TORCHELASTIC_RUN_ID="f"{self.env['TORCHELASTIC_RUN_ID']})"
                    if "TORCHELASTIC_RUN_ID" in self.env else "a launcher exporting torch.distributed's variables")
        return f"{super().reason()} by {launcher}"

    @property
    def restart_attempt(self) -> int | None:
        """Under torchrun: the attempt its processes agreed on through the agent's store (``agreed_attempt()``,
        the same in every process). With a store of each attempt's own (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``):
        the largest over the processes of what each knows (its agent's ``TORCHELASTIC_RESTART_COUNT``, the groups
        of workers its agent started before, ``earlier_worker_groups``): one node's count where one agent runs
        every process, else agreed through :attr:`store_opener`'s store (``None`` without one). An agent that was
        there from the start has seen every attempt, so a restart on a failure and one on a node joining (which
        torch does not count) are both told. ``None`` without torchrun (a hand-written launch)."""
        if "TORCHELASTIC_RUN_ID" not in self.env:
            return None
        agreed = agreed_attempt(self.env, self.wait_limit_s() if self.wait_limit_s is not None else AGREE_TIMEOUT_S)
        if agreed is not None:
            return agreed[1]
        key = (self.env.get("MASTER_ADDR", ""), self.env.get("MASTER_PORT", ""), self.env["TORCHELASTIC_RUN_ID"],
               self.env.get("TORCHELASTIC_RESTART_COUNT", ""), self.env.get("RANK", ""))
        if key not in MAX_ATTEMPTS:
            known = max(self._int("TORCHELASTIC_RESTART_COUNT", default=0), earlier_worker_groups(self.env))
            if self.env.get("WORLD_SIZE") == self.env.get("LOCAL_WORLD_SIZE", self.env.get("WORLD_SIZE")):
                MAX_ATTEMPTS[key] = known
            elif self.store_opener is None:
                return None
            else:
                MAX_ATTEMPTS[key] = agree_on_max(self.store_opener(), self.global_rank, self.world_size, known)
        return MAX_ATTEMPTS[key]

    @property
    def world_size(self) -> int:
        """``WORLD_SIZE``."""
        return self._int("WORLD_SIZE")

    @property
    def global_rank(self) -> int:
        """``RANK``."""
        return self._int("RANK")

    @property
    def local_rank(self) -> int:
        """``LOCAL_RANK``."""
        return self._int("LOCAL_RANK")

    @property
    def local_world_size(self) -> int:
        """``LOCAL_WORLD_SIZE``, else the world over the nodes."""
        if "LOCAL_WORLD_SIZE" in self.env:
            return self._int("LOCAL_WORLD_SIZE")
        return super().local_world_size

    @property
    def num_nodes(self) -> int:
        """``GROUP_WORLD_SIZE``, else ``WORLD_SIZE / LOCAL_WORLD_SIZE``, else 1 (nothing says otherwise)."""
        if "GROUP_WORLD_SIZE" in self.env:
            return self._int("GROUP_WORLD_SIZE")
        if "LOCAL_WORLD_SIZE" in self.env:
            return -(-self.world_size // max(1, self._int("LOCAL_WORLD_SIZE")))
        return 1

    @property
    def node_rank(self) -> int:
        """``GROUP_RANK`` (or ``NODE_RANK``), else computed from the ranks."""
        if "GROUP_RANK" in self.env or "NODE_RANK" in self.env:
            return self._int("GROUP_RANK", "NODE_RANK")
        return super().node_rank
