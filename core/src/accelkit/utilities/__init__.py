"""Small helpers shared by the core, the plugins and users, under the names ``lightning.pytorch.utilities`` gives
them: tensors in nested data (``accelkit.utilities.apply_func``), seeding (``accelkit.utilities.seed``),
rank-zero-only calls and messages (``accelkit.utilities.rank_zero``), gradient norms
(``accelkit.utilities.grads``), several loaders read as one (``accelkit.utilities.combined_loader``), the
attribute dict of hyper-parameters (``accelkit.utilities.parsing``), the string enums of ``trainer.state``
(``accelkit.utilities.enums``). The type names of annotations are in
``accelkit.utilities.types`` (imported on its own: ``from accelkit.utilities.types import STEP_OUTPUT``).
"""

from accelkit.utilities.apply_func import (
    apply_to_collection,
    apply_to_tensors,
    batch_size_of,
    move_data_to_device,
    move_to_device,
)
from accelkit.utilities.combined_loader import CombinedLoader
from accelkit.utilities.enums import LightningEnum
from accelkit.utilities.grads import grad_norm
from accelkit.utilities.parsing import AttributeDict
from accelkit.utilities.rank_zero import (
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)
from accelkit.utilities.seed import seed_everything, worker_init_function

__all__ = ["AttributeDict", "CombinedLoader", "LightningEnum", "apply_to_collection", "apply_to_tensors",
           "batch_size_of", "grad_norm", "move_data_to_device", "move_to_device", "rank_zero_debug",
           "rank_zero_deprecation", "rank_zero_info", "rank_zero_only", "rank_zero_warn", "seed_everything",
           "worker_init_function"]
