"""No open doors (issue 17, item 3) for fsdp started from a plain process: every socket of the run (the
rendezvous store, gloo's) listens on the loopback interface only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.guards import TESTS, child_env
from helpers.sockets import reachable_from_outside


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from /proc/net/tcp "
                    "(Linux only)")
def test_an_fsdp_run_started_here_listens_on_the_loopback_interface_only(tmp_path, prewarmed):
    env = child_env()
    env.pop("GLOO_SOCKET_IFNAME", None)
    # the launching script forked from the prewarmed interpreter; the workers whose sockets are read are spawned
    proc = prewarmed.run([str(TESTS / "helpers" / "sockets_fit.py"), str(tmp_path), "fsdp"], cwd=tmp_path, env=env,
                         timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    opened = []
    for rank in range(2):
        record = json.loads((tmp_path / f"sockets-{rank}.json").read_text())
        opened += [(f"{who} of rank {rank}", address, port) for who, found in record.items() for address, port in found]
    assert any(who == "worker of rank 0" for who, _, _ in opened), opened  # rank 0 hosts the rendezvous store
    assert [entry for entry in opened if reachable_from_outside(entry[1])] == [], opened
