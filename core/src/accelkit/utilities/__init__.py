"""Small helpers shared by the core, the plugins and users: tensors in nested data
(:mod:`~accelkit.utilities.apply_func`), seeding (:mod:`~accelkit.utilities.seed`), rank-zero-only calls
(:mod:`~accelkit.utilities.rank_zero`).
"""

from accelkit.utilities.apply_func import apply_to_tensors, batch_size_of, move_to_device
from accelkit.utilities.rank_zero import rank_zero_only
from accelkit.utilities.seed import seed_everything, worker_init_function

__all__ = ["apply_to_tensors", "batch_size_of", "move_to_device", "rank_zero_only", "seed_everything",
           "worker_init_function"]
