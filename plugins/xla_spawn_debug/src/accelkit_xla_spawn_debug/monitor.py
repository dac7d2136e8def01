"""Per-step bookkeeping of torch_xla's counters and the diagnosis built from it.

:class:`StepMonitor` runs inside a worker. It reads torch_xla's metrics (imported lazily, on first use)
between "windows" of work: one training step (ended by the strategy's ``step_end``), one evaluation pass,
or the time between them (epoch-end logging, checkpoints). :func:`diagnose` turns the windows into findings a
person can act on; :func:`render_report` writes them with the full metrics report.

Nothing here imports ``torch_xla`` at module import time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: counters whose name starts with this are ops that ran on the CPU because XLA has no lowering for them
FALLBACK_PREFIX = "aten::"
#: the fallback counter of ``Tensor.item()`` / ``float(t)`` / ``bool(t)``: a device->host read, not an op to replace
SCALAR_READ_COUNTER = "aten::_local_scalar_dense"


@dataclass
class Window:
    """Counter deltas over one stretch of work.

    :param kind: ``"train"`` (one optimizer step), ``"eval"`` (one evaluation pass) or ``"between"``.
    :param index: the step number (1-based, counted by the monitor) or the evaluation pass number.
    :param stage: the loop stage (``"fit"``, ``"validate"``, ...).
    :param compiles: new ``CompileTime`` samples (graphs compiled).
    :param executes: new ``ExecuteTime`` samples (graphs run).
    :param transfers_from_device: new ``TransferFromDeviceTime`` samples (device->host copies).
    :param scalar_reads: increase of the ``aten::_local_scalar_dense`` counter (``.item()`` and friends).
    :param fallbacks: increase of each other ``aten::`` counter (ops run on the CPU).
    :param shapes: the distinct batch shape signatures seen in the window, in order.
    """

    kind: str
    index: int
    stage: str
    compiles: int = 0
    executes: int = 0
    transfers_from_device: int = 0
    scalar_reads: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)
    shapes: list[str] = field(default_factory=list)


@dataclass
class Finding:
    """One problem found, with the evidence and what to do about it.

    :param code: ``"recompilation"``, ``"cpu_fallback"``, ``"host_transfers"`` or ``"eval_recompilation"``.
    :param title: one line.
    :param details: lines of evidence (steps, shapes, counts).
    :param advice: what to change.
    """

    code: str
    title: str
    details: list[str]
    advice: str


def shape_signature(batch: Any) -> str:
    """A short text naming the shapes and dtypes of the tensors in ``batch`` (``"f32[32,8] i64[32]"``)."""
    import torch

    from accelkit.utilities import apply_to_tensors

    parts: list[str] = []

    def visit(t: torch.Tensor) -> torch.Tensor:
        dtype = str(t.dtype).replace("torch.", "")
        short = {"float32": "f32", "float64": "f64", "bfloat16": "bf16", "float16": "f16", "int64": "i64",
                 "int32": "i32", "bool": "bool", "uint8": "u8"}.get(dtype, dtype)
        parts.append(f"{short}[{','.join(str(d) for d in t.shape)}]")
        return t

    apply_to_tensors(batch, visit)
    return " ".join(parts) if parts else "(no tensors)"


def read_counters() -> dict[str, Any]:
    """The current totals of the torch_xla counters and metrics the monitor follows."""
    import torch_xla.debug.metrics as met

    def samples(name: str) -> int:
        data = met.metric_data(name)
        return int(data[0]) if data else 0

    fallbacks = {}
    for name in met.counter_names():
        if name.startswith(FALLBACK_PREFIX):
            fallbacks[name] = int(met.counter_value(name) or 0)
    return {
        "compiles": samples("CompileTime"),
        "executes": samples("ExecuteTime"),
        "transfers_from_device": samples("TransferFromDeviceTime"),
        "scalar_reads": fallbacks.pop(SCALAR_READ_COUNTER, 0),
        "fallbacks": fallbacks,
    }


class StepMonitor:
    """Follows torch_xla's counters window by window inside one worker.

    :param warmup_steps: training steps whose compilations are expected (the first step traces the graph; an
        optimizer that creates its state lazily, such as Adam, changes the graph once more on the next one).
    """

    def __init__(self, warmup_steps: int = 2) -> None:
        if not isinstance(warmup_steps, int) or isinstance(warmup_steps, bool) or warmup_steps < 0:
            raise ValueError(f"warmup_steps={warmup_steps!r} must be an int >= 0 (2 suits most optimizers).")
        self.warmup_steps = warmup_steps
        self.windows: list[Window] = []
        self.steps = 0
        self.eval_passes = 0
        self._last: dict[str, Any] | None = None
        self._current = Window("between", 0, "")

    # ----------------------------------------------------------------- events
    def start(self) -> None:
        """Take the first reading (after the device is set up)."""
        self._last = read_counters()

    def _close(self) -> Window:
        now = read_counters()
        last = self._last or {"compiles": 0, "executes": 0, "transfers_from_device": 0, "scalar_reads": 0,
                              "fallbacks": {}}
        window = self._current
        window.compiles = now["compiles"] - last["compiles"]
        window.executes = now["executes"] - last["executes"]
        window.transfers_from_device = now["transfers_from_device"] - last["transfers_from_device"]
        window.scalar_reads = now["scalar_reads"] - last["scalar_reads"]
        window.fallbacks = {name: value - last["fallbacks"].get(name, 0) for name, value in now["fallbacks"].items()
                            if value - last["fallbacks"].get(name, 0) > 0}
        self._last = now
        keep = (window.kind != "between" or window.compiles or window.transfers_from_device or window.fallbacks
                or window.scalar_reads)
        if keep:
            self.windows.append(window)
        return window

    def on_stage(self, stage: str) -> None:
        """A loop starts iterating its data (``"fit"`` or an evaluation stage)."""
        self._close()
        if stage == "fit":
            self._current = Window("train", self.steps + 1, stage)
        else:
            self.eval_passes += 1
            self._current = Window("eval", self.eval_passes, stage)

    def on_batch(self, batch: Any) -> None:
        """A batch is about to be moved to the device: remember its shapes."""
        signature = shape_signature(batch)
        if signature not in self._current.shapes:
            self._current.shapes.append(signature)

    def on_step_end(self) -> None:
        """An optimizer step finished and its graph was cut."""
        self.steps += 1
        if self._current.kind != "train":  # a step outside a fit loop we saw start: count it anyway
            self._current = Window("train", self.steps, "fit", shapes=self._current.shapes)
        self._current.index = self.steps
        self._close()
        self._current = Window("train", self.steps + 1, "fit")

    def finish(self) -> None:
        """Close the last window (at teardown)."""
        if self._current.kind == "train" and not self._current.shapes:
            # the window opened after the last step end saw no batch: it is not a step
            self._current = Window("between", 0, self._current.stage)
        if self._last is not None:
            self._close()
        self._current = Window("between", 0, "")


def _steps_text(steps: list[int], limit: int = 20) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (f", ... ({len(steps) - limit} more)" if len(steps) > limit else "")


def diagnose(windows: list[Window], warmup_steps: int, transfer_step_fraction: float = 0.5) -> list[Finding]:
    """Findings from a worker's windows.

    :param warmup_steps: compilations in training steps up to this number are expected.
    :param transfer_step_fraction: flag device->host transfers when at least this fraction of the training
        steps after warm-up had one (the core reads logged values every ``log_every_n_steps``; that alone is
        not flagged unless it happens on most steps).
    """
    findings: list[Finding] = []
    train = [w for w in windows if w.kind == "train"]
    steady = [w for w in train if w.index > warmup_steps]
    findings += _recompilations(train, steady, warmup_steps)
    findings += _eval_recompilations(windows)
    findings += _cpu_fallbacks(windows)
    findings += _host_transfers(windows, steady, findings, transfer_step_fraction)
    return findings


def _recompilations(train: list[Window], steady: list[Window], warmup_steps: int) -> list[Finding]:
    """Compilations in training steps after warm-up, with the likely cause."""
    findings: list[Finding] = []
    recompiled = [w for w in steady if w.compiles > 0]
    if recompiled:
        details = []
        previous_shapes: dict[int, list[str]] = {w.index: w.shapes for w in train}
        changed = 0
        for w in recompiled[:20]:
            before = previous_shapes.get(w.index - 1)
            line = f"step {w.index}: {w.compiles} compilation(s); batch {' | '.join(w.shapes) or '?'}"
            if before is not None and before != w.shapes:
                line += f" (step {w.index - 1}: {' | '.join(before) or '?'})"
                changed += 1
            details.append(line)
        if len(recompiled) > 20:
            details.append(f"... and {len(recompiled) - 20} more steps")
        total = sum(w.compiles for w in recompiled)
        shapes_seen = sorted({s for w in steady for s in w.shapes})
        if changed or len(shapes_seen) > 1:
            advice = (
                "The batch shapes change between steps, and XLA compiles a new graph for every new shape. Keep "
                "shapes fixed: use a constant batch size with DataLoader(drop_last=True) so the last batch is not "
                "smaller, and pad variable-length inputs to a fixed length (or a few bucket lengths)."
            )
        else:
            advice = (
                "The graph changed although the batch shapes did not: look for Python control flow that depends "
                "on tensor values or on the step number, or code paths that differ between steps. The debug log "
                "(PT_XLA_DEBUG_FILE) names the Python frame that caused each compilation."
            )
        findings.append(Finding(
            "recompilation",
            f"{total} compilation(s) after warm-up, in {len(recompiled)} of {len(steady)} steps after step "
            f"{warmup_steps} (steps {_steps_text([w.index for w in recompiled])})",
            details, advice))
    return findings


def _eval_recompilations(windows: list[Window]) -> list[Finding]:
    """Evaluation passes after the first that compiled again."""
    findings: list[Finding] = []
    eval_again = [w for w in windows if w.kind == "eval" and w.index > 1 and w.compiles > 0]
    if eval_again:
        findings.append(Finding(
            "eval_recompilation",
            f"{sum(w.compiles for w in eval_again)} compilation(s) in evaluation passes after the first "
            f"(passes {_steps_text([w.index for w in eval_again])})",
            [f"{w.stage} pass {w.index}: {w.compiles} compilation(s); batch {' | '.join(w.shapes) or '?'}"
             for w in eval_again[:20]],
            "Evaluation graphs should compile once. Keep evaluation batch shapes fixed (drop_last=True or "
            "padding) and avoid value-dependent Python control flow in validation_step/test_step."))
    return findings


def _cpu_fallbacks(windows: list[Window]) -> list[Finding]:
    """Operations that fell back to the CPU, most called first."""
    findings: list[Finding] = []
    totals: dict[str, int] = {}
    for w in windows:
        for name, count in w.fallbacks.items():
            totals[name] = totals.get(name, 0) + count
    if totals:
        ordered = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
        findings.append(Finding(
            "cpu_fallback",
            f"{len(ordered)} operation(s) have no XLA lowering and ran on the CPU "
            f"({sum(totals.values())} call(s) in all)",
            [f"{name}: {count} call(s)" for name, count in ordered],
            "Each call copies its inputs to the host, runs on the CPU and copies back, cutting the graph. Replace "
            "these ops with ones XLA supports (see the torch_xla op coverage), or move the work out of the "
            "training step (precompute it in the Dataset/DataLoader on the CPU)."))
    return findings


def _host_transfers(windows: list[Window], steady: list[Window], earlier: list[Finding],
                    transfer_step_fraction: float) -> list[Finding]:
    """Device->host transfers during training steps, not counting those the CPU fallbacks (the last of ``earlier``)
    explain."""
    findings: list[Finding] = []
    with_transfers = [w for w in steady if w.transfers_from_device > 0 or w.scalar_reads > 0]
    totals = {name for w in windows for name in w.fallbacks}
    fallback_steps = [w for w in steady if w.fallbacks]
    explained = bool(fallback_steps) and not any(w.scalar_reads for w in steady) and all(
        w.transfers_from_device <= sum(w.fallbacks.values()) for w in with_transfers)
    if explained and totals:
        earlier[-1].details.append(
            f"these calls also account for the {sum(w.transfers_from_device for w in steady)} device->host "
            f"transfers in the {len(steady)} steps after warm-up")
    elif steady and len(with_transfers) >= transfer_step_fraction * len(steady):
        reads = sum(w.scalar_reads for w in steady)
        transfers = sum(w.transfers_from_device for w in steady)
        executes = sum(w.executes for w in steady)
        findings.append(Finding(
            "host_transfers",
            f"device->host transfers in {len(with_transfers)} of {len(steady)} steps after warm-up "
            f"({transfers / len(steady):.2f} transfers/step, {reads / len(steady):.2f} scalar reads/step)",
            [f"TransferFromDeviceTime samples: {transfers} in {len(steady)} steps",
             f"scalar reads ({SCALAR_READ_COUNTER}: .item(), float(t), int(t), bool(t), print(t)): {reads}",
             f"graph executions: {executes / len(steady):.2f} per step (1 is ideal; more means the step's graph "
             "was cut in pieces)",
             f"steps with transfers: {_steps_text([w.index for w in with_transfers])}"],
            "Each read forces the pending graph to run and waits for the device. Avoid .item(), float(tensor), "
            "print(tensor) and `if tensor:` inside training_step; keep values as tensors and record them with "
            "self.log(...), which accelkit reads only every log_every_n_steps (raise it if it is small)."))
    return findings


def summary(windows: list[Window], warmup_steps: int) -> dict[str, Any]:
    """Headline numbers: steps, compilations in and after warm-up, transfers and executions per step."""
    train = [w for w in windows if w.kind == "train"]
    steady = [w for w in train if w.index > warmup_steps]
    n = max(len(steady), 1)
    return {
        "steps": len(train),
        "warmup_steps": warmup_steps,
        "compilations_total": sum(w.compiles for w in windows),
        "compilations_in_warmup": sum(w.compiles for w in train if w.index <= warmup_steps),
        "compilations_after_warmup": sum(w.compiles for w in steady),
        "compilations_in_eval": sum(w.compiles for w in windows if w.kind == "eval"),
        "transfers_per_step": sum(w.transfers_from_device for w in steady) / n,
        "scalar_reads_per_step": sum(w.scalar_reads for w in steady) / n,
        "executions_per_step": sum(w.executes for w in steady) / n,
        "compile_steps_after_warmup": [w.index for w in steady if w.compiles > 0],
    }


def render_report(rank: int, world_size: int, windows: list[Window], findings: list[Finding],
                  warmup_steps: int, metrics_report: str, environment: dict[str, str]) -> str:
    """The text of one replica's report: diagnosis first, then the per-step table and the full metrics report."""
    head = summary(windows, warmup_steps)
    lines = [
        f"accelkit XLA debug report - replica {rank} of {world_size}",
        "=" * 72,
        f"training steps: {head['steps']} (warm-up: first {warmup_steps})",
        f"compilations: {head['compilations_total']} in all; {head['compilations_in_warmup']} during warm-up, "
        f"{head['compilations_after_warmup']} after warm-up, {head['compilations_in_eval']} in evaluation",
        f"per step after warm-up: {head['executions_per_step']:.2f} graph executions, "
        f"{head['transfers_per_step']:.2f} device->host transfers, {head['scalar_reads_per_step']:.2f} scalar reads",
        "debug environment: " + (", ".join(f"{k}={v}" for k, v in sorted(environment.items())) or "(none)"),
        "",
        "DIAGNOSIS",
        "-" * 72,
    ]
    if not findings:
        lines.append("No problems found: no compilations after warm-up, no CPU fallbacks, no per-step "
                     "device->host transfers.")
    for number, finding in enumerate(findings, 1):
        lines.append(f"{number}. [{finding.code}] {finding.title}")
        lines.extend(f"     {d}" for d in finding.details)
        lines.append(f"   What to do: {finding.advice}")
        lines.append("")
    lines += ["", "PER WINDOW (training steps, evaluation passes, work between them)", "-" * 72,
              f"{'window':<16}{'compiles':>9}{'executes':>9}{'to-host':>9}{'scalar':>8}  batch shapes / fallbacks"]
    for w in windows:
        name = {"train": f"step {w.index}", "eval": f"{w.stage} {w.index}", "between": "between"}[w.kind]
        extra = " | ".join(w.shapes)
        if w.fallbacks:
            extra += "  fallbacks: " + ", ".join(f"{k}x{v}" for k, v in sorted(w.fallbacks.items()))
        lines.append(f"{name:<16}{w.compiles:>9}{w.executes:>9}{w.transfers_from_device:>9}{w.scalar_reads:>8}  "
                     f"{extra}")
    lines += ["", "TORCH_XLA METRICS REPORT", "-" * 72, metrics_report]
    return "\n".join(lines) + "\n"


def windows_to_json(windows: list[Window]) -> list[dict[str, Any]]:
    """The windows as plain dicts."""
    return [asdict(w) for w in windows]


def findings_to_json(findings: list[Finding]) -> list[dict[str, Any]]:
    """The findings as plain dicts."""
    return [asdict(f) for f in findings]
