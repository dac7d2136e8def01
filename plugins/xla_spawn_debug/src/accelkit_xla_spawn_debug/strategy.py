"""``strategy="xla_spawn_debug"`` (``plugins="tpu_spawn_debug"``): an XLA run with torch_xla's debug output on
and a per-replica report at the end.

torch_xla reads its debug variables when its runtime first uses them, so they must be in the environment
before any replica imports torch_xla. :meth:`XLADebugMixin.launch` sets them in the launching process before
the replicas start (they inherit the environment); this module never imports torch_xla in that process itself.
Inside each replica a :class:`~accelkit_xla_spawn_debug.monitor.StepMonitor` reads torch_xla's counters at
every ``step_end`` and, at teardown, the replica writes ``<dir>/<stage>-rank<N>.txt`` (diagnosis, per-step
table, full ``metrics_report()``) and a ``.json`` twin. The launching process prints the paths when the run ends.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelkit_xla_spawn.strategy import XLASingleStrategy, XLASpawnStrategy
from accelkit_xla_spawn_debug.monitor import (
    StepMonitor,
    diagnose,
    findings_to_json,
    render_report,
    summary,
    windows_to_json,
)

#: name of torch_xla's own debug log inside the report folder (all replicas append to it)
DEBUG_LOG_NAME = "pt_xla_debug.log"


class XLADebugMixin:
    """The debugging behaviour, layered over an XLA strategy (see the module docstring).

    :param output_dir: folder for the reports and torch_xla's debug log (default:
        ``<Trainer default_root_dir>/xla_debug``).
    :param warmup_steps: training steps whose compilations are expected (default 2: the first step traces the
        graph, and optimizers with lazily created state change it once more).
    :param debug_level: ``PT_XLA_DEBUG_LEVEL``: 1 for compilation/execution analysis, 2 to add the
        post-compilation analysis (graph sizes).
    :param ir_debug: set ``XLA_IR_DEBUG=1`` and ``XLA_HLO_DEBUG=1`` (Python frames in IR/HLO metadata, shown in
        graph dumps and profiles; makes tracing slower).
    :param transfer_step_fraction: flag device->host transfers when at least this fraction of the steps after
        warm-up had one.
    """

    def __init__(self, output_dir: str | os.PathLike | None = None, warmup_steps: int = 2, debug_level: int = 2,
                 ir_debug: bool = True, transfer_step_fraction: float = 0.5, **options: Any) -> None:
        super().__init__(**options)
        if not isinstance(warmup_steps, int) or isinstance(warmup_steps, bool) or warmup_steps < 0:
            raise ValueError(f"warmup_steps={warmup_steps!r} must be an int >= 0 (2 suits most optimizers).")
        if debug_level not in (1, 2):
            raise ValueError(f"debug_level={debug_level!r} must be 1 (compile/execute analysis) or 2 (adds "
                             "post-compilation analysis).")
        if not 0.0 < float(transfer_step_fraction) <= 1.0:
            raise ValueError(f"transfer_step_fraction={transfer_step_fraction!r} must be in (0, 1].")
        self.output_dir = None if output_dir is None else str(output_dir)
        self.warmup_steps = warmup_steps
        self.debug_level = debug_level
        self.ir_debug = bool(ir_debug)
        self.transfer_step_fraction = float(transfer_step_fraction)
        self.run_label = "run"
        self.applied_environment: dict[str, str] = {}
        self._monitor: StepMonitor | None = None
        self._saved_environment: dict[str, str | None] = {}

    # ----------------------------------------------------------------- launching process
    def debug_environment(self) -> dict[str, str]:
        """The torch_xla variables this strategy turns on (values that the user already set win)."""
        env = {
            "PT_XLA_DEBUG_LEVEL": str(self.debug_level),
            "PT_XLA_DEBUG_FILE": str(Path(self.output_dir or ".") / DEBUG_LOG_NAME),
        }
        if self.ir_debug:
            env.update({"XLA_IR_DEBUG": "1", "XLA_HLO_DEBUG": "1"})
        return env

    def report_path(self, rank: int) -> Path:
        """Where replica ``rank`` writes its report (``.txt``; the ``.json`` twin sits beside it)."""
        return Path(self.output_dir or ".") / f"{self.run_label}-rank{rank}.txt"

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Set the debug variables, run the replicas, and print the report paths when they end."""
        if self.output_dir is None:
            self.output_dir = str(Path(self.root_dir or os.getcwd()) / "xla_debug")
        Path(self.output_dir).mkdir(parents=True, exist_ok=True)
        if self.stage:
            self.run_label = self.stage  # set by the Trainer before launching ("fit", "validate", ...)
        wanted = self.debug_environment()
        log = Path(wanted["PT_XLA_DEBUG_FILE"])
        if log.exists():
            log.unlink()  # torch_xla appends; start this run's log empty
        saved = {name: os.environ.get(name) for name in wanted}
        self.applied_environment = {}
        for name, value in wanted.items():
            if os.environ.get(name) is None:
                os.environ[name] = value
            self.applied_environment[name] = os.environ[name]
        if "torch_xla" in sys.modules and not self.launches_workers:
            warnings.warn(
                "torch_xla was imported before the xla_spawn_debug strategy could set PT_XLA_DEBUG_LEVEL and "
                "friends; if the XLA runtime already ran, torch_xla's debug log stays empty (the report is still "
                "written). Import torch_xla only inside the module's hooks, or use devices>1.",
                UserWarning,
                stacklevel=2,
            )
        for rank in range(self.world_size):
            for suffix in (".txt", ".json"):
                stale = self.report_path(rank).with_suffix(suffix)
                if stale.exists():
                    stale.unlink()
        self._saved_environment = saved
        try:
            return super().launch(function, *args, **kwargs)
        finally:
            if not self.run_context.outlives_launch:  # else the run, and the variables, go on until end_run
                self._restore_environment()
                self._announce()

    def _restore_environment(self) -> None:
        """Put back the debug variables as they were before :meth:`launch`."""
        for name, value in self._saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environment = {}

    def _announce(self) -> None:
        lines = []
        for rank in range(self.world_size):
            path = self.report_path(rank)
            if not path.exists():
                continue
            try:
                data = json.loads(path.with_suffix(".json").read_text())
                codes = [f["code"] for f in data["findings"]]
                note = f"{len(codes)} finding(s)" + (f": {', '.join(codes)}" if codes else "")
            except (OSError, ValueError, KeyError):
                note = "no summary"
            lines.append(f"accelkit: XLA debug report of replica {rank}: {path} ({note})")
        log = Path(self.applied_environment.get("PT_XLA_DEBUG_FILE", ""))
        if log.name and log.is_file():
            level = self.applied_environment.get("PT_XLA_DEBUG_LEVEL")
            lines.append(f"accelkit: torch_xla debug log (PT_XLA_DEBUG_LEVEL={level}): {log}")
        if not lines:
            lines.append(f"accelkit: no XLA debug report was written in {self.output_dir}")
        print("\n".join(lines), file=sys.stderr, flush=True)

    # ----------------------------------------------------------------- replica
    def setup_environment(self) -> None:
        """Set up the device, then take the monitor's first reading."""
        super().setup_environment()
        self._monitor = StepMonitor(self.warmup_steps)
        self._monitor.start()

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """A loop starts: open a new monitoring window for it."""
        if self._monitor is not None:
            self._monitor.on_stage(stage)
        return super().process_dataloader(dataloader, stage)

    def batch_to_device(self, batch: Any) -> Any:
        """Record the batch's shapes, then move it."""
        if self._monitor is not None:
            self._monitor.on_batch(batch)
        return super().batch_to_device(batch)

    def step_end(self) -> None:
        """Cut the graph, then read the counters for this step."""
        super().step_end()
        if self._monitor is not None:
            self._monitor.on_step_end()

    def end_run(self) -> None:
        """A Fabric run ended: write this replica's report; where the script itself was the run (``launch()``
        without a function, on one device), print where it is, as :meth:`launch` does for a function's run."""
        if self._monitor is not None:
            try:
                self._write_report()
            finally:
                self._monitor = None
        if self.run_context.outlives_launch:
            self._restore_environment()
            if self.global_rank == 0:
                self._announce()

    def teardown(self) -> None:
        """Write this replica's report, then tear down."""
        try:
            if self._monitor is not None:
                self._write_report()
        finally:
            self._monitor = None
            super().teardown()

    def _write_report(self) -> None:
        import torch_xla
        import torch_xla.debug.metrics as met

        torch_xla.sync()
        monitor = self._monitor
        assert monitor is not None
        monitor.finish()
        rank, world = self.global_rank, self.world_size
        findings = diagnose(monitor.windows, monitor.warmup_steps, self.transfer_step_fraction)
        text = render_report(rank, world, monitor.windows, findings, monitor.warmup_steps, met.metrics_report(),
                             self.applied_environment)
        path = self.report_path(rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.with_suffix(".json").write_text(json.dumps({
            "rank": rank,
            "world_size": world,
            "summary": summary(monitor.windows, monitor.warmup_steps),
            "findings": findings_to_json(findings),
            "windows": windows_to_json(monitor.windows),
            "environment": self.applied_environment,
        }, indent=1))


class XLASingleDebugStrategy(XLADebugMixin, XLASingleStrategy):
    """The debug strategy on one XLA core, in this process (what ``xla_spawn_debug`` becomes for one device).

    The debug variables are set in :meth:`launch`, before the run's first use of torch_xla; if the calling
    script imported torch_xla and used a device before ``fit()``, torch_xla's own log may stay empty and a
    warning says so, but the report is written either way.
    """


class XLASpawnDebugStrategy(XLADebugMixin, XLASpawnStrategy):
    """``xla_spawn_debug``: :class:`~accelkit_xla_spawn.strategy.XLASpawnStrategy` with debug output and reports.

    With one device (``devices=1`` or ``devices=[k]`` on one host) it becomes :class:`XLASingleDebugStrategy`
    when connected: one core runs in this process, without a spawn.
    """

    def connect(self, accelerator: Any, devices: list[int], num_nodes: int, precision: Any) -> None:
        """Connect; a single device turns this object into an :class:`XLASingleDebugStrategy`."""
        if len(devices) == 1 and num_nodes == 1 and not os.environ.get("TPU_WORKER_HOSTNAMES", "").count(","):
            self.__class__ = XLASingleDebugStrategy
            XLASingleDebugStrategy.connect(self, accelerator, devices, num_nodes, precision)
            return
        super().connect(accelerator, devices, num_nodes, precision)
