"""Config composition, and one clear ConfigError per kind of mistake."""

import pytest

from tsctl.config.errors import ConfigError
from tsctl.runconfig import compose_config


def test_defaults_compose_to_the_documented_values():
    cfg = compose_config([]).cfg
    assert (cfg.ratio, cfg.truncation, cfg.refresh) == (0.0, "uniform", 10)
    assert cfg.task.name == "countdown" and cfg.model.path == "builtin" and cfg.algo.aggregation == "dapo"
    assert (cfg.trainer.steps, cfg.trainer.batch_size, cfg.trainer.n, cfg.trainer.mini_batches) == (400, 32, 8, 4)


def test_overrides_reach_typed_fields_and_groups():
    cfg = compose_config(["ratio=25", "refresh=5", "truncation=entropy", "task=arithmetic", "trainer=micro", "algo=grpo"]).cfg
    assert cfg.ratio == 25.0 and cfg.refresh == 5 and cfg.truncation == "entropy"
    assert cfg.task.name == "arithmetic" and cfg.trainer.steps == 3 and cfg.algo.aggregation == "grpo"
    assert cfg.algo.clip_high == 0.2


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["foo=1"], "foo", "unknown key"),
        (["trainer.stepz=3"], "trainer.stepz", "unknown key"),
        (["trainer.steps=abc"], "trainer.steps", "could not be converted"),
        (["task=nope"], "task", "choose one of arithmetic, countdown, file"),
        (["ratio=140"], "ratio", "0 <= ratio <= 100"),
        (["ratio=-1"], "ratio", "out of range"),
        (["truncation=middle"], "truncation", "boundary"),
        (["engine.top_p=0"], "engine.top_p", "0 < engine.top_p <= 1"),
        (["algo.aggregation=ppo"], "algo.aggregation", "dapo"),
        (["algo.clip_c=0.5"], "algo.clip_c", "> 1"),
        (["trainer.mini_batches=3"], "trainer.mini_batches", "must divide"),
        (["trainer.n=1"], "trainer.n", "at least 2"),
        (["eval.pass_k=[1,16]"], "eval.pass_k", "1..eval.k"),
        (["model.tiny.num_heads=3"], "model.tiny.num_heads", "divide"),
        (["task=file"], "task.file.train_path", "JSONL or Parquet"),
        (["seeds.lo=0.9", "seeds.hi=0.1"], "seeds.lo", "<= seeds.hi"),
        (["ratio=25", "trainer.n=2"], "ratio", "exact at trainer.n=2: ratio=0 (plain DAPO) or ratio=50, or trainer.n=4 where ratio=25 is exact"),
        (["ratio=5"], "ratio", "round(8 x 5 / 100) = 0"),
        (["ratio=30"], "ratio", "= 2 of the trainer.n=8 samples of each group, which is ratio=25, not 30"),
    ],
)
def test_each_mistake_names_its_key(overrides, key, words):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    assert err.value.key == key
    assert words in str(err.value)
