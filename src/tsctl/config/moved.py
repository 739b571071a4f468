"""Config keys that moved or were renamed: an override of a key at its old place is refused naming the new one
(:mod:`tsctl.config.compose`), and a run's saved config that holds it is compared at its new place
(:mod:`tsctl.io.config_diff`), so a run saved before the move resumes, and a sweep skips its finished points."""

from __future__ import annotations

MOVED_KEYS = {
    **{f"engine.{key}": f"engine.vllm.{key}" for key in (
        "gpu_memory_utilization", "tensor_parallel_size", "dtype", "max_model_len", "enable_sleep_mode", "enforce_eager")},
    "algo.loss": "algo.aggregation",
    "seeded": "seeded_per_group",
}
"""Keys once read at a former place -> their place now: the ``vllm`` engine's own settings, once keys of every engine,
now its settings block (:mod:`tsctl.engines.vllm_settings`); the aggregation, once ``algo.loss`` beside
``algo.policy_loss``; the derived count of seeded samples per group, once ``seeded`` (the word a sample's flag keeps).
An override of the old key is refused naming the new one; a saved config that holds it is compared at its new place
(:mod:`tsctl.io.config_diff`)."""
