"""XLA training in a process that ran CPU backward passes before torch_xla was imported (issue 17, item 2).

PyTorch's autograd engine sizes its device queues at the first backward pass of the process; a CPU backward
pass before ``import torch_xla`` leaves it without one for the XLA device, and every XLA backward pass then
failed with ``device_ready_queues_ ... INTERNAL ASSERT FAILED``. The XLA strategies detect this when they set
up and run backward passes in the calling thread instead. The script, ``cpu_then_xla.py``, runs in its own
interpreter (XLA on the host CPU).
"""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [pytest.mark.xla, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]


def test_xla_trains_after_cpu_backward_passes_in_the_same_process(tmp_path, run_scenario) -> None:
    result = run_scenario("cpu_then_xla", tmp_path, script="cpu_then_xla.py", timeout=600)
    assert result["torch_xla_imported_before_xla_fit"] is False  # the CPU work really came first
    assert result["strategy"] == "XLASingleStrategy"
    cpu, xla, again = result["cpu_losses"], result["xla_losses"], result["xla_again_losses"]
    assert len(xla) == len(again) == len(cpu) == 16
    # the same seed, data and steps: XLA trains as the CPU does (float32 on both), and the loss falls
    assert xla == pytest.approx(cpu, rel=1e-4, abs=1e-5)
    assert again == pytest.approx(xla, rel=1e-6)
    assert xla[-1] < xla[0] / 100
    assert result["val_loss"] < xla[0] / 10
    assert result["cpu_after_losses"] == pytest.approx(cpu, rel=1e-6)  # the CPU afterwards: unaffected
    assert result["multithreading_after"] is True  # autograd's setting is restored after the XLA runs
