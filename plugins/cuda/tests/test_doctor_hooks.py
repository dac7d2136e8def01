"""The doctor hooks of accelkit-cuda: which variables it shows, and the setups it flags."""

from accelkit_cuda import plugin


def test_names_the_variables_that_choose_gpus():
    names = plugin.accelkit_environment_variables()
    assert "CUDA_VISIBLE_DEVICES" in names and all(isinstance(v, str) and v for v in names.values())


def test_an_empty_visible_devices_list_is_flagged_with_its_fix():
    problems = plugin.accelkit_diagnose({"CUDA_VISIBLE_DEVICES": " "})
    assert len(problems) == 1 and "CUDA_VISIBLE_DEVICES" in problems[0] and "unset it" in problems[0]


def test_a_normal_setup_has_no_problems():
    assert plugin.accelkit_diagnose({"CUDA_VISIBLE_DEVICES": "0,1"}) == []
    assert plugin.accelkit_diagnose({}) == []
