"""No open doors (issue 17, item 3): a run on one machine listens on no address another machine reaches; a run
across machines listens where its launcher's MASTER_ADDR says, not on every interface."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accelkit.strategies.ddp import find_free_port  # noqa: E402
from accelkit.strategies.rendezvous import (  # noqa: E402
    GLOO_INTERFACE_VARIABLE,
    listen_on_loopback,
    listening_socket,
    loopback_interface,
    rendezvous_store,
)
from helpers.guards import TESTS, child_env  # noqa: E402
from helpers.prewarmed import Prewarmed  # noqa: E402
from helpers.sockets import listening_addresses, reachable_from_outside  # noqa: E402

LINUX_PROC = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from "
                                "/proc/net/tcp (Linux only)")


def run_and_list_sockets(tmp_path: Path, strategy: str, prewarmed: Prewarmed) -> list[tuple[str, str, int]]:
    """Run helpers/sockets_fit.py with ``strategy`` (forked from the prewarmed interpreter, which listens on no
    socket); return ``(who, address, port)`` of every listening socket the two workers and their launching process
    held once training started."""
    env = child_env()
    env.pop(GLOO_INTERFACE_VARIABLE, None)
    proc = prewarmed.run([str(TESTS / "helpers" / "sockets_fit.py"), str(tmp_path), strategy], cwd=tmp_path, env=env,
                         timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    opened = []
    for rank in range(2):
        record = json.loads((tmp_path / f"sockets-{rank}.json").read_text())
        opened += [(f"{who} of rank {rank}", address, port) for who, found in record.items() for address, port in found]
    return opened


@pytest.mark.slow
@LINUX_PROC
def test_a_ddp_spawn_run_listens_on_the_loopback_interface_only(tmp_path, prewarmed):
    opened = run_and_list_sockets(tmp_path, "ddp_spawn", prewarmed)
    assert any(who == "worker of rank 0" for who, _, _ in opened), opened  # rank 0 hosts the rendezvous store
    assert [entry for entry in opened if reachable_from_outside(entry[1])] == [], opened


@LINUX_PROC
def test_the_rendezvous_store_listens_on_the_master_address_only(monkeypatch):
    port = find_free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    store = rendezvous_store(0, 1, 30.0, spans_machines=False)
    try:
        store.set("key", "value")
        ours = [address for address, p in listening_addresses(os.getpid()) if p == port]
        assert ours == ["127.0.0.1"], ours  # torch's own env:// store listens on "::" (every interface)
    finally:
        del store


def agent_environment(monkeypatch, port: int, rank: int, world: int, restarts: int) -> dict[str, str]:
    """The variables torchrun sets in a worker that shares its agent's store (torch's default)."""
    from accelkit.environments import torchrun

    monkeypatch.setattr(torchrun, "AGREED_ATTEMPTS", {})  # a new worker process: nothing agreed yet
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True",
            "RANK": str(rank), "WORLD_SIZE": str(world), "TORCHELASTIC_RESTART_COUNT": str(restarts),
            "TORCHELASTIC_RUN_ID": "job"}


def agree_together(environments: list[dict[str, str]], delays: list[float]) -> list[tuple[str, int]]:
    """What ``agreed_attempt`` answers in each of the processes (threads here) of one attempt, each starting after
    its delay."""
    import threading
    import time

    from accelkit.environments.torchrun import agreed_attempt

    answers: list = [None] * len(environments)

    def one(index: int) -> None:
        time.sleep(delays[index])
        answers[index] = agreed_attempt(environments[index], timeout_s=60)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(environments))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return answers


def test_under_torchruns_agent_store_the_processes_of_an_attempt_agree_on_it(monkeypatch):
    """torchrun's agent keeps one store for all restarts, and each agent counts its own restarts (the one that
    restarts because another node failed does not count it): the processes agree on the attempt through the store,
    also when a restarted rank 1 reads the announcement of the attempt before (whose rank 0 is gone) first."""
    import torch.distributed as dist

    port = find_free_port()
    _agent = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # as torchrun's agent hosts it
    first = agree_together([agent_environment(monkeypatch, port, 0, 2, 0),
                            agent_environment(monkeypatch, port, 1, 2, 0)], [0.0, 0.0])
    assert first[0] == first[1] and first[0][1] == 0, first
    # node B's worker failed: its agent counts a restart, node A's does not; rank 1 starts 3 s before rank 0
    second = agree_together([agent_environment(monkeypatch, port, 0, 2, 0),
                             agent_environment(monkeypatch, port, 1, 2, 1)], [3.0, 0.0])
    assert second[0] == second[1] and second[0][1] == 1 and second[0][0] != first[0][0], (first, second)


def test_under_torchruns_agent_store_each_attempt_has_keys_of_its_own(monkeypatch):
    """A restarted process must not read what the processes of the attempt before it wrote in the agent's store
    (gloo's addresses of processes that are gone)."""
    import torch.distributed as dist

    port = find_free_port()
    agent = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # as torchrun's agent hosts it
    for name, value in agent_environment(monkeypatch, port, 0, 1, 0).items():
        monkeypatch.setenv(name, value)
    first = rendezvous_store(0, 1, 30.0, spans_machines=False)
    first.set("rank_1", "address of attempt 0")
    for name, value in agent_environment(monkeypatch, port, 0, 1, 1).items():
        monkeypatch.setenv(name, value)
    second = rendezvous_store(0, 1, 30.0, spans_machines=False)
    assert not second.check(["rank_1"])  # attempt 1 does not see attempt 0's key
    second.set("rank_1", "address of attempt 1")
    tokens = [token.decode() for token in (agent.get("accelkit/attempt"),)]
    assert agent.get(f"accelkit/attempt_{tokens[0]}/rank_1") == b"address of attempt 1"


def test_a_run_on_one_machine_points_every_backend_at_the_loopback_interface():
    environ: dict[str, str] = {"MASTER_ADDR": "node-7"}
    listen_on_loopback(environ, ("OTHER_BACKEND_SOCKET_IFNAME",))
    interface = loopback_interface()
    assert environ["MASTER_ADDR"] == "127.0.0.1"
    if interface is None:
        pytest.skip("no loopback interface could be named on this machine")
    assert environ[GLOO_INTERFACE_VARIABLE] == interface
    assert environ["OTHER_BACKEND_SOCKET_IFNAME"] == interface


def test_an_interface_the_user_chose_is_kept():
    environ = {GLOO_INTERFACE_VARIABLE: "eth7"}
    listen_on_loopback(environ)
    assert environ[GLOO_INTERFACE_VARIABLE] == "eth7"


def test_an_address_of_another_machine_is_not_bound_and_the_reason_is_given():
    listener, why = listening_socket("192.0.2.77", find_free_port(), spans_machines=True)  # TEST-NET-1
    assert listener is None and "MASTER_ADDR='192.0.2.77' is not an address of this machine" in why


def test_a_run_across_machines_does_not_listen_on_a_loopback_address():
    # a host name mapped to 127.0.1.1 on rank 0's machine: the other machines cannot connect there
    listener, why = listening_socket("127.0.0.1", find_free_port(), spans_machines=True)
    assert listener is None and "resolves to a loopback address" in why
    listener, why = listening_socket("127.0.0.1", find_free_port(), spans_machines=False)
    assert isinstance(listener, socket.socket) and why == ""
    listener.close()


@pytest.mark.parametrize("rank", [0, 1])
def test_the_agreement_on_the_attempt_is_bounded_when_a_process_never_comes(monkeypatch, rank):
    """Rank 0 waiting for a rank 1 that never asks, or rank 1 waiting for a rank 0 that never announces: each ends
    with the store's timeout error after ``timeout_s``, not a hang."""
    import torch.distributed as dist

    from accelkit.environments.torchrun import agreed_attempt

    port = find_free_port()
    _agent = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    with pytest.raises(RuntimeError, match="timeout|Timeout"):
        agreed_attempt(agent_environment(monkeypatch, port, rank, 2, 0), timeout_s=2)
