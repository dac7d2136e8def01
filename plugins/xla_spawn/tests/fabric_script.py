"""A Fabric script that calls ``fabric.launch()`` WITHOUT a function on several XLA replicas (PJRT on the host
CPU): ``python fabric_script.py OUTDIR``. Every run of its top level appends a line to ``OUTDIR/before.jsonl``;
after ``launch()`` (in the replicas only) each replica trains with ``fabric_scenarios.train`` (``rankR.json``)
and appends its rank, world size and device to ``OUTDIR/after.jsonl``. ``FAIL_AFTER_LAUNCH=1`` makes every replica
raise right after ``launch()``. Run by ``test_fabric_xla_spawn.py``; the collective is ``FlatBufferAllReduceSpawn``
(see ``fabric_scenarios.py``)."""

import json
import os
import sys
import threading
from pathlib import Path

from fabric_scenarios import train
from xla_scenarios import FlatBufferAllReduceSpawn

from accelkit import Fabric

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
lock = threading.Lock()


def append(name: str, record: dict) -> None:
    with lock, open(out / name, "a") as fh:
        fh.write(json.dumps(record) + "\n")


append("before.jsonl", {"pid": os.getpid(), "thread": threading.get_ident()})
fabric = Fabric(accelerator="xla", devices=int(os.environ["CPU_NUM_DEVICES"]), strategy=FlatBufferAllReduceSpawn())
fabric.launch()
if os.environ.get("FAIL_AFTER_LAUNCH"):
    raise ValueError(f"replica {fabric.global_rank} fails on purpose")
train(fabric, str(out))
append("after.jsonl", {"global_rank": fabric.global_rank, "world_size": fabric.world_size,
                       "device": str(fabric.device), "pid": os.getpid(), "thread": threading.get_ident()})
