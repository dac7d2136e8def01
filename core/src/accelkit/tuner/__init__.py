"""Tuning before training, as Lightning's ``lightning.pytorch.tuner``: the learning-rate range test
(:meth:`Tuner.lr_find`) and the batch-size search (:meth:`Tuner.scale_batch_size`). See :doc:`/tuner`.

    from accelkit.tuner import Tuner   # was: from lightning.pytorch.tuner import Tuner
"""

from accelkit.tuner.lr_finder import LRFinder
from accelkit.tuner.tuning import Tuner

__all__ = ["LRFinder", "Tuner"]
