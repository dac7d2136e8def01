"""The seed TPU guide's sampler program runs unchanged (issue 16, item 4).

``seed_tpu_sampler.py`` is the guide's code with only its imports changed; it still calls the torch_xla 1.x
names ``xm.xrt_world_size()`` and ``xm.get_ordinal()``, which torch_xla 2.x removed. It trains with
``devices=1`` and with ``tpu_cores=[1]`` in one process, on XLA on the host CPU, and checks its own results
(sampler, steps, loss). Here: it exits 0, and the process warned exactly once per removed name (Python's
once-per-place filter is off: ``PYTHONWARNINGS=always``, as ``-W always``), naming the torch_xla 2.x replacement. The
program is forked from the prewarmed interpreter (``helpers.xla``: torch imported, torch_xla not).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("accelkit_xla_spawn", reason="the accelkit-xla-spawn plugin is not installed")

from accelkit_xla_spawn.legacy_names import LEGACY_NAMES, warning_text  # noqa: E402

pytestmark = [pytest.mark.xla, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]

HERE = Path(__file__).resolve().parent


def test_the_guides_sampler_program_runs_on_devices_1_and_tpu_cores_1(tmp_path, prewarmed) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "XRT_", "TPU_", "ACCELKIT_"))}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1", PYTHONUNBUFFERED="1", PYTHONWARNINGS="always")
    proc = prewarmed.run([str(HERE / "seed_tpu_sampler.py")], cwd=tmp_path, env=env, timeout=600)
    output = f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, output
    result = json.loads(proc.stdout.split("SEED RESULT ", 1)[1])
    assert set(result["runs"]) == {"devices=1", "tpu_cores=[1]"}
    for run in result["runs"].values():
        assert run["samplers"][0]["num_replicas"] == 1 and run["samplers"][0]["rank"] == 0
    assert result["left_after_fit"] == []
    for legacy in LEGACY_NAMES[:2]:  # the two names the guide calls
        lines = [line for line in proc.stderr.splitlines() if f"TorchXLALegacyNameWarning: {legacy.shown_as}" in line]
        assert len(lines) == 1, (legacy.name, output)  # two fits, one warning per process
        assert lines[0].endswith(warning_text(legacy))
        assert f"Use {legacy.replacement} instead" in lines[0]
    assert "TorchXLALegacyNameWarning: xr.using_pjrt()" not in proc.stderr  # not called: no warning
