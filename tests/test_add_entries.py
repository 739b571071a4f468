"""An entry is one new module of its package (no existing file edited): a throw-away selector, truncation strategy,
policy loss with a setting of its own, advantage estimator, aggregation, task and engine, each dropped into its package
from a folder of this test, is found by its registry, has its settings block composed, checked and given to it, and runs
a micro train."""

import json
import sys

import pyarrow.parquet as pq
import pytest

import tsctl.algo
import tsctl.engines
import tsctl.seeds
import tsctl.tasks
from tsctl.algo.advantages import ADVANTAGES
from tsctl.algo.aggregations import AGGREGATIONS
from tsctl.algo.losses import POLICY_LOSSES
from tsctl.config.errors import ConfigError
from tsctl.engines.registry import ENGINES
from tsctl.runconfig import compose_config
from tsctl.seeds.selectors import SELECTORS
from tsctl.seeds.truncation import STRATEGIES
from tsctl.tasks.registry import TASKS

SELECTOR = '''
from tsctl.seeds.selectors import SELECTORS


@SELECTORS.register("throwaway_second", pool=True)
def _second(stats, prompts, rng, cfg):
    return [min(1, len(stats) - 1)] * prompts
'''

TRUNCATION = '''
from tsctl.seeds.truncation import STRATEGIES


@STRATEGIES.register("throwaway_half", reads=("fraction",), largest=lambda s: s.fraction)
def _half(ids, span, ctx, cfg, rng):
    return min(span, int(span * cfg.fraction))
'''

POLICY_LOSS = '''
from dataclasses import dataclass

from tsctl.algo.losses import POLICY_LOSSES, ppo_clip, token_log_ratio


@dataclass
class ScaledSettings:
    scale: float = 1.0


@POLICY_LOSSES.register("throwaway_scaled", reads=("clip_low", "clip_high"), settings=ScaledSettings)
def _scaled(logprobs, old_logprobs, advantages, mask, *, prefix, clip_low, clip_high, settings):
    loss, metrics = ppo_clip(token_log_ratio(logprobs, old_logprobs), advantages, clip_low=clip_low, clip_high=clip_high)
    return loss * settings.scale, metrics
'''

ESTIMATOR = '''
from dataclasses import dataclass

import torch

from tsctl.algo.advantages import ADVANTAGES


@dataclass
class FixedSettings:
    value: float = 1.0


@ADVANTAGES.register("throwaway_fixed", settings=FixedSettings)
def _fixed(rewards, group_index, *, stats_mask=None, settings):
    return torch.full_like(rewards, settings.value)
'''

AGGREGATION = '''
from dataclasses import dataclass

from tsctl.algo.aggregations import AGGREGATIONS


@dataclass
class SumSettings:
    divisor: float = 1.0


@AGGREGATIONS.register("throwaway_sum", settings=SumSettings)
def _sum(values, mask, norms, *, settings):
    return (values * mask.to(values.dtype)).sum(), settings.divisor
'''

TASK = '''
from dataclasses import dataclass

from tsctl.tasks.arithmetic import ArithmeticSettings, ArithmeticTask
from tsctl.tasks.registry import TASKS

BUILT = []


@dataclass
class SumsSettings:
    max_digits: int = 1


@TASKS.register("throwaway_sums", settings=SumsSettings)
def _sums(cfg, settings):
    BUILT.append(settings)
    return ArithmeticTask(ArithmeticSettings(min_terms=2, max_terms=2, max_digits=settings.max_digits), cfg.train_size, cfg.heldout_size, cfg.data_seed)
'''

ENGINE = '''
from dataclasses import dataclass

from tsctl.engines.hf import HFEngine
from tsctl.engines.registry import ENGINES

BUILT = []


@dataclass
class SmallSettings:
    rows: int = 4


@ENGINES.register("throwaway_small", settings=SmallSettings, in_process=True, own_logprobs=True)
def _small(build):
    BUILT.append(build.settings)
    return HFEngine(build.model, build.end_ids, pad_id=build.pad_id, batch_size=build.settings.rows, compute_dtype=build.compute_dtype)
'''

PACKAGES = {tsctl.seeds: (SELECTORS, STRATEGIES), tsctl.algo: (POLICY_LOSSES, ADVANTAGES, AGGREGATIONS), tsctl.tasks: (TASKS,), tsctl.engines: (ENGINES,)}


@pytest.fixture
def drop_in(tmp_path, monkeypatch):
    """``drop(package, name, code)`` writes a module into a folder on ``package``'s path, as if added to its folder in
    src/tsctl/; the registries and modules are as before after the test."""
    added = []
    for package, registries in PACKAGES.items():
        for registry in registries:
            registry.names()  # every module of the package registered before the copy the test's entries go into
            monkeypatch.setattr(registry, "_entries", dict(registry._entries))
            monkeypatch.setattr(registry, "_needs", dict(registry._needs))

    def drop(package, name, code):
        folder = tmp_path / package.__name__
        if not folder.is_dir():
            folder.mkdir()
            monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
        (folder / f"{name}.py").write_text(code)
        monkeypatch.delitem(sys.modules, f"{package.__name__}.{name}", raising=False)
        added.append(f"{package.__name__}.{name}")

    yield drop
    for module in added:
        sys.modules.pop(module, None)


def records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_throwaway_selector_runs_a_micro_train(drop_in, micro, tmp_path):
    from tsctl.stages.train import train

    drop_in(tsctl.seeds, "throwaway_selector", SELECTOR)
    composed = compose_config([*micro, "name=sel", "ratio=25", "seeds.selector=throwaway_second", "seeds.pool_size=2", "refresh=1", "trainer.steps=3", "trainer.eval_every=0"], idle=True)
    train(composed)
    run = tmp_path / "runs" / "default" / "sel"
    assert sorted(p.name for p in (run / "seeds" / "pool").iterdir()) == ["step-000001", "step-000002"]
    assert records(run)[-1]["step"] == 3 and "seeds/by_arm/1/samples" in records(run)[-1]


@pytest.mark.slow
def test_a_throwaway_truncation_runs_a_micro_train_and_its_keys_are_checked(drop_in, micro, tmp_path):
    from tsctl.stages.train import train

    drop_in(tsctl.seeds, "throwaway_truncation", TRUNCATION)
    with pytest.raises(Exception, match="seeds.hi"):
        compose_config([*micro, "ratio=25", "truncation=throwaway_half", "seeds.hi=0.5"], idle=True)
    composed = compose_config([*micro, "name=cut", "ratio=25", "truncation=throwaway_half", "seeds.fraction=0.5", "trainer.steps=2", "trainer.eval_every=0"], idle=True)
    train(composed)
    assert records(tmp_path / "runs" / "default" / "cut")[-1]["step"] == 2


@pytest.mark.slow
def test_a_throwaway_policy_loss_with_a_setting_gets_it_and_runs_a_micro_train(drop_in, micro, tmp_path):
    from tsctl.stages.train import train

    drop_in(tsctl.algo, "throwaway_policy_loss", POLICY_LOSS)
    with pytest.raises(ConfigError, match="it is read only with algo.policy_loss=throwaway_scaled"):
        compose_config([*micro, "algo.throwaway_scaled.scale=0.5"], idle=True)
    with pytest.raises(ConfigError, match="'algo.clip_c'.*read only with algo.policy_loss=vanilla|gspo"):
        compose_config([*micro, "algo.policy_loss=throwaway_scaled", "algo.clip_c=3"], idle=True)
    common = [*micro, "algo.policy_loss=throwaway_scaled", "trainer.steps=2", "trainer.eval_every=0"]
    train(compose_config([*common, "name=off", "algo.throwaway_scaled.scale=0.0"], idle=True))
    train(compose_config([*common, "name=on", "algo.throwaway_scaled.scale=2.0"], idle=True))
    off, on = records(tmp_path / "runs" / "default" / "off"), records(tmp_path / "runs" / "default" / "on")
    assert [r["grad_norm"] for r in off] == [0.0, 0.0] and all(r["grad_norm"] > 0 for r in on)  # the setting reached the loss
    assert "scale: 2.0" in (tmp_path / "runs" / "default" / "on" / "config.yaml").read_text()


@pytest.mark.slow
def test_a_throwaway_estimator_with_a_setting_gives_its_advantages_in_a_micro_train(drop_in, micro, tmp_path):
    from tsctl.stages.train import train

    drop_in(tsctl.algo, "throwaway_estimator", ESTIMATOR)
    with pytest.raises(ConfigError, match="'algo.adv_eps'.*read only with algo.adv_estimator=grpo"):
        compose_config([*micro, "algo.adv_estimator=throwaway_fixed", "algo.adv_eps=0.1"], idle=True)
    train(compose_config([*micro, "name=fixed", "algo.adv_estimator=throwaway_fixed", "algo.throwaway_fixed.value=0.25", "trainer.steps=2",
                          "trainer.eval_every=0", "trainer.save_rollouts=true"], idle=True))
    shards = sorted((tmp_path / "runs" / "default" / "fixed" / "rollouts").glob("*.parquet"))
    assert len(shards) == 2 and all(set(pq.read_table(s).column("advantage").to_pylist()) == {0.25} for s in shards)


@pytest.mark.slow
def test_a_throwaway_aggregation_with_a_setting_runs_a_micro_train(drop_in, micro, tmp_path):
    from tsctl.stages.train import train

    drop_in(tsctl.algo, "throwaway_aggregation", AGGREGATION)
    common = [*micro, "algo.aggregation=throwaway_sum", "trainer.steps=1", "trainer.eval_every=0", "trainer.max_grad_norm=0"]
    train(compose_config([*common, "name=one", "algo.throwaway_sum.divisor=1.0"], idle=True))
    train(compose_config([*common, "name=ten", "algo.throwaway_sum.divisor=10.0"], idle=True))
    one, ten = (records(tmp_path / "runs" / "default" / name)[0]["grad_norm"] for name in ("one", "ten"))
    assert one == pytest.approx(10 * ten, rel=1e-4)  # the first mini-batch: same weights, the loss divided by 10


@pytest.mark.slow
def test_a_throwaway_task_with_a_setting_is_built_with_it_and_runs_a_micro_train(drop_in, micro, tmp_path):
    from tsctl.stages.train import train

    drop_in(tsctl.tasks, "throwaway_task", TASK)
    with pytest.raises(ConfigError, match="'task.throwaway_sums.max_digits'"):
        compose_config([*micro, "task.name=throwaway_sums", "task.throwaway_sums.max_digits=one"])
    train(compose_config([*micro, "name=sums", "task.name=throwaway_sums", "task.throwaway_sums.max_digits=2", "trainer.steps=2",
                          "trainer.eval_every=0"], idle=True))
    assert records(tmp_path / "runs" / "default" / "sums")[-1]["step"] == 2
    assert {s.max_digits for s in sys.modules["tsctl.tasks.throwaway_task"].BUILT} == {2}


@pytest.mark.slow
def test_a_throwaway_engine_with_a_setting_is_built_with_it_and_runs_a_micro_train(drop_in, micro, tmp_path):
    from tsctl.engines.factory import unread_keys
    from tsctl.stages.train import train

    drop_in(tsctl.engines, "throwaway_engine", ENGINE)
    assert "engine.throwaway_small.rows" in unread_keys("hf") and "engine.vllm.dtype" in unread_keys("throwaway_small")
    train(compose_config([*micro, "name=small", "engine.name=throwaway_small", "engine.throwaway_small.rows=3", "trainer.steps=2",
                          "trainer.eval_every=0"], idle=True))
    assert records(tmp_path / "runs" / "default" / "small")[-1]["step"] == 2
    assert [s.rows for s in sys.modules["tsctl.engines.throwaway_engine"].BUILT] == [3]
