"""The cpu accelerator's devices: N processes, with a warning when they outnumber the cores."""

import os
import warnings

import pytest

from accelkit_cpu import CPUAccelerator


def test_as_many_processes_as_cores_is_quiet():
    cores = os.cpu_count() or 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert CPUAccelerator.parse_devices(cores) == list(range(cores))
        assert CPUAccelerator.parse_devices("auto") == [0]


def test_more_processes_than_cores_warns_naming_both_numbers():
    cores = os.cpu_count() or 1
    with pytest.warns(UserWarning, match=rf"devices={cores + 3} starts {cores + 3} processes on {cores} CPU core"):
        assert CPUAccelerator.parse_devices(cores + 3) == list(range(cores + 3))
