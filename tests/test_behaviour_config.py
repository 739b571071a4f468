"""Validation of the behaviour-pool and seed-source keys: one line naming the key and the fix."""

import pytest

from conftest import tsctl
from tsctl.config.errors import ConfigError
from tsctl.runconfig import compose_config


@pytest.mark.parametrize(
    "overrides, key, text",
    [
        (["seeds.selector=best"], "seeds.selector", "choose one of latest, oldest, uniform, max_entropy, bandit"),
        (["seeds.selector=uniform"], "seeds.pool_size", "needs a pool of 2 or more"),
        (["seeds.selector=bandit", "seeds.pool_size=3", "refresh=0"], "seeds.selector", "set refresh > 0"),
        (["seeds.selector=oldest", "seeds.pool_size=3", "seeds.source=model", "seeds.source_path=m"], "seeds.selector", "use seeds.selector=latest"),
        (["seeds.pool_size=0"], "seeds.pool_size", "must be > 0"),
        (["seeds.bandit=exp3"], "seeds.bandit", "choose one of thompson, ucb"),
        (["seeds.bandit_c=0"], "seeds.bandit_c", "must be > 0"),
        (["seeds.probe_prompts=0"], "seeds.probe_prompts", "must be > 0"),
        (["seeds.source=other"], "seeds.source", "choose one of self, model, traces"),
        (["seeds.source=model"], "seeds.source_path", "seeds.source_path=<path>"),
        (["seeds.source=traces", "seeds.source_path=/no/such.jsonl"], "seeds.source_path", "does not exist"),
        (["seeds.trace_logprobs=one"], "seeds.trace_logprobs", "choose one of exclude, cap"),
    ],
)
def test_bad_values_name_the_key_and_the_fix(overrides, key, text):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    assert err.value.key == key and text in str(err.value) and "\n" not in str(err.value)


def test_entropy_truncation_needs_a_behaviour_policy_not_traces(tmp_path):
    traces = tmp_path / "t.jsonl"
    traces.write_text('{"question": "1+1", "response": "2"}\n')
    with pytest.raises(ConfigError, match="entropies, which seeds.source=traces does not give"):
        compose_config(["seeds.source=traces", f"seeds.source_path={traces}", "truncation=entropy"])
    assert compose_config(["seeds.source=traces", f"seeds.source_path={traces}"]).cfg.seeds.trace_logprobs == "exclude"


def test_defaults_are_the_papers_behaviour_policy():
    s = compose_config([]).cfg.seeds
    assert (s.selector, s.pool_size, s.source) == ("latest", 1, "self")


@pytest.mark.slow
def test_the_cli_prints_one_line_and_exits_2(tmp_path):
    proc = tsctl("train", f"runs_dir={tmp_path}", "ratio=25", "seeds.selector=uniform", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and not any(tmp_path.iterdir())
    assert "seeds.pool_size" in (proc.stdout + proc.stderr)


@pytest.mark.slow
def test_the_seed_stage_refuses_the_train_only_keys(tmp_path):
    proc = tsctl("seed", f"runs_dir={tmp_path}", "ratio=25", "seeds.selector=uniform", "seeds.pool_size=2", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and not any(tmp_path.iterdir())
    assert "seeds.selector=uniform applies to tsctl train" in (proc.stdout + proc.stderr)
