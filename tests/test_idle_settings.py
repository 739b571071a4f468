"""Settings that cannot take effect are refused with one line naming the key, the key that turns it off and the fix."""

from __future__ import annotations

import pytest

from tsctl.config.errors import ConfigError
from tsctl.config.store import conf_dir
from tsctl.stages.ablate import plan
from tsctl.runconfig import compose_config

PRESETS = sorted(p.stem for p in (conf_dir() / "preset").glob("*.yaml"))


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["seeds.selector=bandit", "seeds.pool_size=4"], "seeds.selector", "ratio=0"),
        (["refresh=5"], "refresh", "ratio > 0"),
        (["truncation=fixed"], "truncation", "ratio > 0"),
        (["algo.prefix_clip_c=5"], "algo.prefix_clip_c", "ratio=0"),
        (["ratio=25", "truncation=fixed", "seeds.lo=0.1"], "seeds.lo", "truncation=fixed does not read it"),
        (["ratio=25", "truncation=uniform", "seeds.fraction=0.3"], "seeds.fraction", "truncation=uniform"),
        (["ratio=25", "truncation=fixed", "seeds.fraction=0"], "truncation", "cut at 0 tokens"),
        (["ratio=25", "seeds.lo=0", "seeds.hi=0"], "truncation", "cut at 0 tokens"),
        (["ratio=25", "truncation=schedule", "seeds.schedule_start=0", "seeds.schedule_end=0"], "truncation", "cut at 0 tokens"),
        (["ratio=25", "seeds.pool_size=4"], "seeds.pool_size", "seeds.selector=latest"),
        (["ratio=25", "seeds.bandit=ucb"], "seeds.bandit", "seeds.selector=bandit"),
        (["ratio=25", "seeds.probe_prompts=8"], "seeds.probe_prompts", "seeds.selector=max_entropy"),
        (["ratio=25", "seeds.source_path=m"], "seeds.source_path", "seeds.source=self"),
        (["ratio=25", "seeds.trace_logprobs=cap"], "seeds.trace_logprobs", "seeds.source=traces"),
        (["algo.overlong_buffer=4"], "algo.overlong_buffer", "algo.overlong=penalty"),
        (["algo.overlong=mask", "algo.overlong_penalty=0.5"], "algo.overlong_penalty", "algo.overlong=penalty"),
        (["algo.max_resample_rounds=5"], "algo.max_resample_rounds", "algo.dynamic_sampling=true"),
        (["algo.rollout_correction_cap=3"], "algo.rollout_correction_cap", "algo.rollout_correction=tis"),
        (["algo.ref_placement=cpu"], "algo.ref_placement", "algo.kl_coef > 0"),
        (["trainer.max_nonfinite_skips=3"], "trainer.max_nonfinite_skips", "trainer.nonfinite=skip"),
    ],
)
def test_a_setting_that_cannot_take_effect_is_refused(overrides, key, words):
    with pytest.raises(ConfigError, match=f"at '{key}'") as err:
        compose_config(overrides, idle=True)
    assert "cannot take effect" in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["ratio=25", "truncation=fixed", "seeds.fraction=0.3", "refresh=5", "algo.prefix_clip_c=5"],
        ["ratio=25", "seeds.selector=bandit", "seeds.pool_size=4", "seeds.bandit=ucb", "seeds.bandit_c=2"],
        ["algo.overlong=penalty", "algo.overlong_buffer=4", "algo.dynamic_sampling=true", "algo.max_resample_rounds=5"],
        ["algo.rollout_correction=tis", "algo.rollout_correction_cap=3", "algo.kl_coef=0.01", "algo.ref_placement=cpu"],
        ["trainer.nonfinite=skip", "trainer.max_nonfinite_skips=3", "engine.vllm.gpu_memory_utilization=0.3"],
        *[[f"+preset={p}", "task.file.train_path=data.jsonl", *ratio] for p in PRESETS for ratio in ([], ["ratio=25"])],
    ],
)
def test_settings_that_take_effect_compose(overrides):
    compose_config(overrides, idle=True)


def test_a_sweep_refuses_a_setting_only_when_it_is_idle_at_every_point():
    assert len(plan(["ratio=0,25", "refresh=5"]).points) == 2  # the ratio=25 point reads refresh
    assert len(plan(["ratio=0,25", "seeds.selector=bandit", "seeds.pool_size=3"]).points) == 2
    with pytest.raises(ConfigError, match="at 'refresh'.*cannot take effect"):
        plan(["seed=1,2", "refresh=5"])
    with pytest.raises(ConfigError, match="at 'algo.overlong_buffer'"):
        plan(["ratio=0,25", "algo.overlong_buffer=4"])
