"""The cpu accelerator recognises running out of host memory (what ``Tuner.scale_batch_size`` asks it)."""

from __future__ import annotations

import torch

from accelkit_cpu.accelerator import CPUAccelerator


def _allocator_refusal() -> RuntimeError:
    try:
        torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: torch's CPU allocator refuses at once
    except RuntimeError as error:
        return error
    raise AssertionError("a 1 PiB allocation succeeded")


def test_memory_errors_of_the_host_are_out_of_memory():
    cpu = CPUAccelerator()
    refusal = _allocator_refusal()
    assert "DefaultCPUAllocator: can't allocate memory" in str(refusal)
    assert cpu.is_out_of_memory(refusal)
    assert cpu.is_out_of_memory(MemoryError())


def test_other_errors_are_not():
    cpu = CPUAccelerator()
    assert not cpu.is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"))
    assert not cpu.is_out_of_memory(ValueError("can't allocate memory"))  # not the allocator's RuntimeError
    assert not cpu.is_out_of_memory(KeyboardInterrupt())
