"""Tests of the xla_spawn_debug strategy on real XLA (PJRT_DEVICE=CPU).

The four scenarios run once per module, one after the other in one process (tests/scenario.py), forked from the
``prewarmed`` interpreter, which never imports torch_xla; the tests read their results. torch_xla's debug settings
are process-wide: the first scenario, ``clean``, meets torch_xla unimported and is the one whose debug variables and
log are checked. Its counters are process-wide too, and the report counts what each run added: each later scenario
trains graphs no earlier one compiled (``shapes`` its own batch sizes, ``item`` and ``fallback`` their own ops).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from helpers.xla import run_program, xla_env

# find_spec, not importorskip: importing torch_xla here would start it in the pytest process and set
# PJRT_DEVICE there, which steers accelerator="auto" to XLA in every test collected afterwards.
if importlib.util.find_spec("torch_xla") is None:
    pytest.skip("torch_xla is not installed", allow_module_level=True)

HERE = Path(__file__).resolve().parent
SCENARIOS = ("clean", "shapes", "item", "fallback")

pytestmark = [pytest.mark.slow, pytest.mark.xla]


#: Debug settings of the user's shell that would change what the scenarios measure.
DEBUG_VARIABLES = ("PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE", "XLA_IR_DEBUG", "XLA_HLO_DEBUG", "XLA_USE_BF16")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, prewarmed):
    """Run every scenario (in one process). Returns {kind: (completed process, root dir, its JSON line)}."""
    root = tmp_path_factory.mktemp("xla_debug")
    proc = run_program([str(HERE / "scenario.py"), str(root), *SCENARIOS, "--via-plugins", "item"],
                       xla_env(devices=None, unset=DEBUG_VARIABLES), 480, prewarmed)
    outcomes = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            outcome = json.loads(line)
            outcomes[outcome.pop("kind")] = outcome
    return {kind: (proc, root / kind, outcomes.get(kind)) for kind in SCENARIOS}


def _report(runs, kind):
    proc, root, outcome = runs[kind]
    assert proc.returncode == 0 and outcome is not None, f"scenario {kind} failed:\n{proc.stderr[-4000:]}"
    text_path = root / "xla_debug" / "fit-rank0.txt"
    data = json.loads(text_path.with_suffix(".json").read_text())
    return proc, text_path, text_path.read_text(), data


def test_report_has_metrics_and_debug_environment(runs):
    proc, path, text, data = _report(runs, "clean")
    # the full torch_xla metrics report is included
    assert "Metric: CompileTime" in text and "Metric: ExecuteTime" in text
    # the path is printed at the end of the run, with torch_xla's own debug log
    assert f"XLA debug report of replica 0: {path}" in proc.stderr
    log = path.parent / "pt_xla_debug.log"
    assert f"torch_xla debug log (PT_XLA_DEBUG_LEVEL=2): {log}" in proc.stderr
    # the variables reached torch_xla before its runtime started: its analysis was written to the file
    assert "Compilation Analysis" in log.read_text()
    assert data["environment"] == {"PT_XLA_DEBUG_LEVEL": "2", "PT_XLA_DEBUG_FILE": str(log), "XLA_IR_DEBUG": "1",
                                   "XLA_HLO_DEBUG": "1"}
    outcome = runs["clean"][2]
    assert outcome == {"strategy": "XLASingleDebugStrategy", "torch_xla_imported_before_fit": False,
                       "global_step": 12}


def test_clean_module_gets_no_flags(runs):
    _, _, text, data = _report(runs, "clean")
    assert data["findings"] == []
    assert "No problems found" in text
    assert data["summary"]["steps"] == 12
    assert data["summary"]["compilations_after_warmup"] == 0
    assert data["summary"]["compilations_in_warmup"] >= 1  # the step graph was compiled, and counted


def test_changing_shapes_are_flagged_with_steps_and_advice(runs):
    _, _, text, data = _report(runs, "shapes")
    codes = [f["code"] for f in data["findings"]]
    assert codes == ["recompilation"]
    # batch sizes 17, 18, 19, ...: every step after the 2 warm-up steps compiles a new graph
    assert data["summary"]["compile_steps_after_warmup"] == list(range(3, 13))
    finding = data["findings"][0]
    assert "step 3: 1 compilation(s); batch f32[19,8] i64[19] (step 2: f32[18,8] i64[18])" in finding["details"]
    assert "drop_last=True" in finding["advice"] and "pad" in finding["advice"]
    assert "[recompilation]" in text and "What to do:" in text


def test_item_per_step_is_flagged_with_advice(runs):
    # this scenario also checks that plugins="tpu_spawn_debug" selects the strategy
    _, _, _, data = _report(runs, "item")
    codes = [f["code"] for f in data["findings"]]
    assert codes == ["host_transfers"]
    assert data["summary"]["scalar_reads_per_step"] == pytest.approx(1.0)
    assert data["summary"]["compilations_after_warmup"] == 0
    assert ".item()" in data["findings"][0]["advice"]
    assert runs["item"][2]["strategy"] == "XLASingleDebugStrategy"


def test_cpu_fallback_is_flagged_with_op_and_count(runs):
    _, _, _, data = _report(runs, "fallback")
    codes = [f["code"] for f in data["findings"]]
    assert codes == ["cpu_fallback"]
    assert "aten::special_i0e: 12 call(s)" in data["findings"][0]["details"]
    assert "aten::_local_scalar_dense" not in json.dumps(data["findings"])  # .item() is not an op to replace
