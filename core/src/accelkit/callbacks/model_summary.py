"""``ModelSummary`` and ``RichModelSummary``: the table of the model's layers printed when ``fit`` starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import nn
from torch.nn.parameter import UninitializedParameter

from accelkit.callbacks.base import Callback

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.module.summary import ModelSummary as Summary
    from accelkit.trainer.trainer import Trainer

#: ``summary_data``: the table's columns, each ``(header, one string per layer)``
SummaryData = list[tuple[str, list[str]]]


def human_count(number: int) -> str:
    """``1234567`` → ``"1.2 M"`` (thousands ``K``, millions ``M``, billions ``B``, trillions ``T``)."""
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if number >= size:
            return f"{number / size:.1f} {unit}"
    return str(number)


def _params(module: nn.Module, count: int) -> str:
    """A layer's parameter count; ``?`` marks parameters not initialised yet (lazy layers)."""
    if not any(isinstance(p, UninitializedParameter) for p in module.parameters()):
        return human_count(count)
    return f"{human_count(count)} + ?" if count else "?"


def summary_data(summary: Summary, model: nn.Module) -> SummaryData:
    """The columns of ``summary`` (an :class:`accelkit.module.summary.ModelSummary` of ``model``) as
    Lightning's ``summarize`` hook receives them: index, Name, Type, Params, Mode."""
    names = summary.layer_names
    params = [_params(model.get_submodule(name), count) for name, count in zip(names, summary.param_nums, strict=True)]
    return [
        (" ", [str(i) for i in range(len(names))]),
        ("Name", list(names)),
        ("Type", list(summary.layer_types)),
        ("Params", params),
        ("Mode", ["train" if mode else "eval" for mode in summary.training_modes]),
    ]


def total_lines(total_parameters: int, trainable_parameters: int, model_size: float,
                total_training_modes: dict[str, int]) -> list[tuple[str, str]]:
    """``(value, label)`` of the totals under the table."""
    return [
        (human_count(trainable_parameters), "Trainable params"),
        (human_count(total_parameters - trainable_parameters), "Non-trainable params"),
        (human_count(total_parameters), "Total params"),
        (f"{model_size:,.3f}", "Total estimated model params size (MB)"),
        (str(total_training_modes.get("train", 0)), "Modules in train mode"),
        (str(total_training_modes.get("eval", 0)), "Modules in eval mode"),
    ]


def format_summary_table(summary_data: SummaryData, total_parameters: int, trainable_parameters: int,
                         model_size: float, total_training_modes: dict[str, int]) -> str:
    """The plain-text table of :class:`ModelSummary`: the layers (when there are any), then the totals."""
    lines: list[str] = []
    headers = [header for header, _ in summary_data]
    columns = [values for _, values in summary_data]
    rows = [list(row) for row in zip(*columns, strict=True)]
    if rows:
        widths = [max(len(cell) for cell in [header, *values]) for header, values in summary_data]
        right = {i for i, header in enumerate(headers) if header in (" ", "Params")}

        def line(cells: list[str]) -> str:
            return " | ".join(c.rjust(w) if i in right else c.ljust(w)
                              for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

        rule = "-" * max(len(line(r)) for r in [headers, *rows])
        lines += [rule, line(headers), rule, *map(line, rows), rule]
    totals = total_lines(total_parameters, trainable_parameters, model_size, total_training_modes)
    width = max(len(value) for value, _ in totals)
    lines += [f"{value.ljust(width)}  {label}" for value, label in totals]
    if any("?" in cell for header, values in summary_data if header == "Params" for cell in values):
        lines.append("? = uninitialized (lazy) parameters, not counted until the first forward pass")
    return "\n".join(lines)


class ModelSummary(Callback):
    """Print a summary of the model's layers when ``fit`` starts (Lightning's ``ModelSummary`` callback).

    The Trainer adds one (``max_depth=1``) unless ``enable_model_summary=False``; pass your own instance to
    replace it (``Trainer(callbacks=[ModelSummary(max_depth=2)])``). The summary is printed by the global-zero
    process only. Subclasses change the presentation by overriding :meth:`summarize`, which receives the
    table's columns and the totals.

    :param max_depth: how deep to list layers: 1 for the direct children, ``-1`` for every layer; ``0`` turns
        the summary off.
    :param summarize_kwargs: extra keyword arguments for :meth:`summarize` (the plain-text table takes none;
        a subclass that overrides :meth:`summarize` can).
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: object) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"{type(self).__name__}(max_depth={max_depth!r}): must be -1 (every layer), 0 (no "
                             "summary) or a positive int")
        self._check_summarize_kwargs(summarize_kwargs)
        self._max_depth = max_depth
        self._summarize_kwargs = summarize_kwargs

    def _check_summarize_kwargs(self, summarize_kwargs: Mapping[str, object]) -> None:
        if summarize_kwargs and type(self).summarize is ModelSummary.summarize:
            raise TypeError(f"{type(self).__name__}() got {', '.join(sorted(summarize_kwargs))}: the plain-text "
                            "summary takes no summarize arguments (override summarize() to use your own)")

    @property
    def max_depth(self) -> int:
        """How deep the table lists layers (``0``: no summary)."""
        return self._max_depth

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        if not self._max_depth or not trainer.is_global_zero:
            return
        from accelkit.module.summary import ModelSummary as Summary

        summary = Summary(pl_module, max_depth=self._max_depth)
        self.summarize(summary_data(summary, pl_module), summary.total_parameters, summary.trainable_parameters,
                       summary.model_size, summary.total_training_modes, **self._summarize_kwargs)

    @staticmethod
    def summarize(summary_data: SummaryData, total_parameters: int, trainable_parameters: int, model_size: float,
                  total_training_modes: dict[str, int], **summarize_kwargs: Any) -> None:
        """Show the summary: here, print the plain-text table.

        :param summary_data: the columns, ``(header, one string per layer)``: ``" "`` (index), ``"Name"``,
            ``"Type"``, ``"Params"``, ``"Mode"``.
        :param total_parameters: parameter elements of the model (each shared parameter once).
        :param trainable_parameters: those with ``requires_grad``.
        :param model_size: estimated size of the parameters in megabytes.
        :param total_training_modes: how many sub-modules are in ``"train"`` and in ``"eval"`` mode.
        """
        print(format_summary_table(summary_data, total_parameters, trainable_parameters, model_size,
                                   total_training_modes))


def configure_model_summary(callbacks: list[Callback], enabled: bool) -> None:
    """The Trainer's default summary (Lightning's): add a :class:`ModelSummary` to ``callbacks`` when
    ``enabled`` (``enable_model_summary``) and none is there (a :class:`RichModelSummary` when the progress bar
    is a :class:`~accelkit.callbacks.RichProgressBar`). A summary callback passed although the summary is
    off (``enable_model_summary=False``, ``barebones=True``) still runs, with a warning saying so."""
    given = [c for c in callbacks if isinstance(c, ModelSummary)]
    if enabled and not given:
        from accelkit.callbacks.progress.rich_progress import RichProgressBar

        rich_bar = any(isinstance(c, RichProgressBar) for c in callbacks)
        callbacks.append(RichModelSummary() if rich_bar else ModelSummary())
    elif given and not enabled:
        import warnings

        warnings.warn(f"the model summary is off (enable_model_summary=False or barebones=True), but the callbacks "
                      f"include {type(given[0]).__name__}: it runs (only the Trainer's default summary is off); "
                      "remove it from the callbacks to print no summary", UserWarning, stacklevel=3)


class RichModelSummary(ModelSummary):
    """:class:`ModelSummary` drawn as a table with the `rich <https://github.com/Textualize/rich>`_ library, an
    optional extra (``pip install rich`` or ``pip install "accelkit[rich]"``); without it, constructing this
    callback raises ``ImportError``.

    :param max_depth: as for :class:`ModelSummary`.
    :param summarize_kwargs: ``header_style`` (a rich style for the table's header, default ``"bold magenta"``).
    """

    _KWARGS = ("header_style",)

    def __init__(self, max_depth: int = 1, **summarize_kwargs: object) -> None:
        try:
            import rich  # noqa: F401
        except ImportError:
            raise ImportError("RichModelSummary draws its table with the rich package, which is not installed: "
                              "pip install rich (or the core's extra: pip install 'accelkit[rich]'), or use "
                              "ModelSummary for the plain-text table") from None
        super().__init__(max_depth, **summarize_kwargs)

    def _check_summarize_kwargs(self, summarize_kwargs: Mapping[str, object]) -> None:
        unknown = sorted(set(summarize_kwargs) - set(self._KWARGS))
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unknown argument(s) {', '.join(unknown)}; it takes "
                            f"max_depth and {', '.join(self._KWARGS)}")

    @staticmethod
    def summarize(summary_data: SummaryData, total_parameters: int, trainable_parameters: int, model_size: float,
                  total_training_modes: dict[str, int], **summarize_kwargs: Any) -> None:
        """Print the layers as a rich table, then the totals (arguments as for :meth:`ModelSummary.summarize`)."""
        from rich import get_console
        from rich.table import Table

        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for header, _ in summary_data:
            table.add_column(header, justify="right" if header in (" ", "Params") else "left",
                             style="dim" if header == " " else None, no_wrap=header == "Name")
        for row in zip(*(values for _, values in summary_data), strict=True):
            table.add_row(*row)
        console = get_console()
        if table.row_count:
            console.print(table)
        grid = Table.grid(padding=(0, 1))
        grid.add_column()
        grid.add_column()
        for value, label in total_lines(total_parameters, trainable_parameters, model_size, total_training_modes):
            grid.add_row(f"[bold]{value}[/]", label)
        console.print(grid)
