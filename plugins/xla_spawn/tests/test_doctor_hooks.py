"""The doctor hooks of accelkit-xla-spawn: which variables it shows and which TPU setups it flags."""

import os

import pytest

pytest.importorskip("accelkit_xla_spawn", reason="the accelkit-xla-spawn plugin is not installed")

from accelkit_xla_spawn import plugin  # noqa: E402


def test_names_the_pjrt_variables_and_the_legacy_one():
    names = plugin.accelkit_environment_variables()
    assert {"PJRT_DEVICE", "XRT_TPU_CONFIG"} <= set(names)
    assert "retired" in names["XRT_TPU_CONFIG"]


def test_the_lightning_era_xrt_setup_is_flagged_with_its_fix():
    problems = plugin.accelkit_diagnose({"XRT_TPU_CONFIG": "localservice;0;localhost:51011"})
    assert len(problems) == 1
    assert "XRT_TPU_CONFIG" in problems[0] and "PJRT_DEVICE=TPU" in problems[0]


def test_a_misspelt_pjrt_device_is_flagged_naming_the_value():
    problems = plugin.accelkit_diagnose({"PJRT_DEVICE": "TPUU"})
    assert len(problems) == 1 and "'TPUU'" in problems[0] and "TPU" in problems[0]


def test_a_pjrt_setup_has_no_problems():
    assert plugin.accelkit_diagnose({"PJRT_DEVICE": "TPU"}) == []
    assert plugin.accelkit_diagnose({"PJRT_DEVICE": "cpu", "CPU_NUM_DEVICES": "4"}) == []


@pytest.mark.slow  # starts a process
def test_doctor_shows_the_problem_and_exits_nonzero(prewarmed):
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    env["XRT_TPU_CONFIG"] = "localservice;0;localhost:51011"
    # ``python -m accelkit.cli doctor``, forked from the prewarmed interpreter (torch imported, accelkit not)
    done = prewarmed.run(["-m", "accelkit.cli", "doctor"], cwd=os.getcwd(), env=env, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "XRT_TPU_CONFIG is set but PJRT_DEVICE is not" in done.stdout
