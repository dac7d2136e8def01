"""The loops the Trainer drives: fit (training with validation), evaluation, prediction.

Each loop calls the Module's and the callbacks' hooks in Lightning's order through a
:class:`~accelkit.loops.hooks.HookCaller`, which decides once per run which hooks are overridden.
"""
