"""A selector or a truncation strategy is one new module of ``tsctl.seeds`` (no existing file edited): a throw-away
one, dropped into the package from this test, is found by its registry and runs a micro train."""

import json
import sys

import pytest

import tsctl.seeds
from tsctl.seeds.selectors import SELECTORS
from tsctl.seeds.truncation import STRATEGIES
from tsctl.stages.compose import compose_config

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


@pytest.fixture
def drop_in(tmp_path, monkeypatch):
    """Writes a module into a folder on ``tsctl.seeds``'s path, as if added to src/tsctl/seeds/; undone after the test."""
    folder = tmp_path / "package"
    folder.mkdir()
    monkeypatch.setattr(tsctl.seeds, "__path__", [*tsctl.seeds.__path__, str(folder)])
    for registry in (SELECTORS, STRATEGIES):
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        monkeypatch.setattr(registry, "_needs", dict(registry._needs))

    def drop(name, code):
        (folder / f"{name}.py").write_text(code)
        monkeypatch.delitem(sys.modules, f"tsctl.seeds.{name}", raising=False)

    yield drop
    for name in ("throwaway_selector", "throwaway_truncation"):
        sys.modules.pop(f"tsctl.seeds.{name}", None)


def records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_throwaway_selector_runs_a_micro_train(drop_in, micro, tmp_path):
    from tsctl.stages.train import train

    drop_in("throwaway_selector", SELECTOR)
    composed = compose_config([*micro, "name=sel", "ratio=25", "seeds.selector=throwaway_second", "seeds.pool_size=2", "refresh=1", "trainer.steps=3", "trainer.eval_every=0"], idle=True)
    train(composed)
    run = tmp_path / "runs" / "default" / "sel"
    assert sorted(p.name for p in (run / "seeds" / "pool").iterdir()) == ["step-000001", "step-000002"]
    assert records(run)[-1]["step"] == 3 and "seeds/by_arm/1/samples" in records(run)[-1]


@pytest.mark.slow
def test_a_throwaway_truncation_runs_a_micro_train_and_its_keys_are_checked(drop_in, micro, tmp_path):
    from tsctl.stages.train import train

    drop_in("throwaway_truncation", TRUNCATION)
    with pytest.raises(Exception, match="seeds.hi"):
        compose_config([*micro, "ratio=25", "truncation=throwaway_half", "seeds.hi=0.5"], idle=True)
    composed = compose_config([*micro, "name=cut", "ratio=25", "truncation=throwaway_half", "seeds.fraction=0.5", "trainer.steps=2", "trainer.eval_every=0"], idle=True)
    train(composed)
    assert records(tmp_path / "runs" / "default" / "cut")[-1]["step"] == 2
