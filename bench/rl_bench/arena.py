"""(e) the exploration arena: seconds per RL step of each entry over plain DAPO's, both run in the same rounds.

Each entry is tsctl's training loop (:func:`rl_bench.sides.run_tsctl`, the settings of every side) with the overrides
that choose it (:func:`entries`). Its figure ``e_<entry>_over_dapo`` is its mean step time over the run (one refresh
window: seed generation amortised, as (b)) divided by that of the plain DAPO side it is compared with, in the same
round, so the ratio is what the entry itself adds to a step. An entry run without seeds is compared with DAPO at
``ratio=0`` (the side ``tsctl_ratio0``), an entry that needs seeds with DAPO at ``ratio=25`` (``tsctl_ratio25``), and
LUFFY's shaping of trace tokens with DAPO on the same trace seeds (``tsctl_traces``: ``seeds.trace_logprobs=cap``).
Rewards are 0 on every side (the untrained model never stops early and writes no answer; no seed prefix holds a
trace's answer line), so the ratio is the cost of the entry's own work: covariances, ranks, masks, weights, the
reference forward, on every token.

The traces are the task's worked solutions of the prompts the runs train on (one trace per prompt); no trace holds an
end of sequence inside a seed, so every response is ``max_new_tokens`` long there too.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rl_bench.settings import CLOCKS, Settings
from rl_bench.sides import run_tsctl
from tsctl.tasks.base import Problem
from tsctl.tasks.schedule import step_prompts

SEEDED = 25
"""The ``ratio`` of an entry that needs seeded samples, and of the DAPO side it is compared with."""
KL_COEF = 0.1
"""``algo.kl_coef`` of the KL entries (the coefficient of the records' KL arm)."""
KL_TYPES = ("k3", "reverse", "forward", "js")
TRACES = "tsctl_traces"
"""The DAPO side on trace seeds (``seeds.trace_logprobs=cap``)."""


@dataclass(frozen=True)
class Entry:
    """A side of the arena: the overrides that choose it, the ``ratio`` it runs at and the DAPO side it is timed against."""

    overrides: tuple[str, ...]
    ratio: int = 0
    baseline: str = "tsctl_ratio0"


def trace_seeds(traces: Path) -> tuple[str, ...]:
    """The overrides of seeds from the trace file ``traces`` (:func:`write_traces`)."""
    return ("seeds.source=traces", f"seeds.source_path={traces}")


def baselines(traces: Path) -> dict[str, Entry]:
    """Plain DAPO's sides by name: at ratio 0 and 25 ((b)'s sides), and on the trace seeds of ``traces``."""
    return {"tsctl_ratio0": Entry(()), "tsctl_ratio25": Entry((), SEEDED), TRACES: Entry((*trace_seeds(traces), "seeds.trace_logprobs=cap"), SEEDED)}


def entries(s: Settings, traces: Path) -> dict[str, Entry]:
    """Every entry by name, in the table's order; ``traces`` is the trace file of the shaping entry's seeds."""
    return {
        "clip_cov": Entry(("algo.policy_loss=clip_cov",)),
        "kl_cov": Entry(("algo.policy_loss=kl_cov",)),
        "forking_tokens": Entry(("algo.policy_loss=forking_tokens",)),
        "passk": Entry(("algo.adv_estimator=passk", f"algo.passk.k={s.n // 2}")),
        **{f"kl_{kind}": Entry((f"algo.kl_coef={KL_COEF}", f"algo.kl_type={kind}")) for kind in KL_TYPES},
        "m2po": Entry(("algo.stale_mask=m2po",), SEEDED, "tsctl_ratio25"),
        "seq_mis": Entry(("algo.rollout_correction=seq_mis",)),
        "luffy_shaping": Entry((*trace_seeds(traces), "seeds.trace_logprobs=shaping"), SEEDED, TRACES),
    }


BASELINE_OF = {name: entry.baseline for name, entry in entries(Settings(), Path("traces.jsonl")).items()}
"""Each entry's DAPO side (the same at every setting)."""
FIGURES = [f"e_{name}_over_dapo" for name in BASELINE_OF]
"""The arena's figures, in the table's order."""


def write_traces(path: Path, s: Settings, problems: list[Problem], steps: int) -> Path:
    """A trace file at ``path``: the worked solution of each prompt the first ``steps`` steps train on."""
    prompts = sorted({i for step in range(steps) for i in step_prompts(s.seed, step, s.batch_size, len(problems))})
    path.write_text("".join(json.dumps({"question": problems[i].question, "response": problems[i].solution}) + "\n" for i in prompts))
    return path


def arena_sides(s: Settings, model_dir: Path, work: Path, problems: list[Problem], steps: int, plain: bool) -> dict[str, Callable[..., dict]]:
    """One side per entry (``arena_<name>``) and the DAPO side on trace seeds (``tsctl_traces``), each called with the
    round number (a negative one: the warm-up, with its own ``steps``); with ``plain`` also plain DAPO's at ratio 0 and
    25 (``tsctl_ratio0``, ``tsctl_ratio25``; the full bench runs its own)."""
    traces = write_traces(work / "traces.jsonl", s, problems, steps)
    named = {name: entry for name, entry in baselines(traces).items() if plain or name == TRACES}
    named |= {f"arena_{name}": entry for name, entry in entries(s, traces).items()}

    def side(name: str, entry: Entry) -> Callable[..., dict]:
        def go(r: int, steps: int = steps) -> dict:
            label = "warmup" if r < 0 else f"round{r}"
            return run_tsctl(s, model_dir, work / "runs", f"{name}-{label}", entry.ratio, steps, extra=entry.overrides)

        return go

    return {name: side(name, entry) for name, entry in named.items()}


def arena_figures(r: dict, clock: str) -> dict[str, float]:
    """Each entry's mean step time in round ``r`` over its DAPO side's, on ``clock`` (none in a round without the arena)."""

    def mean_step(side: str) -> float:
        return statistics.mean(r[side][f"{clock}_step_s"])

    return {f"e_{name}_over_dapo": mean_step(f"arena_{name}") / mean_step(baseline) for name, baseline in BASELINE_OF.items() if f"arena_{name}" in r}


def arena_report(summary: dict[str, dict[str, dict]], s: Settings, traces: Path) -> dict[str, dict]:
    """Per entry run: its overrides, ratio and DAPO side, and its step-time ratio's median over the rounds on each clock."""
    return {
        name: {"overrides": list(entry.overrides), "ratio": entry.ratio, "baseline": entry.baseline,
               **{f"{clock}_over_dapo": summary[f"e_{name}_over_dapo"][clock]["median"] for clock in CLOCKS}}
        for name, entry in entries(s, traces).items() if f"e_{name}_over_dapo" in summary
    }
