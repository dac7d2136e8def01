"""Trainer arguments that Lightning 1.x took and Lightning 2.0 removed, each with its 2.x spelling, so that a
program written for Lightning 1.x is told, in one error, what each of them became (Lightning's 2.0 upgrade guide,
"Upgrade from 1.x to the 2.0")."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping

#: Lightning 1.x Trainer argument -> what to write instead (``{value!r}`` is the value the program passed)
REMOVED_ARGUMENTS: dict[str, str] = {
    "gpus": "accelerator='gpu', devices={value!r}",
    "tpu_cores": "accelerator='tpu', devices={value!r} (with the accelkit-xla-spawn plugin installed)",
    "ipus": "IPUs are not supported by accelkit (Lightning 2.x moved them to the lightning-graphcore package)",
    "num_processes": "accelerator='cpu', devices={value!r}",
    "auto_select_gpus": "devices='auto' (or a list of device indices: devices=[0, 1])",
    "distributed_backend": "strategy={value!r}",
    "progress_bar_refresh_rate": "callbacks=[TQDMProgressBar(refresh_rate={value!r})] (accelkit.callbacks), or "
                                 "enable_progress_bar=False",
    "process_position": "callbacks=[TQDMProgressBar(process_position={value!r})] (accelkit.callbacks)",
    "resume_from_checkpoint": "trainer.fit(model, ckpt_path={value!r})",
    "auto_lr_find": "Tuner(trainer).lr_find(model) (accelkit.tuner) before trainer.fit(model)",
    "auto_scale_batch_size": "Tuner(trainer).scale_batch_size(model) (accelkit.tuner) before trainer.fit(model)",
    "weights_summary": "callbacks=[ModelSummary(max_depth=...)] (accelkit.callbacks), or "
                       "enable_model_summary=False",
    "checkpoint_callback": "enable_checkpointing={value!r}",
    "flush_logs_every_n_steps": "the logger's own argument: logger=CSVLogger(save_dir, "
                                "flush_logs_every_n_steps={value!r}) (accelkit.loggers)",
    "prepare_data_per_node": "the attribute on your DataModule or Module: self.prepare_data_per_node = {value!r} "
                             "in its __init__",
    "log_gpu_memory": "callbacks=[DeviceStatsMonitor()] (accelkit.callbacks)",
    "gpu_metrics": "callbacks=[DeviceStatsMonitor()] (accelkit.callbacks)",
    "stochastic_weight_avg": "callbacks=[StochasticWeightAveraging(swa_lrs=...)] (accelkit.callbacks)",
    "terminate_on_nan": "detect_anomaly={value!r}",
    "weights_save_path": "callbacks=[ModelCheckpoint(dirpath={value!r})] (accelkit.callbacks), or "
                         "default_root_dir={value!r}",
    "reload_dataloaders_every_epoch": "reload_dataloaders_every_n_epochs=1",
    "replace_sampler_ddp": "use_distributed_sampler={value!r}",
    "amp_backend": "precision='16-mixed' (torch.autocast; apex is not supported)",
    "amp_level": "precision='16-mixed' (torch.autocast; apex's opt levels are not supported)",
    "move_metrics_to_cpu": "nothing: remove it (logged values are kept as Python numbers)",
    "multiple_trainloader_mode": "CombinedLoader(loaders, mode={value!r}) (accelkit.utilities) as the train loader",
    "track_grad_norm": "self.log_dict(grad_norm(self, norm_type={value!r})) (accelkit.utilities) in your Module's "
                       "on_before_optimizer_step",
    "truncated_bptt_steps": "manual optimization: split the sequence in training_step "
                            "(self.automatic_optimization = False)",
}


def removed_argument_message(extra: Mapping[str, object], accepted: Callable[..., object]) -> str:
    """The one message for the keyword arguments in ``extra`` that ``accepted`` (the Trainer's ``__init__``) does
    not take: each Lightning 1.x argument with its 2.x spelling, each other name with the closest accepted one."""
    parts = []
    for name in sorted(extra):
        if name in REMOVED_ARGUMENTS:
            parts.append(f"{name}={extra[name]!r} (removed in Lightning 2.0): use "
                         + REMOVED_ARGUMENTS[name].format(value=extra[name]))
            continue
        known = [p for p in inspect.signature(accepted).parameters if p not in ("self", "legacy_arguments")]
        close = difflib.get_close_matches(name, known, n=1)
        parts.append(f"{name}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return "Trainer() got unexpected keyword argument(s): " + "; ".join(parts)
