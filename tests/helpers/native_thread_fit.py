"""Run by tests/test_clean_exit.py in a subprocess: a 2-process ddp_spawn fit whose workers, as the run ends,
each leave a daemon thread going in and out of a native call that releases the GIL (short waits on a key-value
store that never gets the key), as the process group's threads, a logger's or a device loader's thread can be
when a worker ends.

A thread that comes back from native code while the interpreter tears itself down ends the process with
``terminate called without an active exception`` (SIGABRT). Here that moment is made certain rather than rare:
an object the teardown deletes takes a second to go (its ``__del__`` sleeps, letting the thread run).
Prints ``DONE <global_step>`` when fit returned. Usage: ``python native_thread_fit.py FOLDER``
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

import accelkit
from accelkit.strategies.ddp import find_free_port
from helpers.models import RegressionModule

#: kept alive until the interpreter's teardown clears the module's globals
_KEEP: list = []


class SlowToDelete:
    """Deleted by the interpreter's teardown; takes a second, during which other threads may run."""

    def __del__(self) -> None:
        time.sleep(1.0)


class LeaveANativeThread(accelkit.Callback):
    """At the end of fit, start a daemon thread that waits on this worker's own store, 50 ms at a time."""

    def on_fit_end(self, trainer, pl_module):
        port = find_free_port()
        server = dist.TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=30), wait_for_workers=False)
        client = dist.TCPStore("127.0.0.1", port, 1, False, timedelta(seconds=30))

        def wait_forever() -> None:
            while True:
                try:
                    client.wait(["a key nobody sets"], timedelta(milliseconds=50))
                except Exception:  # noqa: BLE001 - a timeout: wait again
                    pass

        threading.Thread(target=wait_forever, daemon=True).start()
        _KEEP.extend([server, client, SlowToDelete()])


def main(folder: str) -> int:
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1, logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, default_root_dir=folder,
                               callbacks=[LeaveANativeThread()])
    trainer.fit(RegressionModule(batch_size=4))
    print(f"DONE {trainer.global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
