"""``TQDMProgressBar``: the Trainer's default progress bar, drawn with tqdm."""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TextIO, cast

from accelkit.callbacks.progress.progress_bar import RefreshingProgressBar, check_count
from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer

# tqdm.auto draws notebook widgets, which need ipywidgets; without it the terminal bar is the one that works
if importlib.util.find_spec("ipywidgets") is not None:  # pragma: no cover - not installed in the test environment
    from tqdm.auto import tqdm as _tqdm
else:
    from tqdm import tqdm as _tqdm


class ShowWarning(Protocol):
    """What :data:`warnings.showwarning` is (the bars route warnings above them through one)."""

    def __call__(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None: ...


#: width numbers are padded to, so the bar's text does not jump as values change
_NUMBER_WIDTH = 5

#: the environment variable that chooses the bar's output: ``bar`` (tqdm's redrawn line), ``lines`` (one plain line
#: per epoch and per evaluation); unset, lines when standard output is not a terminal (see
#: :func:`~accelkit.callbacks.progress.tqdm_progress.plain_lines`)
PROGRESS_VARIABLE = "ACCELKIT_PROGRESS"


def plain_lines() -> bool:
    """Whether the progress is printed as plain lines rather than redrawn bars: as :data:`PROGRESS_VARIABLE` says,
    else when standard output is not a terminal (a file, a pipe, a CI or SLURM log), where ``\\r`` and cursor
    moves would pile up; a Jupyter kernel's output, which draws bars, counts as a terminal."""
    choice = os.environ.get(PROGRESS_VARIABLE, "").strip().lower()
    if choice in ("bar", "lines"):
        return choice == "lines"
    if choice:
        raise ConfigurationError(f"{PROGRESS_VARIABLE}={choice!r} is not understood; use 'bar' (redrawn bars), "
                                 "'lines' (one plain line per epoch) or leave it unset (lines when standard output "
                                 "is not a terminal)")
    if "ipykernel" in sys.modules:
        return False
    try:
        return not sys.stdout.isatty()
    except (AttributeError, ValueError):  # no stdout, or a closed one
        return True


class _Discard(io.TextIOBase):
    """A text stream that keeps nothing: where the bars draw while the progress is printed as plain lines."""

    def write(self, text: str) -> int:
        return len(text)


_DISCARD = _Discard()


class Tqdm(_tqdm):
    """A tqdm bar whose numbers in the postfix keep their width (``0.5`` shows as ``0.500``)."""

    @staticmethod
    def format_num(n: object) -> str:
        """``n`` as tqdm formats it, floats (and numeric strings) padded with zeros to five characters."""
        text = n if isinstance(n, str) else _tqdm.format_num(n)
        if isinstance(n, (float, str)) and "e" not in text:
            try:
                float(text)
            except ValueError:
                return text
            if "." not in text:
                text += "."
            text = text.ljust(_NUMBER_WIDTH, "0")
        return text


class TQDMProgressBar(RefreshingProgressBar):
    """The default progress bar (Lightning's ``TQDMProgressBar``): tqdm bars on standard output for training
    (``Epoch N``, batches done of the epoch's count, and :meth:`~accelkit.callbacks.ProgressBar.get_metrics`),
    validation (under the training
    bar inside ``fit``), the sanity check, test and prediction. A loader without a length shows the batches
    done without a total.

    Change it by passing your own instance (``Trainer(callbacks=[TQDMProgressBar(refresh_rate=10)])``) or a
    subclass that overrides :meth:`~accelkit.callbacks.ProgressBar.get_metrics` or the ``init_*_tqdm`` methods, which
    build the bars::

        class LitProgressBar(TQDMProgressBar):
            def init_validation_tqdm(self):
                bar = super().init_validation_tqdm()
                bar.set_description("running validation ...")
                return bar

    The numbers move every ``refresh_rate`` batches; tqdm redraws the line at most ten times a second, and
    :meth:`~accelkit.callbacks.ProgressBar.get_metrics` is asked when a redraw is due, so a bar costs a few attribute
    reads per batch. The
    metrics are ``trainer.progress_bar_metrics``, read from the device when a redraw is due (as in Lightning).

    :param refresh_rate: move the bars every this many batches; ``0`` hides them.
    :param process_position: the bars' line offset (two lines per position), for several bars in one terminal.
    :param leave: keep each epoch's finished training bar on screen (a new bar per epoch); by default one bar
        is reused across epochs.
    """

    #: the bars' layout (tqdm's ``bar_format``)
    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        super().__init__(refresh_rate)
        check_count(self, "process_position", process_position)
        self._process_position = process_position
        self._leave = leave
        self._train_progress_bar: Tqdm | None = None
        self._val_progress_bar: Tqdm | None = None
        self._test_progress_bar: Tqdm | None = None
        self._predict_progress_bar: Tqdm | None = None
        self._train_open = False  # the training bar is drawing (not closed at an epoch's end)
        self._plain = False  # plain lines instead of bars (plain_lines(), decided in setup)
        self._train_batches = 0  # batches of the running epoch, for the plain lines
        self._batches = 0  # batches of the running evaluation, for the plain lines
        self._shown_warning: ShowWarning | None = None  # warnings.showwarning before the bars routed warnings
        self._show: ShowWarning | None = None  # the routing function installed

    def __getstate__(self) -> dict[str, object]:
        state = super().__getstate__()  # tqdm bars hold the terminal's stream: spawned workers make their own
        state.update(_train_progress_bar=None, _val_progress_bar=None, _test_progress_bar=None,
                     _predict_progress_bar=None, _train_open=False, _shown_warning=None, _show=None)
        return state

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """As :meth:`ProgressBar.setup`; then choose bars or plain lines
        (:func:`~accelkit.callbacks.progress.tqdm_progress.plain_lines`) and, when bars are
        drawn, print warnings above them rather than inside their line."""
        super().setup(trainer, pl_module, stage)
        self._plain = plain_lines()
        if self.is_enabled and not self._plain:
            self._route_warnings()

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Give warnings back their own printing."""
        self._restore_warnings()

    @property
    def _stream(self) -> io.TextIOBase | TextIO:
        """Where the bars draw: standard output, or nowhere when the progress goes out as plain lines (the bars
        still count and hold their metrics, for subclasses that read them, as with Lightning's)."""
        return _DISCARD if self._plain else sys.stdout

    # ----------------------------------------------------------------- the bars
    @property
    def train_progress_bar(self) -> Tqdm:
        """The training bar (an error before training started)."""
        return self._bar("_train_progress_bar")

    @train_progress_bar.setter
    def train_progress_bar(self, bar: Tqdm) -> None:
        self._train_progress_bar = bar

    @property
    def val_progress_bar(self) -> Tqdm:
        """The validation (or sanity check) bar."""
        return self._bar("_val_progress_bar")

    @val_progress_bar.setter
    def val_progress_bar(self, bar: Tqdm) -> None:
        self._val_progress_bar = bar

    @property
    def test_progress_bar(self) -> Tqdm:
        """The test bar."""
        return self._bar("_test_progress_bar")

    @test_progress_bar.setter
    def test_progress_bar(self, bar: Tqdm) -> None:
        self._test_progress_bar = bar

    @property
    def predict_progress_bar(self) -> Tqdm:
        """The prediction bar."""
        return self._bar("_predict_progress_bar")

    @predict_progress_bar.setter
    def predict_progress_bar(self, bar: Tqdm) -> None:
        self._predict_progress_bar = bar

    def _bar(self, attribute: str) -> Tqdm:
        bar: Tqdm | None = getattr(self, attribute)
        if bar is None:
            raise TypeError(f"The `{type(self).__name__}.{attribute}` reference has not been set yet: the bar is "
                            "made when its loop starts")
        return bar

    @property
    def process_position(self) -> int:
        """The bars' line offset."""
        return self._process_position

    # ----------------------------------------------------------------- building the bars
    def init_sanity_tqdm(self) -> Tqdm:
        """The sanity check's bar."""
        return Tqdm(desc=self.sanity_check_description, position=2 * self._process_position, disable=self.is_disabled,
                    leave=False, dynamic_ncols=True, file=self._stream, bar_format=self.BAR_FORMAT)

    def init_train_tqdm(self) -> Tqdm:
        """The training bar."""
        return Tqdm(desc=self.train_description, position=2 * self._process_position, disable=self.is_disabled,
                    leave=True, dynamic_ncols=True, file=self._stream, smoothing=0, bar_format=self.BAR_FORMAT)

    def init_validation_tqdm(self) -> Tqdm:
        """The validation bar: under the training bar inside ``fit`` (and cleared when done), alone in
        ``validate``."""
        inside_fit = self.trainer.state.fn != "validate"
        return Tqdm(desc=self.validation_description, position=2 * self._process_position + inside_fit,
                    disable=self.is_disabled, leave=not inside_fit, dynamic_ncols=True, file=self._stream,
                    bar_format=self.BAR_FORMAT)

    def init_test_tqdm(self) -> Tqdm:
        """The test bar."""
        return Tqdm(desc=self.test_description, position=2 * self._process_position, disable=self.is_disabled,
                    leave=True, dynamic_ncols=True, file=self._stream, bar_format=self.BAR_FORMAT)

    def init_predict_tqdm(self) -> Tqdm:
        """The prediction bar."""
        return Tqdm(desc=self.predict_description, position=2 * self._process_position, disable=self.is_disabled,
                    leave=True, dynamic_ncols=True, file=self._stream, smoothing=0, bar_format=self.BAR_FORMAT)

    # ----------------------------------------------------------------- sanity check
    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.val_progress_bar = self.init_sanity_tqdm()
        self.train_progress_bar = Tqdm(disable=True)  # a placeholder: training has not started

    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.val_progress_bar.close()
        self.train_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    # ----------------------------------------------------------------- training
    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.train_progress_bar = self.init_train_tqdm()
        self._train_open = True

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        if not self._train_open:  # leave=True closed the last epoch's bar: a new line for this epoch
            self.train_progress_bar = self.init_train_tqdm()
            self._train_open = True
        _restart(self.train_progress_bar, self.total_train_batches, f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # (made by on_train_start, before the first batch; no cast(): this runs at every batch, a cast is a call)
        bar: Tqdm = self._train_progress_bar  # type: ignore[assignment]
        count = self._train_batches = batch_idx + 1
        if bar.disable or (count % self._refresh_rate and count != bar.total):
            return
        if count - bar.last_print_n < bar.miniters:  # tqdm's own test: too few batches since the last draw
            bar.n = count
            return
        self._advance(bar, count, trainer, pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        bar = self.train_progress_bar
        if not bar.disable:
            bar.set_postfix(self.get_metrics(trainer, pl_module))
        if self._plain and self.is_enabled:
            self._line(f"Epoch {trainer.current_epoch}", f"{self._train_batches}/{_shown(self.total_train_batches)}",
                       self.get_metrics(trainer, pl_module))
        if self._leave:
            bar.close()
            self._train_open = False

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self._train_open:
            self.train_progress_bar.close()
            self._train_open = False

    # ----------------------------------------------------------------- validation
    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._batches = 0
        if not trainer.sanity_checking:
            self.val_progress_bar = self.init_validation_tqdm()

    def on_validation_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            label = self.sanity_check_description if trainer.sanity_checking else self.validation_description
            _restart(self.val_progress_bar, self.total_val_batches_current_dataloader,
                     self._label(label, dataloader_idx, trainer.num_sanity_val_batches if trainer.sanity_checking
                                 else trainer.num_val_batches))

    def on_validation_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self._move(self._val_progress_bar, batch_idx + 1)  # type: ignore[arg-type]  # made by on_validation_start (no cast: per batch)

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self._train_open and trainer.state.fn == "fit":  # the training bar shows the validation's metrics
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))
        self.val_progress_bar.close()
        self.reset_dataloader_idx_tracker()
        if trainer.state.fn == "validate":
            self._evaluation_line(self.validation_description)

    # ----------------------------------------------------------------- test and prediction
    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._batches = 0
        self.test_progress_bar = self.init_test_tqdm()

    def on_test_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            _restart(self.test_progress_bar, self.total_test_batches_current_dataloader,
                     self._label(self.test_description, dataloader_idx, trainer.num_test_batches))

    def on_test_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self._move(self._test_progress_bar, batch_idx + 1)  # type: ignore[arg-type]  # made by on_test_start (no cast: per batch)

    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.test_progress_bar.close()
        self.reset_dataloader_idx_tracker()
        self._evaluation_line(self.test_description)

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._batches = 0
        self.predict_progress_bar = self.init_predict_tqdm()

    def on_predict_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            _restart(self.predict_progress_bar, self.total_predict_batches_current_dataloader,
                     self._label(self.predict_description, dataloader_idx, trainer.num_predict_batches))

    def on_predict_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        self._move(self._predict_progress_bar, batch_idx + 1)  # type: ignore[arg-type]  # made by on_predict_start (no cast: per batch)

    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.predict_progress_bar.close()
        self.reset_dataloader_idx_tracker()
        self._evaluation_line(self.predict_description)

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        """Close the open bars, so that what reports the error starts on a line of its own."""
        for bar in (self._val_progress_bar, self._test_progress_bar, self._predict_progress_bar,
                    self._train_progress_bar):
            if bar is not None:
                bar.close()
        self._train_open = False
        self._restore_warnings()

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        """Print above the bar that is running (``tqdm.write``), so the bars are not broken."""
        if self._plain:
            print(*args, sep=sep, **kwargs)
            return
        bar = next((b for b in (self._val_progress_bar, self._test_progress_bar, self._predict_progress_bar,
                                self._train_progress_bar) if b is not None and not b.disable), None)
        if bar is None:
            print(*args, sep=sep, **kwargs)
        else:
            bar.write(sep.join(map(str, args)), **kwargs)

    # ----------------------------------------------------------------- moving a bar
    def _move(self, bar: Tqdm, count: int) -> None:
        """An evaluation bar to ``count`` batches, every ``refresh_rate`` batches."""
        self._batches += 1
        if not bar.disable and (count % self._refresh_rate == 0 or count == bar.total):
            bar.update(count - bar.n)

    def _advance(self, bar: Tqdm, count: int, trainer: Trainer, pl_module: Module) -> None:
        """The training bar to ``count`` batches through tqdm's ``update``, which redraws the line when
        ``mininterval`` seconds passed since the last draw; the metrics are refreshed first when it will."""
        if time.time() - bar.last_print_t >= bar.mininterval:
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
        bar.update(count - bar.n)

    # ----------------------------------------------------------------- plain lines, warnings
    def _line(self, label: str, count: str, metrics: Mapping[str, object]) -> None:
        """One plain line of progress: ``Epoch 2: 20/20 batches, v_num=0, train_loss=0.318``."""
        shown = "".join(f", {k}={v if isinstance(v, str) else Tqdm.format_num(v)}" for k, v in metrics.items())
        print(f"{label}: {count} batches{shown}", flush=True)

    def _evaluation_line(self, description: str) -> None:
        if self._plain and self.is_enabled:
            self._line(description, str(self._batches), {})

    def _route_warnings(self) -> None:
        """While bars are drawn, a warning is printed on a line of its own: tqdm clears the bars, the warning is
        written, the bars are drawn again below it (``tqdm.external_write_mode``)."""
        if self._show is not None:
            return
        original = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            with Tqdm.external_write_mode(file=file if file is not None else sys.stderr):
                original(message, category, filename, lineno, file, line)

        self._shown_warning, self._show = original, show
        warnings.showwarning = show

    def _restore_warnings(self) -> None:
        if self._show is not None and warnings.showwarning is self._show:
            warnings.showwarning = cast(ShowWarning, self._shown_warning)  # set together with _show
        self._shown_warning = self._show = None

    @staticmethod
    def _label(description: str, dataloader_idx: int, counts: float | list[float]) -> str:
        several = isinstance(counts, (list, tuple)) and len(counts) > 1
        return f"{description} DataLoader {dataloader_idx}" if several else description


def _restart(bar: Tqdm, total: int | None, description: str) -> None:
    """Start ``bar`` again at 0 of ``total`` (``None``: no total, the count alone) with ``description``."""
    bar.reset(total)
    bar.total = total  # tqdm keeps the old total when given None
    bar.initial = 0
    bar.set_description(description)


def _shown(total: int | None) -> str:
    return "?" if total is None else str(total)
