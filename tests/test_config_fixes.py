"""Every config refusal that suggests a setting, with that setting applied: the refusal is one ``error:`` line
holding the suggestion, and the same overrides with the suggestion applied pass (``--cfg job``: composed,
validated, printed). A message whose suggestion stopped working, or a suggestion that changed wording, fails here."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tsctl.cli import app

runner = CliRunner()

CASES = [
    # (refused overrides, words of the one error line, the overrides that apply its suggestion)
    (["model.dtype=bfloat16", "model.compute_dtype=float32"], ["use model.dtype=float32 or model.compute_dtype=auto"], ["model.dtype=float32"]),
    (["model.dtype=bfloat16", "model.compute_dtype=float32"], ["use model.dtype=float32 or model.compute_dtype=auto"], ["model.compute_dtype=auto"]),
    (["name=a/b"], ["e.g. name=lr-2e-5"], ["name=lr-2e-5"]),
    (["experiment=/abs/place"], ["e.g. experiment=countdown/lr-sweep"], ["experiment=countdown/lr-sweep"]),
    (["ratio=140"], ["allowed: 0 <= ratio <= 100"], ["ratio=100"]),
    (["algo.rollout_correction=tis", "algo.rollout_correction_cap=0.5"], ["must be >= 1", "e.g. 2"], ["algo.rollout_correction_cap=2"]),
    (["report.level=1.5"], ["allowed: 0 < report.level < 1 (e.g. 0.95)"], ["report.level=0.95"]),
    (["report.baseline=ratio"], ["write it as key=value, e.g. report.baseline=ratio=0"], ["report.baseline=ratio=0"]),
    (["report.equivalence_margin=2"], ["null or 0 < margin < 1", "e.g. 0.02"], ["report.equivalence_margin=0.02"]),
    (["trainer.mini_batches=3"], ["must divide trainer.batch_size * trainer.n = 256"], ["trainer.mini_batches=4"]),
    (["trainer.schedule=linear"], ["unknown value 'linear'; choose one of constant, cosine"], ["trainer.schedule=cosine"]),
    (["engine=vllm", "engine.max_new_tokens=64", "engine.vllm.max_model_len=64"], ["must exceed engine.max_new_tokens=64"], ["engine.vllm.max_model_len=65"]),
    (["ratio=25", "seeds.selector=uniform", "seeds.pool_size=1"], ["e.g. seeds.pool_size=4"], ["seeds.pool_size=4"]),
    (["ratio=25", "seeds.selector=uniform", "seeds.pool_size=4", "refresh=0"], ["set refresh > 0"], ["refresh=1"]),
    (["ratio=25", "truncation=target_pass", "refresh=0"], ["'truncation'", "refresh=0 makes the whole run one window", "set refresh > 0 (e.g. refresh=10)"], ["refresh=10"]),
    (["ratio=25", "truncation=target_pass", "refresh=0"], ["or truncation=uniform"], ["truncation=uniform"]),
    (["ratio=5"], ["use a ratio that is exact at trainer.n=8: ratio=0 (plain DAPO) or ratio=12.5, or trainer.n=20"], ["ratio=12.5"]),
    (["ratio=5"], ["ratio=0 (plain DAPO)"], ["ratio=0"]),
    (["ratio=5"], ["or trainer.n=20 where ratio=5 is exact"], ["trainer.n=20", "trainer.mini_batches=5"]),
    (["ratio=30"], ["which is ratio=25, not 30", "ratio=25 or ratio=37.5"], ["ratio=37.5"]),
    (["ratio=25", "trainer.n=4", "trainer.mini_batches=2", "seeded_per_group=2"], ["seeded_per_group", "round(4 x 25 / 100) = 1", "drop it"], ["~seeded_per_group"]),
    # renamed keys: the old one refused naming the new one
    (["ratio=25", "seeded=2"], ["'seeded'", "unknown key: it is seeded_per_group now"], ["~seeded"]),
    (["algo.loss=grpo"], ["'algo.loss'", "unknown key: it is algo.aggregation now"], ["~algo.loss", "algo.aggregation=grpo"]),
    (["ratio=100", "seeds.adv_group=plain"], ["use seeds.adv_group=all"], ["seeds.adv_group=all"]),
    (["trainer.old_logprobs=engine", "engine.top_p=0.9"], ["use auto or recompute"], ["trainer.old_logprobs=auto"]),
    # settings that cannot take effect (config/idle.py): "set <switch> or drop it", each way
    (["ratio=0", "refresh=5"], ["set ratio > 0 (e.g. ratio=25) or drop it"], ["ratio=25"]),
    (["ratio=0", "refresh=5"], ["set ratio > 0 (e.g. ratio=25) or drop it"], ["~refresh"]),
    (["ratio=25", "truncation=fixed", "seeds.fraction=0"], ["raise its fraction (e.g. seeds.fraction=0.5"], ["seeds.fraction=0.5"]),
    (["ratio=25", "seeds.source_path=/tmp/x"], ["set seeds.source=model|traces or drop it"], ["~seeds.source_path"]),
    (["ratio=25", "seeds.trace_logprobs=cap"], ["set seeds.source=traces or drop it"], ["~seeds.trace_logprobs"]),
    (["algo.max_resample_rounds=5"], ["set algo.dynamic_sampling=true or drop it"], ["algo.dynamic_sampling=true"]),
    (["algo.rollout_correction_cap=3"], ["set algo.rollout_correction=tis or mis, or drop it"], ["algo.rollout_correction=tis"]),
    (["algo.ref_placement=cpu"], ["set algo.kl_coef > 0 or drop it"], ["algo.kl_coef=0.01"]),
    (["trainer.max_nonfinite_skips=3"], ["set trainer.nonfinite=skip or drop it"], ["trainer.nonfinite=skip"]),
    (["algo.adv_estimator=rloo", "algo.norm_adv_by_std=false"], ["it is read only with algo.adv_estimator=grpo", "set algo.adv_estimator=grpo or drop it"], ["algo.adv_estimator=grpo"]),
    (["algo.adv_estimator=rloo", "algo.adv_eps=0.001"], ["set algo.adv_estimator=grpo or drop it"], ["~algo.adv_eps"]),
]


def cfg_job(args: list[str]) -> tuple[int, list[str]]:
    """``tsctl train ARGS --cfg job`` (``tsctl ablate`` for ``report.*``, which train does not read): exit code, error lines."""
    command = "ablate" if any(a.startswith("report.") for a in args) else "train"
    result = runner.invoke(app, [command, *args, "--cfg", "job"])
    assert "Traceback" not in result.output
    return result.exit_code, [line for line in result.output.splitlines() if line.startswith("error:")]


def applied(refused: list[str], fix: list[str]) -> list[str]:
    """``refused`` with each key of ``fix`` set to the fix's value (added where ``refused`` lacks it); ``~key`` drops the key."""
    keys = {o.lstrip("~").split("=", 1)[0] for o in fix}
    return [o for o in refused if o.split("=", 1)[0] not in keys] + [o for o in fix if not o.startswith("~")]


@pytest.mark.parametrize("refused, words, fix", CASES, ids=[" ".join(c[0]) + " -> " + " ".join(c[2]) for c in CASES])
def test_a_refusal_names_its_fix_and_the_fix_applied_passes(refused, words, fix, tmp_path):
    where = [f"runs_dir={tmp_path}"]
    code, errors = cfg_job([*refused, *where])
    assert code == 2 and len(errors) == 1, errors
    for word in words:
        assert word in errors[0], (word, errors[0])
    code, errors = cfg_job([*applied(refused, fix), *where])
    assert (code, errors) == (0, [])


def test_a_trace_source_without_a_file_then_with_one(tmp_path: Path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text('{"question": "1+1", "response": "2"}\n')
    refused = ["ratio=25", "seeds.source=traces", f"runs_dir={tmp_path}"]
    code, errors = cfg_job(refused)
    assert code == 2 and errors == ["error: config error at 'seeds.source_path': seeds.source=traces needs a JSONL or Parquet file of traces: seeds.source_path=<path>"]
    code, errors = cfg_job([*refused, f"seeds.source_path={traces}", "seeds.selector=uniform", "seeds.pool_size=4"])
    assert code == 2 and len(errors) == 1 and "use seeds.selector=latest" in errors[0]
    assert cfg_job([*refused, f"seeds.source_path={traces}", "seeds.selector=latest"]) == (0, [])
