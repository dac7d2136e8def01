"""Progress bars as callbacks: the :class:`ProgressBar` base, :class:`TQDMProgressBar` (the Trainer's default)
and :class:`RichProgressBar` (on the optional ``rich`` library)."""

from accelkit.callbacks.progress.default import configure_progress_bar
from accelkit.callbacks.progress.progress_bar import ProgressBar, RefreshingProgressBar, get_standard_metrics
from accelkit.callbacks.progress.rich_progress import RichProgressBar, RichProgressBarTheme
from accelkit.callbacks.progress.tqdm_progress import Tqdm, TQDMProgressBar

__all__ = ["ProgressBar", "RefreshingProgressBar", "RichProgressBar", "RichProgressBarTheme", "TQDMProgressBar", "Tqdm",
           "configure_progress_bar", "get_standard_metrics"]
