"""What ``scripts/results.py`` runs and what its page compares: the sweeps, the sections built from them and
each section's primary comparisons, declared here before any of its runs is recorded (the history of this
file shows the order).

A *sweep* is one ``tsctl ablate experiment=results name=<sweep>`` grid. A *section* of the page is a set of
*arms*, each the runs of one point of a sweep (a sweep's point may be the arm of several sections). A section's
*primary* comparisons are its family: their p-values are Holm-adjusted together and only they get verdicts;
every other comparison the section shows is exploratory, adjusted in a family of its own and said to be so.
A comparison that is primary in one section is shown with that verdict wherever else it appears.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

WARMUP_MODEL = "{warmup}"
"""Stands, in a sweep's overrides, for the folder of the warmed-up built-in model its runs start from
(``scripts/results.py`` puts the path in before it runs the sweep)."""


@dataclass(frozen=True)
class TrainedAgain:
    """Points of a sweep trained again, at the same settings, as arms of a section whose warm-up model is kept.

    Attributes:
        section: the :data:`SECTIONS` entry.
        arms: the labels of its arms that train the sweep's points again.
    """

    section: str
    arms: list[str]


@dataclass(frozen=True)
class Sweep:
    """One ``tsctl ablate`` grid of the page.

    Attributes:
        title: the heading of its section on the page.
        overrides: the sweep's overrides (Hydra sweep syntax), ``seed`` aside.
        baseline: the point its section's table compares the others with (``key=value``).
        seeds: how many seeds each point runs; None: ``--seeds`` for a ratio sweep (a name ending in
            ``-ratio``), ``--ablation-seeds`` for the others.
        trained_again: where points of this sweep are trained again, in runs of their own, from a warm-up model that
            is kept and scored (its section points there, with or without a warm-up row of its own).
    """

    title: str
    overrides: list[str]
    baseline: str
    seeds: Optional[int] = None
    trained_again: Optional[TrainedAgain] = None


COLLAPSE = ["task=countdown", "trainer.lr=2e-4", "trainer.steps=200"]
"""The regime where plain DAPO degrades: countdown at four times the default learning rate, for 200 steps."""
KEPT = ["trainer.keep_checkpoints=0"]
"""Every checkpoint kept (one each 25 steps), so that each can be scored for the pass@k trajectory."""

SWEEPS: dict[str, Sweep] = {
    "countdown-ratio": Sweep("Countdown: off-policy ratio", ["task=countdown", "ratio=0,25,50"], "ratio=0",
                             trained_again=TrainedAgain("countdown-default-ratio50", ["ratio 0", "ratio 25", "ratio 50"])),
    "arithmetic-ratio": Sweep("Arithmetic chains: off-policy ratio", ["task=arithmetic", "ratio=0,25,50"], "ratio=0"),
    "countdown-truncation": Sweep("Countdown, ratio 25: truncation strategy", ["task=countdown", "ratio=25", "truncation=fixed,uniform,boundary,entropy"], "truncation=uniform",
                                  trained_again=TrainedAgain("countdown-default-truncation", ["fixed", "uniform", "boundary", "entropy"])),
    "countdown-refresh": Sweep("Countdown, ratio 25: refresh interval T", ["task=countdown", "ratio=25", "refresh=5,10,20"], "refresh=10",
                               trained_again=TrainedAgain("countdown-default-refresh", ["refresh 5", "refresh 10", "refresh 20"])),
    "countdown-selectors": Sweep("Countdown, ratio 25, a pool of 4 behaviour snapshots: which one writes the seeds",
                                 ["task=countdown", "ratio=25", "seeds.pool_size=4", "seeds.selector=latest,uniform,bandit"], "seeds.selector=latest",
                                 trained_again=TrainedAgain("countdown-default-selectors", ["latest", "uniform", "bandit"])),
    "countdown-collapse-ratio": Sweep("Countdown where plain DAPO degrades (lr 2e-4, 200 steps): off-policy ratio, seeds 25 steps old",
                                      [*COLLAPSE, "refresh=25", "ratio=0,25,50"], "ratio=0",
                                      trained_again=TrainedAgain("countdown-collapse-ratio50", ["ratio 0", "ratio 25", "ratio 50"])),
    # the mechanism controls, the dose-response and the trajectory (5 seeds each, every checkpoint kept)
    "countdown-collapse-base": Sweep("Countdown at lr 2e-4: ratio 0 and 25, every checkpoint kept", [*COLLAPSE, *KEPT, "refresh=25", "ratio=0,25"], "ratio=0", 5),
    "countdown-collapse-refresh10": Sweep("Countdown at lr 2e-4: ratio 25 with seeds up to 10 steps old", [*COLLAPSE, *KEPT, "ratio=25", "refresh=10"], "ratio=25", 5),
    "countdown-collapse-no-prefix-grad": Sweep("Countdown at lr 2e-4: ratio 25, no gradient on the prefix",
                                               [*COLLAPSE, *KEPT, "ratio=25", "refresh=25", "seeds.train_prefix=false"], "ratio=25", 5),
    "countdown-collapse-warmup-seeds": Sweep("Countdown at lr 2e-4: ratio 25, seeds always written by the warmed-up model",
                                             [*COLLAPSE, *KEPT, "ratio=25", "refresh=25", "seeds.source=model", f"seeds.source_path={WARMUP_MODEL}"], "ratio=25", 5),
    "countdown-collapse-kl": Sweep("Countdown at lr 2e-4: ratio 0 with a KL penalty (0.1) to the warmed-up model",
                                   [*COLLAPSE, *KEPT, "ratio=0", "algo.kl_coef=0.1"], "ratio=0", 5),
    "countdown-dose-lr1e-4": Sweep("Countdown at lr 1e-4, 200 steps: ratio 0 and 25", ["task=countdown", "trainer.lr=1e-4", "trainer.steps=200", *KEPT, "refresh=25", "ratio=0,25"], "ratio=0", 5),
    "countdown-collapse-controller": Sweep("Countdown at lr 2e-4: ratio 25 with the seed controller (truncation=target_pass)",
                                           [*COLLAPSE, *KEPT, "ratio=25", "refresh=25", "truncation=target_pass"], "ratio=25", 5),
    "countdown-dose-lr3e-4": Sweep("Countdown at lr 3e-4, 200 steps: ratio 0 and 25", ["task=countdown", "trainer.lr=3e-4", "trainer.steps=200", *KEPT, "refresh=25", "ratio=0,25"], "ratio=0", 5),
    "countdown-collapse-ratio50": Sweep("Countdown at lr 2e-4: ratio 50, every checkpoint kept", [*COLLAPSE, *KEPT, "refresh=25", "ratio=50"], "ratio=50", 5),
    # the default settings again, from a warm-up model that is kept and scored (countdown-ratio's was not kept)
    "countdown-default-base": Sweep("Countdown at the default settings (lr 5e-5, 400 steps): ratio 0 and 25", ["task=countdown", "ratio=0,25"], "ratio=0", 5),
    "countdown-default-ratio50": Sweep("Countdown at the default settings (lr 5e-5, 400 steps): ratio 50", ["task=countdown", "ratio=50"], "ratio=50", 5),
    "countdown-default-refresh": Sweep("Countdown at the default settings (lr 5e-5, 400 steps), ratio 25: refresh interval T = 5 and 20",
                                       ["task=countdown", "ratio=25", "refresh=5,20"], "refresh=5", 3),
    "countdown-default-truncation": Sweep("Countdown at the default settings (lr 5e-5, 400 steps), ratio 25: truncation fixed, boundary and entropy",
                                          ["task=countdown", "ratio=25", "truncation=fixed,boundary,entropy"], "truncation=fixed", 3),
    "countdown-default-selectors": Sweep("Countdown at the default settings (lr 5e-5, 400 steps), ratio 25, a pool of 4 behaviour snapshots: which one writes the seeds",
                                         ["task=countdown", "ratio=25", "seeds.pool_size=4", "seeds.selector=latest,uniform,bandit"], "seeds.selector=latest", 3),
}
"""name -> the sweep. Every section shows the seeded samples' attribution (by source, arm, age, prefix length) when its runs have seeds."""


@dataclass(frozen=True)
class Arm:
    """The runs of one point of a sweep, under the name a section gives them.

    Attributes:
        label: how the section names the arm.
        sweep: the :data:`SWEEPS` entry that trains it.
        point: its point in that sweep (``ratio=25``); empty for a sweep of one point.
    """

    label: str
    sweep: str
    point: str = ""


@dataclass(frozen=True)
class Primary:
    """One primary comparison: arm ``setting`` against arm ``baseline`` on ``metric``, paired by seed."""

    setting: str
    baseline: str
    metric: str


@dataclass(frozen=True)
class Section:
    """A section of the page built from the arms of one or more sweeps.

    Attributes:
        title: its heading.
        arms: the arms, in the order of its table.
        primary: the comparisons that make its family (the only ones with verdicts).
        question: what it asks, in a sentence, as declared before its runs.
        trajectory: arms whose every checkpoint is scored on the final evaluation's problems (pass@k by step).
        training: show (and compare) the metrics of the whole training too: the share of groups without reward
            variance and the generated tokens per sample of a group with advantage.
    """

    title: str
    arms: list[Arm]
    primary: list[Primary]
    question: str
    trajectory: list[str] = field(default_factory=list)
    training: bool = False


CONTROLS = ["ratio 25, refresh 10", "ratio 25, no prefix gradient", "ratio 25, seeds from the warm-up model", "ratio 0, KL 0.1"]
"""The mechanism controls, each against ratio 25 and against ratio 0."""

SECTIONS: dict[str, Section] = {
    "countdown-collapse-controls": Section(
        "Where plain DAPO degrades (countdown, lr 2e-4, 200 steps): what the seeds' gain comes from",
        [
            Arm("ratio 0", "countdown-collapse-base", "ratio=0"),
            Arm("ratio 25", "countdown-collapse-base", "ratio=25"),
            Arm("ratio 25, refresh 10", "countdown-collapse-refresh10"),
            Arm("ratio 25, no prefix gradient", "countdown-collapse-no-prefix-grad"),
            Arm("ratio 25, seeds from the warm-up model", "countdown-collapse-warmup-seeds"),
            Arm("ratio 0, KL 0.1", "countdown-collapse-kl"),
        ],
        [Primary("ratio 25", "ratio 0", "pass@8")] + [Primary(c, b, "pass@8") for c in CONTROLS for b in ("ratio 25", "ratio 0")],
        "Does ratio 25's held-out pass@8 gain over ratio 0 at this learning rate come from the refresh interval (10 against "
        "25), from the gradient on the prefix, from anchoring to a better old policy (seeds always from the warmed-up "
        "model), or would a plain regulariser (a KL penalty to the warmed-up model, no seeds) do as well?",
        trajectory=["ratio 0", "ratio 25"],
    ),
    "countdown-dose": Section(
        "Dose-response (countdown, 200 steps): the seeds' gain against how far plain DAPO degrades",
        [
            Arm("lr 1e-4, ratio 0", "countdown-dose-lr1e-4", "ratio=0"),
            Arm("lr 1e-4, ratio 25", "countdown-dose-lr1e-4", "ratio=25"),
            Arm("lr 2e-4, ratio 0", "countdown-collapse-base", "ratio=0"),
            Arm("lr 2e-4, ratio 25", "countdown-collapse-base", "ratio=25"),
            Arm("lr 3e-4, ratio 0", "countdown-dose-lr3e-4", "ratio=0"),
            Arm("lr 3e-4, ratio 25", "countdown-dose-lr3e-4", "ratio=25"),
        ],
        [Primary("lr 1e-4, ratio 25", "lr 1e-4, ratio 0", "pass@8"), Primary("lr 3e-4, ratio 25", "lr 3e-4, ratio 0", "pass@8")],
        "Does ratio 25's held-out pass@8 gain over ratio 0 grow with the learning rate, that is with how far plain DAPO "
        "falls below the warmed-up model? (lr 2e-4 is the controls section's, its comparison primary there.)",
    ),
    "countdown-collapse-controller": Section(
        "The seed controller where plain DAPO degrades (countdown, lr 2e-4, 200 steps): seeds steered toward a useful pass rate",
        [
            Arm("ratio 0", "countdown-collapse-base", "ratio=0"),
            Arm("ratio 25", "countdown-collapse-base", "ratio=25"),
            Arm("ratio 25, seed controller", "countdown-collapse-controller"),
        ],
        [Primary("ratio 25, seed controller", "ratio 25", "zero_variance_groups"), Primary("ratio 25, seed controller", "ratio 25", "pass@8"),
         Primary("ratio 25, seed controller", "ratio 0", "pass@8")],
        "Does choosing, per prompt, which graded behaviour response to cut and where (aiming each prompt's seeded samples "
        "at a pass rate of 0.5) leave fewer groups without reward variance than uniform cuts of the latest snapshot's "
        "responses, and does it change held-out pass@8 against ratio 25 and against ratio 0?",
        training=True,
    ),
    "countdown-collapse-ratio50": Section(
        "Where plain DAPO degrades (countdown, lr 2e-4, 200 steps): ratio 50 beside ratio 0 and 25",
        [
            Arm("ratio 0", "countdown-collapse-base", "ratio=0"),
            Arm("ratio 25", "countdown-collapse-base", "ratio=25"),
            Arm("ratio 50", "countdown-collapse-ratio50"),
        ],
        [Primary("ratio 50", "ratio 0", "pass@8")],
        "Does ratio 50, which the first sweep in this regime had ahead of ratio 0 on held-out pass@8 (from a warm-up model "
        "that was not kept), stay ahead when trained from the kept warm-up model beside the rerun ratio 0 and 25, and where "
        "does it end against that model? (ratio 25 against ratio 0 is the controls section's primary comparison.)",
    ),
    "countdown-default": Section(
        "Countdown at the default settings (lr 5e-5, 400 steps), against the model the runs started from",
        [
            Arm("ratio 0", "countdown-default-base", "ratio=0"),
            Arm("ratio 25", "countdown-default-base", "ratio=25"),
        ],
        [Primary("ratio 25", "ratio 0", "pass@8")],
        "At the default settings, does ratio 25 change held-out pass@8 against ratio 0, and where does each end against "
        "the warmed-up model it started from? (Countdown's off-policy ratio sweep asked the first at these settings, "
        "from a warm-up model whose weights were not kept, so it could not answer the second.)",
    ),
    "countdown-default-ratio50": Section(
        "Countdown at the default settings (lr 5e-5, 400 steps): ratio 50 beside ratio 0 and 25",
        [
            Arm("ratio 0", "countdown-default-base", "ratio=0"),
            Arm("ratio 25", "countdown-default-base", "ratio=25"),
            Arm("ratio 50", "countdown-default-ratio50"),
        ],
        [Primary("ratio 50", "ratio 0", "pass@8")],
        "At the default settings, does ratio 50 change held-out pass@8 against ratio 0 when trained from the kept warm-up "
        "model beside the rerun ratio 0 and 25, and where does it end against that model? (Countdown's off-policy ratio "
        "sweep asked the first from a warm-up model that was not kept; ratio 25 against ratio 0 is the default section's "
        "primary comparison.)",
    ),
    "countdown-default-refresh": Section(
        "Countdown at the default settings (lr 5e-5, 400 steps), ratio 25: refresh interval T, against the model the runs started from",
        [
            Arm("refresh 5", "countdown-default-refresh", "refresh=5"),
            Arm("refresh 10", "countdown-default-base", "ratio=25"),
            Arm("refresh 20", "countdown-default-refresh", "refresh=20"),
        ],
        [Primary("refresh 5", "refresh 10", "pass@8"), Primary("refresh 20", "refresh 10", "pass@8")],
        "At the default settings and ratio 25, does refreshing the behaviour snapshot every 5 or every 20 steps, instead of "
        "every 10, change held-out pass@8, paired by seed, and where does each end against the warmed-up model it started "
        "from? (Countdown's refresh sweep asked the first from a warm-up model that was not kept.)",
    ),
    "countdown-default-truncation": Section(
        "Countdown at the default settings (lr 5e-5, 400 steps), ratio 25: truncation strategy, against the model the runs started from",
        [
            Arm("uniform", "countdown-default-base", "ratio=25"),
            Arm("fixed", "countdown-default-truncation", "truncation=fixed"),
            Arm("boundary", "countdown-default-truncation", "truncation=boundary"),
            Arm("entropy", "countdown-default-truncation", "truncation=entropy"),
        ],
        [Primary("fixed", "uniform", "pass@8"), Primary("boundary", "uniform", "pass@8"), Primary("entropy", "uniform", "pass@8")],
        "At the default settings and ratio 25, does cutting the behaviour responses at a fixed share of their length, at a "
        "uniform point moved to just after a step boundary, or just before the highest-entropy token of their opening, "
        "instead of at a uniform point, change held-out pass@8, paired by seed, "
        "and where does each end against the warmed-up model it started from? (Countdown's truncation sweep asked the "
        "first from a warm-up model that was not kept.)",
    ),
    "countdown-default-selectors": Section(
        "Countdown at the default settings (lr 5e-5, 400 steps), ratio 25, a pool of 4 behaviour snapshots: which one writes "
        "the seeds, against the model the runs started from",
        [
            Arm("latest", "countdown-default-selectors", "seeds.selector=latest"),
            Arm("uniform", "countdown-default-selectors", "seeds.selector=uniform"),
            Arm("bandit", "countdown-default-selectors", "seeds.selector=bandit"),
        ],
        [Primary("uniform", "latest", "pass@8"), Primary("bandit", "latest", "pass@8")],
        "At the default settings and ratio 25, with a pool of the 4 most recent behaviour snapshots (one per refresh window), "
        "does choosing, per prompt, the snapshot that writes its seeds uniformly at random, or by a bandit rewarded with the "
        "advantage its seeded samples earn, instead of always the latest, "
        "change held-out pass@8, paired by seed, and where does each end against the warmed-up model it started from? "
        "(Countdown's selector sweep asked the first from a warm-up model that was not kept.)",
    ),
}
"""name -> a section built from arms. The sweeps no section names are sections of their own (their table's
comparisons with the sweep's baseline one family, as before sections declared a primary family)."""


@dataclass(frozen=True)
class Quote:
    """One row of the table of findings that opens docs/RESULTS.md: a comparison the page makes, quoted with the verdict
    of its family.

    Attributes:
        question: what the row answers.
        regime: the setting of the runs, in a few words.
        section: the page section (a :data:`SWEEPS` or :data:`SECTIONS` name) that makes the comparison.
        setting, baseline: the compared points' labels in that section (``warm-up`` for the model the runs started from).
        metric: the compared metric (``pass@8``, ``greedy_accuracy``).
    """

    question: str
    regime: str
    section: str
    setting: str
    baseline: str
    metric: str


SEEDS_VS_DAPO = "Seeds against plain DAPO"
AGAINST_WARMUP = "The end against the start"
MECHANISM = "What carries the gain"
DEFAULT = "default (lr 5e-5, 400 steps)"
COLLAPSE_REGIME = "lr 2e-4, 200 steps"

FINDINGS = [
    Quote(SEEDS_VS_DAPO, f"countdown, {DEFAULT}", "countdown-ratio", "ratio=25", "ratio=0", "pass@8"),
    Quote(SEEDS_VS_DAPO, f"countdown, {DEFAULT}", "countdown-ratio", "ratio=50", "ratio=0", "pass@8"),
    Quote(SEEDS_VS_DAPO, f"arithmetic, {DEFAULT}", "arithmetic-ratio", "ratio=25", "ratio=0", "pass@8"),
    Quote(SEEDS_VS_DAPO, f"arithmetic, {DEFAULT}", "arithmetic-ratio", "ratio=50", "ratio=0", "pass@8"),
    Quote(SEEDS_VS_DAPO, f"countdown, {DEFAULT} (rerun)", "countdown-default", "ratio 25", "ratio 0", "pass@8"),
    Quote(SEEDS_VS_DAPO, f"countdown, {DEFAULT} (rerun)", "countdown-default-ratio50", "ratio 50", "ratio 0", "pass@8"),
    Quote(SEEDS_VS_DAPO, f"countdown, {COLLAPSE_REGIME}, refresh 25", "countdown-collapse-ratio", "ratio=25", "ratio=0", "pass@8"),
    Quote(SEEDS_VS_DAPO, f"countdown, {COLLAPSE_REGIME}, refresh 25", "countdown-collapse-ratio", "ratio=50", "ratio=0", "pass@8"),
    Quote(SEEDS_VS_DAPO, f"countdown, {COLLAPSE_REGIME}, refresh 25 (rerun)", "countdown-collapse-controls", "ratio 25", "ratio 0", "pass@8"),
    Quote(SEEDS_VS_DAPO, f"countdown, {COLLAPSE_REGIME}, refresh 25 (rerun)", "countdown-collapse-ratio50", "ratio 50", "ratio 0", "pass@8"),
    Quote(SEEDS_VS_DAPO, "countdown, lr 1e-4, 200 steps, refresh 25", "countdown-dose", "lr 1e-4, ratio 25", "lr 1e-4, ratio 0", "pass@8"),
    Quote(SEEDS_VS_DAPO, "countdown, lr 3e-4, 200 steps, refresh 25", "countdown-dose", "lr 3e-4, ratio 25", "lr 3e-4, ratio 0", "pass@8"),
    Quote(AGAINST_WARMUP, f"countdown, {DEFAULT} (rerun)", "countdown-default", "ratio 0", "warm-up", "pass@8"),
    Quote(AGAINST_WARMUP, f"countdown, {DEFAULT} (rerun)", "countdown-default", "ratio 25", "warm-up", "pass@8"),
    Quote(AGAINST_WARMUP, f"countdown, {DEFAULT} (rerun)", "countdown-default-ratio50", "ratio 50", "warm-up", "pass@8"),
    *(Quote(AGAINST_WARMUP, f"arithmetic, {DEFAULT}", "arithmetic-ratio", f"ratio={r}", "warm-up", "pass@8") for r in (0, 25, 50)),
    Quote(AGAINST_WARMUP, f"countdown, {COLLAPSE_REGIME}, refresh 25 (rerun)", "countdown-collapse-controls", "ratio 0", "warm-up", "pass@8"),
    Quote(AGAINST_WARMUP, f"countdown, {COLLAPSE_REGIME}, refresh 25 (rerun)", "countdown-collapse-controls", "ratio 25", "warm-up", "pass@8"),
    *(Quote(MECHANISM, f"countdown, {COLLAPSE_REGIME}", "countdown-collapse-controls", control, "ratio 25", "pass@8") for control in CONTROLS),
    Quote("The seed controller", f"countdown, {COLLAPSE_REGIME}", "countdown-collapse-controller", "ratio 25, seed controller", "ratio 25", "zero_variance_groups"),
    Quote("The seed controller", f"countdown, {COLLAPSE_REGIME}", "countdown-collapse-controller", "ratio 25, seed controller", "ratio 25", "pass@8"),
    *(Quote("How often the seeds are refreshed", f"countdown, {DEFAULT}, ratio 25 (rerun)", "countdown-default-refresh", f"refresh {t}",
            "refresh 10", "pass@8") for t in (5, 20)),
    *(Quote("Where the behaviour response is cut", f"countdown, {DEFAULT}, ratio 25 (rerun)", "countdown-default-truncation", strategy,
            "uniform", "pass@8") for strategy in ("fixed", "boundary", "entropy")),
    *(Quote("Which snapshot writes the seeds", f"countdown, {DEFAULT}, ratio 25, pool of 4 (rerun)", "countdown-default-selectors", selector,
            "latest", "pass@8") for selector in ("uniform", "bandit")),
]
"""The table of findings that opens docs/RESULTS.md, in its order (written by ``scripts/results.py --render`` from the
records)."""


@dataclass(frozen=True)
class Rerun:
    """A comparison of a first sweep made again at the same settings, in runs of their own from a newly warmed-up model.

    Attributes:
        sweep, setting, baseline: the first sweep (a :data:`SWEEPS` entry) and its compared points (``ratio=25``, ``ratio=0``).
        section, again_setting, again_baseline: the :data:`SECTIONS` entry that makes the comparison again, under its labels.
        metric: the metric the two estimates are set against each other on (the other held-out metrics count for claim
            (iii), :func:`results_known.surviving`).
    """

    sweep: str
    setting: str
    baseline: str
    section: str
    again_setting: str
    again_baseline: str
    metric: str = "pass@8"


RERUNS = [
    Rerun("countdown-ratio", "ratio=25", "ratio=0", "countdown-default", "ratio 25", "ratio 0"),
    Rerun("countdown-ratio", "ratio=50", "ratio=0", "countdown-default-ratio50", "ratio 50", "ratio 0"),
    Rerun("countdown-collapse-ratio", "ratio=25", "ratio=0", "countdown-collapse-controls", "ratio 25", "ratio 0"),
    Rerun("countdown-collapse-ratio", "ratio=50", "ratio=0", "countdown-collapse-ratio50", "ratio 50", "ratio 0"),
]
"""Seeds against plain DAPO made twice, each time from its own warm-up model: the page sets the two estimates against each
other (Welch), pools the compatible ones (post hoc) and counts a claim's verdict only where its rerun says it again."""


# The hard regime: countdown settings under which the warm-up model rarely solves a held-out problem, so that a method
# for exploration has room. Declared, with the rule that picks one, before any candidate's warm-up model was scored.
@dataclass(frozen=True)
class Regime:
    """Candidate settings of a harder task, scored by their warm-up models before any RL run uses them.

    Attributes:
        label: its name on the page.
        overrides: the task keys that make it (everything the warm-up reads besides the defaults).
    """

    label: str
    overrides: list[str]


def _countdown(numbers: tuple[int, int], max_number: int, max_target: int) -> list[str]:
    """The overrides of countdown with ``numbers`` (fewest, most) drawn from 1..``max_number`` and targets up to ``max_target``."""
    return ["task=countdown", f"task.countdown.min_numbers={numbers[0]}", f"task.countdown.max_numbers={numbers[1]}",
            f"task.countdown.max_number={max_number}", f"task.countdown.max_target={max_target}"]


HARD_CANDIDATES = [
    Regime("4 numbers of 1-20, targets up to 200", _countdown((4, 4), 20, 200)),
    Regime("4 numbers of 1-30, targets up to 500", _countdown((4, 4), 30, 500)),
    Regime("4 numbers of 1-50, targets up to 1000", _countdown((4, 4), 50, 1000)),
    Regime("4-5 numbers of 1-20, targets up to 500", _countdown((4, 5), 20, 500)),
]
"""The candidates, easiest first (the default task is 3-4 numbers of 1-10, targets up to 100)."""

HARD_SCORING = {"warmup_seeds": [0], "sampling_seeds": [0, 1]}
"""What scores a candidate: the warm-up model of each ``model.warmup.seed`` here, each evaluated as a run's final
evaluation would with each sampling seed here (``scripts/results_scoring.py``'s warm-up records)."""

HARD_RULE = ("the candidate whose warm-up models' held-out pass@8 (mean over the records) is the highest of those at most 0.30, "
             "among those whose pass@1 is above 0; none when no candidate qualifies (then more are declared, not the bar moved)")
"""The rule that chooses the hard regime from the candidates' records; :data:`HARD_PASS_AT_8` and :data:`HARD_MIN_PASS_AT_1` are its numbers."""
HARD_PASS_AT_8 = 0.30
HARD_MIN_PASS_AT_1 = 0.0

HARD_REGIME = HARD_CANDIDATES[0].overrides
"""The hard regime: the candidate :data:`HARD_RULE` chose from the candidates' warm-up records (committed before this
line; docs/RESULTS.md's hard-regime section shows them): 4 numbers of 1-20, targets up to 200, its warm-up model's
held-out pass@8 0.277 and pass@1 0.068."""

# The arena, declared before its runs: the field's methods for keeping pass@k against plain DAPO and the seeds, in the
# hard regime at the default learning rate and length, with the warm-up model a random unit (4 warm-up models x 2 seeds).
ARENA_WARMUPS = "model.warmup.seed=0,1,2,3"
ARENA_ARMS = {
    "DAPO": ["ratio=0"],
    "ratio 25": ["ratio=25"],
    "KL 0.1": ["ratio=0", "algo.kl_coef=0.1"],
    "KL-Cov": ["ratio=0", "algo.policy_loss=kl_cov", "algo.kl_cov.k_ratio=0.002"],
    "forking tokens 20%": ["ratio=0", "algo.policy_loss=forking_tokens", "algo.forking_tokens.top_share=0.2"],
    "pass@k training": ["ratio=0", "algo.adv_estimator=passk", "algo.passk.k=4"],
    "ratio 25 + KL 0.1": ["ratio=25", "algo.kl_coef=0.1"],
}
"""Each arm's settings beside the regime's (the defaults otherwise: lr 5e-5, 400 steps, refresh 10 where seeded)."""
ARENA_CONTROL = ("random reward", ["model.warmup.seed=0", "ratio=0", "task.reward=random"])
"""The random-reward control: one warm-up model x 2 seeds, exploratory."""


def _arena_sweep(label: str) -> str:
    """The :data:`SWEEPS` name of arena arm ``label``."""
    return "hard-arena-" + re.sub("[^a-z0-9]+", "-", label.lower()).strip("-")


SWEEPS.update({_arena_sweep(label): Sweep(f"Hard regime arena: {label}", [*HARD_REGIME, ARENA_WARMUPS, *settings], settings[0], 2)
               for label, settings in ARENA_ARMS.items()})
SWEEPS[_arena_sweep(ARENA_CONTROL[0])] = Sweep(f"Hard regime arena: {ARENA_CONTROL[0]} (control)", [*HARD_REGIME, *ARENA_CONTROL[1]], "ratio=0", 2)

ARENA_METRICS = ("pass@8", "pass@1")
SECTIONS["hard-arena"] = Section(
    "The arena (hard countdown, default lr 5e-5, 400 steps, 4 warm-up models x 2 seeds): which method keeps what RL takes away",
    [Arm(label, _arena_sweep(label)) for label in [*ARENA_ARMS, ARENA_CONTROL[0]]],
    [Primary(label, "DAPO", metric) for label in ARENA_ARMS if label != "DAPO" for metric in ARENA_METRICS]
    + [Primary("ratio 25 + KL 0.1", "KL 0.1", metric) for metric in ARENA_METRICS],
    "Where the warm-up model rarely solves a problem, does any method keep held-out pass@8 (and pass@1) above plain DAPO's, "
    "and does seeding add anything to the best regulariser (ratio 25 + KL against KL alone)? Warm-up models are a random "
    "unit (training seeds nested in them, crossed with problems); every arm against the warm-up model, and the random-reward "
    "control (one warm-up model), are exploratory.",
)
