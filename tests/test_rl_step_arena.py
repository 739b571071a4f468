"""bench/rl_step.py's (e): each entry of the exploration arena timed against plain DAPO in the same rounds, its figure
the entry's mean step time over its DAPO side's; a tiny ``--arena-only`` run reports every entry with a finite, positive
ratio on both clocks."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
ENTRIES = ["clip_cov", "kl_cov", "forking_tokens", "passk", "kl_k3", "kl_reverse", "kl_forward", "kl_js", "m2po", "seq_mis", "luffy_shaping"]
"""The issue's entries: the three token selections, pass@k, the KL term's four divergences, the two stale-token
corrections, LUFFY's shaping."""


@pytest.fixture
def bench(monkeypatch) -> ModuleType:
    """The bench's package ``rl_bench``, ``bench/`` on the import path as the script has it."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("rl_bench")


def test_each_entry_runs_at_its_ratio_against_the_dapo_side_of_that_ratio(bench):
    from rl_bench.arena import TRACES, baselines, entries
    from rl_bench.settings import Settings

    chosen = entries(Settings(n=8), Path("t.jsonl"))
    assert list(chosen) == ENTRIES
    assert {name: (e.ratio, e.baseline) for name, e in chosen.items() if e.baseline != "tsctl_ratio0"} == {
        "m2po": (25, "tsctl_ratio25"), "luffy_shaping": (25, TRACES)}
    assert all(e.ratio == 0 for e in chosen.values() if e.baseline == "tsctl_ratio0")
    assert chosen["passk"].overrides == ("algo.adv_estimator=passk", "algo.passk.k=4")  # below trainer.n
    assert chosen["kl_js"].overrides == ("algo.kl_coef=0.1", "algo.kl_type=js")
    # the shaping's DAPO side trains the same trace seeds, their ratio against pi_old (cap) instead of shaped
    plain = baselines(Path("t.jsonl"))
    assert plain[TRACES].overrides == ("seeds.source=traces", "seeds.source_path=t.jsonl", "seeds.trace_logprobs=cap")
    assert chosen["luffy_shaping"].overrides == (*plain[TRACES].overrides[:2], "seeds.trace_logprobs=shaping")
    assert (plain["tsctl_ratio0"].overrides, plain["tsctl_ratio25"].ratio) == ((), 25)


def test_a_figure_is_the_entrys_mean_step_over_its_dapo_sides_in_the_round(bench):
    from rl_bench.arena import arena_report
    from rl_bench.report import summarise
    from rl_bench.settings import Settings

    def run(wall, cpu):
        return {"wall_step_s": wall, "cpu_step_s": cpu}

    # DAPO at ratio 0: mean 2.0 s wall, 1.0 s CPU; at ratio 25: 4.0 and 2.0; on trace seeds: 3.0 and 3.0
    rounds = [
        {"tsctl_ratio0": run([1.0, 3.0], [1.0, 1.0]), "tsctl_ratio25": run([4.0, 4.0], [1.0, 3.0]), "tsctl_traces": run([3.0], [3.0]),
         "arena_clip_cov": run([2.0, 3.0], [1.5, 1.5]), "arena_m2po": run([5.0, 5.0], [2.0, 2.0]), "arena_luffy_shaping": run([1.5], [6.0])},
        {"tsctl_ratio0": run([2.0, 2.0], [2.0, 2.0]), "tsctl_ratio25": run([4.0, 4.0], [2.0, 2.0]), "tsctl_traces": run([3.0], [3.0]),
         "arena_clip_cov": run([2.0, 2.0], [2.0, 2.0]), "arena_m2po": run([4.0, 4.0], [2.0, 2.0]), "arena_luffy_shaping": run([3.0], [3.0])},
    ]
    summary = summarise(rounds, None)
    # clip_cov: 2.5 / 2.0 and 1.5 / 1.0 in round 1, 2.0 / 2.0 and 2.0 / 2.0 in round 2
    assert summary["e_clip_cov_over_dapo"]["wall"]["values"] == [1.25, 1.0]
    assert summary["e_clip_cov_over_dapo"]["cpu"]["values"] == [1.5, 1.0]
    assert summary["e_m2po_over_dapo"]["wall"]["values"] == [1.25, 1.0]  # over DAPO at ratio 25: 5 / 4, 4 / 4
    assert summary["e_luffy_shaping_over_dapo"]["wall"]["values"] == [0.5, 1.0]  # over DAPO on the traces: 1.5 / 3, 3 / 3
    assert summary["e_luffy_shaping_over_dapo"]["cpu"]["median"] == 1.5  # 6 / 3 and 3 / 3
    report = arena_report(summary, Settings(), Path("t.jsonl"))
    assert list(report) == ["clip_cov", "m2po", "luffy_shaping"]  # the entries run, in the table's order
    assert report["clip_cov"] == {"overrides": ["algo.policy_loss=clip_cov"], "ratio": 0, "baseline": "tsctl_ratio0",
                                  "wall_over_dapo": 1.125, "cpu_over_dapo": 1.25}
    assert report["m2po"]["baseline"] == "tsctl_ratio25" and report["m2po"]["ratio"] == 25


@pytest.mark.slow
def test_a_tiny_arena_only_run_reports_every_entry_against_dapo(bench, tmp_path, monkeypatch):
    from rl_bench.settings import Settings

    rl_step = importlib.import_module("rl_step")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # the script sets it; put back after
    tiny = Settings(batch_size=2, n=4, max_new_tokens=8, mini_batches=1, task=("task.train_size=64", "task.heldout_size=8"))
    out = tmp_path / "arena.json"
    argv = ["--arena-only", "--rounds", "1", "--steps", "1", "--threads", str(torch.get_num_threads()), "--out", str(out),
            "--workdir", str(tmp_path / "work")]
    report = rl_step.main(argv, tiny)
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert list(report["arena"]) == ENTRIES
    for name, entry in report["arena"].items():
        assert entry["baseline"] in {"tsctl_ratio0", "tsctl_ratio25", "tsctl_traces"} and entry["overrides"]
        for clock in ("wall", "cpu"):
            ratio = entry[f"{clock}_over_dapo"]
            assert math.isfinite(ratio) and ratio > 0, (name, clock, ratio)
            assert report["summary"][f"e_{name}_over_dapo"][clock]["values"] == [ratio]  # one round: its ratio
    (only,) = report["rounds"]
    assert set(only) == {"tsctl_ratio0", "tsctl_ratio25", "tsctl_traces", *(f"arena_{name}" for name in ENTRIES)}
    assert all(len(side["wall_step_s"]) == 1 for side in only.values())  # --steps 1: one step each
    assert report["generation"] is None and not report["targets"]  # (e) alone: no other part ran
