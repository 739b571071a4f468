"""What docs/RESULTS.md says across its sections: a first sweep's comparisons made again from a newly warmed-up model
(:data:`results_spec.RERUNS`) set against their first estimates, every section's primary comparisons as one Holm family,
a ratio sweep's claim (iii) counting only what its rerun said again, and the box of what the records establish that
opens the page (README.md carries the same box, ``tests/test_findings.py`` keeps the two equal).

Two estimates of one difference, ``d1`` and ``d2`` with standard errors ``se1``, ``se2`` on ``df1``, ``df2`` degrees of
freedom (:func:`results_arms.spread`), each from runs of its own warm-up model, are set against each other with Welch's t,
``t = (d1 - d2) / sqrt(se1^2 + se2^2)`` on Satterthwaite's ``(se1^2 + se2^2)^2 / (se1^4 / df1 + se2^4 / df2)`` degrees of
freedom. A small p says the two warm-up models' runs do not estimate one difference: the warm-up model moved it by more
than the training seeds and the drawn problems explain. Compatible estimates (p >= 0.05) are pooled, post hoc, weighted by
``1 / se^2``, with a t-interval on Satterthwaite's degrees of freedom: a fixed-effect pooling, which does not count the
warm-up model's own variance.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Optional

from results_arms import HELD_OUT, Decided
from results_spec import FINDINGS, MECHANISM, RERUNS, SECTIONS, SWEEPS, Rerun
from tsctl.analysis.claims import CLAIMS, claim_status, ratio_beats_zero
from tsctl.analysis.families import holm
from tsctl.analysis.points import header
from tsctl.analysis.stats import LEVEL, Interval, t_quantile, t_two_sided_p
from tsctl.analysis.tables import md_table

ALPHA = 1 - LEVEL
"""Below this a Welch p calls two estimates of one difference incompatible."""
Quotes = dict[str, list[dict]]
"""page section -> its comparisons as :func:`results_arms.quote` gives them."""
Key = tuple[str, str, str, str]
"""A comparison on the page: its section, setting and baseline labels there, and its metric."""


def find(quotes: Quotes, section: str, setting: str, baseline: str, metric: str) -> Optional[dict]:
    """The comparison ``setting`` against ``baseline`` on ``metric`` of ``section`` (its first quote, the one that decides), None when not made."""
    return next((q for q in quotes.get(section, []) if (q["setting"], q["baseline"], q["metric"]) == (setting, baseline, metric)), None)


def estimate(q: dict) -> str:
    """``+0.024 [+0.003, +0.045]``: a quoted difference with its 95% interval."""
    return f"{q['difference']:+.3f} [{q['low']:+.3f}, {q['high']:+.3f}]"


def title(section: str) -> str:
    """The heading of a page section, a :data:`SECTIONS` or :data:`SWEEPS` entry."""
    return SECTIONS[section].title if section in SECTIONS else SWEEPS[section].title


@dataclass(frozen=True)
class Twice:
    """One :class:`~results_spec.Rerun` comparison: its first estimate, its rerun's, Welch's t of their difference and,
    where the two are compatible, their pooled estimate (post hoc)."""

    rerun: Rerun
    first: dict
    again: dict
    t: float
    df: float
    p: float
    pooled: Optional[Interval]

    @property
    def compatible(self) -> bool:
        return not self.p < ALPHA

    @property
    def outcome(self) -> str:
        """What setting the two estimates against each other says, in words."""
        same = self.first["verdict"] == self.again["verdict"]
        if not self.compatible:
            return "said again, at an incompatible size" if same else "did not replicate; the two estimates are incompatible"
        return "said again" if same else "compatible estimates, different verdicts"

    def welch(self) -> str:
        """``Welch t 5.10 on 6.7 df, p 0.0016``."""
        return f"Welch t {self.t:.2f} on {self.df:.1f} df, p {self.p:.2g}"


def welch(first: dict, again: dict) -> tuple[float, float, float]:
    """Welch's t of ``first``'s difference minus ``again``'s, its degrees of freedom and two-sided p (module docstring)."""
    v1, v2 = first["se"] ** 2, again["se"] ** 2
    t = (first["difference"] - again["difference"]) / math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / (v1**2 / first["df"] + v2**2 / again["df"])
    return t, df, t_two_sided_p(t, df)


def pooled(first: dict, again: dict, level: float = LEVEL) -> Interval:
    """The inverse-variance weighted mean of the two differences, its standard error as ``std``, ``n`` the seeds of both,
    and its t-interval on Satterthwaite's degrees of freedom (module docstring)."""
    w1, w2 = 1 / first["se"] ** 2, 1 / again["se"] ** 2
    mean = (w1 * first["difference"] + w2 * again["difference"]) / (w1 + w2)
    parts = [(w / (w1 + w2)) ** 2 * q["se"] ** 2 for w, q in ((w1, first), (w2, again))]  # the two shares of the variance
    variance = sum(parts)
    df = variance**2 / sum(part**2 / q["df"] for part, q in zip(parts, (first, again)))
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(variance)
    return Interval(mean, math.sqrt(variance), first["seeds"] + again["seeds"], mean - half, mean + half)


def made_twice(quotes: Quotes) -> list[Twice]:
    """Every :data:`RERUNS` comparison whose two estimates both have an interval, set against each other."""
    out = []
    for r in RERUNS:
        first, again = find(quotes, r.sweep, r.setting, r.baseline, r.metric), find(quotes, r.section, r.again_setting, r.again_baseline, r.metric)
        if first is None or again is None or any(math.isnan(q.get("se", math.nan)) for q in (first, again)):
            continue
        t, df, p = welch(first, again)
        out.append(Twice(r, first, again, t, df, p, pooled(first, again) if not p < ALPHA else None))
    return out


def twice_sentence(tw: Twice) -> str:
    """One comparison made twice, in a sentence, as the first sweep's section says it."""
    r = tw.rerun
    return (f"Trained again from a newly warmed-up model (section \"{title(r.section)}\"), {r.setting} against {r.baseline} on "
            f"held-out {r.metric}, {estimate(tw.first)} here ({tw.first['verdict']}), gave {estimate(tw.again)} "
            f"({tw.again['verdict']}): {tw.outcome} ({tw.welch()}).")


def section_note(sweep: str, twice: list[Twice]) -> list[str]:
    """The lines that open a first sweep's section when its comparisons were made again (none otherwise)."""
    mine = [tw for tw in twice if tw.rerun.sweep == sweep]
    if not mine:
        return []
    lines = [" ".join(twice_sentence(tw) for tw in mine)]
    if any(not tw.compatible for tw in mine):
        lines[0] += (" A verdict of this section holds for the warm-up model its runs started from: between two warm-up models this "
                     "comparison moved by more than the training seeds and the drawn problems explain, and this section's "
                     "intervals count only those. Claim (iii), in \"The method's claims\" above, counts only what the rerun said again.")
    return lines + [""]


def twice_lines(twice: list[Twice]) -> list[str]:
    """The table of the comparisons made twice, each from its own warm-up model, with what it says."""
    if not twice:
        return []
    rows = []
    for tw in twice:
        r, pool = tw.rerun, tw.pooled
        rows.append([f"{r.setting} vs {r.baseline}, {header(r.metric)}",
                     f"{estimate(tw.first)}, {tw.first['verdict']} (`{r.sweep}`, warm-up {', '.join(tw.first['warmup']) or 'not recorded'})",
                     f"{estimate(tw.again)}, {tw.again['verdict']} (`{r.section}`, warm-up {', '.join(tw.again['warmup']) or 'not recorded'})",
                     f"{tw.t:.2f} ({tw.df:.1f})", f"{tw.p:.2g}", tw.outcome,
                     f"{pool.mean:+.3f} [{pool.low:+.3f}, {pool.high:+.3f}]" if pool else "– (incompatible: not pooled)"])
    return ["### Made twice, each time from its own warm-up model", "",
            "The first sweeps' comparisons of seeds against plain DAPO, made again at the same settings in runs of their own from a "
            "newly warmed-up model. Welch's t sets the two estimates (seeds and problems) against each other; a p below 0.05 says the "
            "two warm-up models' runs do not estimate one difference, so the warm-up model (with whatever else the two sweeps' first "
            "lines say differs between their runs) moved it by more than the training seeds and the drawn problems explain, and an "
            "interval from one warm-up model understates how far it can move. Compatible "
            "estimates are pooled, post hoc (not declared before the runs): weighted by the inverse of their variances, a t-interval "
            "on Satterthwaite's degrees of freedom, a fixed-effect pooling that does not count the warm-up model's own variance.", "",
            *md_table(["comparison", "first sweep", "made again", "Welch t (df)", "p", "what it says", "pooled, post hoc"], rows), ""]


def page_holm(decided: Decided) -> dict[Key, float]:
    """Every section's primary comparisons with a p-value as one Holm family: ``(section, setting, baseline, metric)`` -> its
    p adjusted over all of them (a reading across the page beside the verdict of its declared family)."""
    made = [(home, row) for row, home in decided.rows.values() if not math.isnan(row.decided.p_value)]
    adjusted = holm([row.decided.p_value for _, row in made])
    return {(home, row.point.label, row.baseline.label, row.metric): p for (home, row), p in zip(made, adjusted)}


def surviving(claim_blocks: list[tuple[str, list[dict]]], quotes: Quotes) -> list[tuple[str, list[dict]]]:
    """The ratio sweeps' claims, claim (iii) counting as better only a comparison its rerun (:data:`RERUNS`, the same pair on
    the same held-out metric) said better again; a comparison with no rerun keeps its verdict. A sweep none of whose
    comparisons changed keeps its claims as they are."""
    i = next(i for i, claim in enumerate(CLAIMS) if claim.comparisons is ratio_beats_zero)
    out = []
    for sweep, found in claim_blocks:
        verdicts, said, held, homes = [], 0, 0, set()
        for q in (q for q in quotes.get(sweep, []) if q["baseline"] == "ratio=0" and q["metric"] in HELD_OUT):
            rerun = next((r for r in RERUNS if (r.sweep, r.setting, r.baseline) == (sweep, q["setting"], q["baseline"])), None)
            again = find(quotes, rerun.section, rerun.again_setting, rerun.again_baseline, q["metric"]) if rerun else None
            if q["verdict"] == "better" and again is not None:
                said, homes = said + 1, homes | {rerun.section}
                held += again["verdict"] == "better"
                verdicts.append("better" if again["verdict"] == "better" else "not said again")
            else:
                verdicts.append(q["verdict"] if q["verdict"] in ("better", "worse", "not distinguishable") else None)
        if held == said:
            out.append((sweep, found))
            continue
        status = (f"{claim_status(verdicts, 'better')} and said so again from a newly warmed-up model ({said} said better from "
                  "this sweep's warm-up model alone)")
        named = ", ".join(f"section \"{title(h)}\"" for h in sorted(homes))
        line = (f"made again from a newly warmed-up model ({named}): {held} of the {said} comparison(s) that say better here said "
                "so again; the verdict above counts only those.")
        found = [*found[:i], {"status": status, "lines": [*found[i]["lines"], line]}, *found[i + 1:]]
        out.append((sweep, found))
    return out


VARIANTS = [q for q in FINDINGS if q.question == MECHANISM and q.setting.startswith("ratio 25")] + [
    q for q in FINDINGS if q.metric == "pass@8" and q.question in ("The seed controller", "How often the seeds are refreshed",
                                                                   "Where the behaviour response is cut", "Which snapshot writes the seeds")]
"""The findings that set a variant of the seeds against the seeds it varies, on held-out pass@8."""


def _verb(q: dict) -> str:
    """``ended above`` / ``ended below`` by the sign of a quoted difference."""
    return "ended above" if q["difference"] > 0 else "ended below"


def _sides(found: list[dict]) -> str:
    """``ended above`` when every quoted difference is positive, ``ended below`` when every one is negative, else each in turn."""
    said = [_verb(q) for q in found]
    return said[0] if len(set(said)) == 1 else "ended " + " / ".join(s.removeprefix("ended ") for s in said)


def _default(quotes: Quotes, twice: list[Twice], page_p: dict[Key, float]) -> str:
    q = quotes_of(quotes, "countdown-default", "ratio 25", "ratio 0", "pass@8")
    key = ("countdown-default", "ratio 25", "ratio 0", "pass@8")
    if key not in page_p:
        raise LookupError("ratio 25 vs ratio 0, held-out pass@8 (`countdown-default`) with a p-value")
    p = page_p[key]
    size = re.search(r"Holm over (\d+)", q["family"])
    line = (f"At the default settings (countdown, lr 5e-5, 400 steps) ratio 25 {_verb(q)} plain DAPO (ratio 0) on held-out pass@8 "
            f"by {estimate(q)}: {q['verdict']} in its declared family of {size.group(1) if size else 'its section'} (Holm "
            f"{q['p_holm']:.2g}), {'better' if p < ALPHA else 'not distinguishable'} with Holm over all {len(page_p)} primary "
            f"comparisons of this page together ({p:.2g})")
    tw = next((tw for tw in twice if tw.again is q), None)
    if tw is not None and tw.pooled is not None:
        line += (f"; pooled post hoc with the first sweep from another warm-up model ({estimate(tw.first)}), "
                 f"{tw.pooled.mean:+.3f} [{tw.pooled.low:+.3f}, {tw.pooled.high:+.3f}]")
    return line + ". Records: `docs/results/countdown-default-base/runs/`, `docs/results/countdown-ratio/runs/`."


def _collapse(quotes: Quotes, twice: list[Twice], page_p: dict[Key, float]) -> str:
    tw = next(tw for tw in twice if (tw.rerun.sweep, tw.rerun.setting) == ("countdown-collapse-ratio", "ratio=25"))
    said = ("did not replicate" if tw.outcome.startswith("did not replicate") else "was said again" if tw.outcome.startswith("said again")
            else "gave another verdict")
    line = (f"Where plain DAPO degrades (countdown, lr 2e-4, 200 steps) the first sweep's {estimate(tw.first)} for ratio 25 against "
            f"plain DAPO on pass@8 ({tw.first['verdict']}) {said} from a newly warmed-up model: {estimate(tw.again)} "
            f"({tw.again['verdict']}).")
    if not tw.compatible:
        line += (f" The two estimates are incompatible ({tw.welch()}): the warm-up model moved this comparison by more than the "
                 "training seeds do, and each interval on this page comes from one warm-up model.")
    return line + " Records: `docs/results/countdown-collapse-ratio/runs/`, `docs/results/countdown-collapse-base/runs/`."


def _kl(quotes: Quotes, twice: list[Twice], page_p: dict[Key, float]) -> str:
    section, kl = "countdown-collapse-controls", "ratio 0, KL 0.1"
    held = quotes_of(quotes, section, kl, "warm-up", "pass@8")
    beat = quotes_of(quotes, section, kl, "ratio 25", "pass@8")
    greedy, first = (quotes_of(quotes, section, kl, "warm-up", m) for m in ("greedy_accuracy", "pass@1"))
    return (f"In that regime a KL penalty of 0.1 to the warm-up model, with no seeds, ended at pass@8 {held['setting_mean']:.3f} against "
            f"the warm-up model's {held['baseline_mean']:.3f} ({estimate(held)}, {held['verdict']}) and {_verb(beat)} ratio 25 by "
            f"{estimate(beat)} ({beat['verdict']}); it also {_sides([greedy, first])} the warm-up model on greedy accuracy "
            f"({estimate(greedy)}, {greedy['verdict']}) and pass@1 ({estimate(first)}, {first['verdict']}). "
            "Records: `docs/results/countdown-collapse-kl/runs/`.")


def _variants(quotes: Quotes, twice: list[Twice], page_p: dict[Key, float]) -> str:
    found = [quotes_of(quotes, v.section, v.setting, v.baseline, v.metric) for v in VARIANTS]
    apart = [f"{q['setting']} ({estimate(q)}, {q['verdict']})" for q in found if q["verdict"] != "not distinguishable"]
    which = ("seeds up to 10 steps old, no prefix gradient, seeds from the warm-up model, the seed controller, the refresh interval, "
             "where the behaviour response is cut, which snapshot writes them")
    line = (f"None of {len(found)} variants of the seeds ({which}) was distinguishable on pass@8 from the seeds it varies, each in its "
            "declared family" if not apart else
            f"{len(apart)} of {len(found)} variants of the seeds ({which}) were distinguishable on pass@8 from the seeds they vary, "
            f"each in its declared family: {', '.join(apart)}")
    zero = quotes_of(quotes, "countdown-collapse-controller", "ratio 25, seed controller", "ratio 25", "zero_variance_groups")
    if zero["difference"] > 0:
        line += (f". The seed controller, which aims to lower the share of groups without reward variance, raised it: "
                 f"{estimate(zero)} ({zero['verdict']} in its declared family, Holm {zero['p_holm']:.2g}; {zero['rules_out']})")
    return line + (". Records: `docs/results/countdown-collapse-{refresh10,no-prefix-grad,warmup-seeds,controller}/runs/`, "
                   "`docs/results/countdown-default-{refresh,truncation,selectors}/runs/`.")


def _trade(quotes: Quotes, twice: list[Twice], page_p: dict[Key, float]) -> str:
    arms = [("countdown-default", "ratio 0"), ("countdown-default", "ratio 25"), ("countdown-default-ratio50", "ratio 50")]
    eight = [quotes_of(quotes, s, a, "warm-up", "pass@8") for s, a in arms]
    one = [quotes_of(quotes, s, a, "warm-up", "pass@1") for s, a in arms]
    arithmetic = [quotes_of(quotes, "arithmetic-ratio", f"ratio={r}", "warm-up", "pass@8") for r in (0, 25, 50)]
    traded = all(q["difference"] > 0 for q in one) and all(q["difference"] < 0 for q in eight)
    each = ", ".join(f"{q['setting']} by {abs(q['difference']):.3f} ({q['verdict']}, Holm {q['p_holm']:.2g})" for q in eight)
    by = ", ".join(format(abs(q["difference"]), ".3f") for q in one)
    line = (f"On countdown at the default settings {'training traded pass@8 for pass@1: ' if traded else ''}ratio 0, 25 and 50 "
            f"{_sides(one)} the warm-up model's pass@1 (by {by}) and {_sides(eight)} its pass@8 of {eight[0]['baseline_mean']:.3f}: {each}")
    line += (f". On arithmetic chains ratio 0, 25 and 50 {_sides(arithmetic)} their warm-up model's pass@8 of "
             f"{arithmetic[0]['baseline_mean']:.3f} ({', '.join(estimate(q) for q in arithmetic)})")
    return line + (". Records: `docs/results/countdown-default-base/runs/`, `docs/results/countdown-default-ratio50/runs/`, "
                   "`docs/results/arithmetic-ratio/runs/`, `docs/results/warmup/`.")


def quotes_of(quotes: Quotes, section: str, setting: str, baseline: str, metric: str) -> dict:
    """:func:`find`, raising :class:`LookupError` (naming the comparison) when the page does not make it yet."""
    q = find(quotes, section, setting, baseline, metric)
    if q is None or math.isnan(q["low"]):
        raise LookupError(f"{setting} vs {baseline}, {header(metric)} (`{section}`)")
    return q


KNOWN: list[tuple[str, Callable[[Quotes, list[Twice], dict[Key, float]], str]]] = [
    ("Seeds at the default settings", _default), ("Where plain DAPO degrades", _collapse), ("A plain regulariser", _kl),
    ("The seeds' variants", _variants), ("What training trades", _trade),
]
"""The box's lines, in its order: each a topic and how its line is written from the quoted comparisons (and the comparisons
made twice, and the page-wide Holm of the primaries)."""

BOX_HEAD = ("> **What we know**, scoped to the built-in model and tasks, each line written from the records it names "
            "(`python scripts/results.py --render`):")
"""The first line of the box."""


def box(quotes: Quotes, twice: list[Twice], page_p: dict[Key, float]) -> list[str]:
    """The box that opens the page: :data:`BOX_HEAD`, then a line per :data:`KNOWN` topic, ``pending`` (with the comparison
    it waits for) while the page does not make one of its comparisons yet."""
    lines = [BOX_HEAD, ">"]
    for topic, written in KNOWN:
        try:
            lines.append(f"> - {written(quotes, twice, page_p)}")
        except (LookupError, StopIteration) as missing:
            lines.append(f"> - {topic}: pending, the page does not make {missing or 'its comparisons'} yet.")
    return lines + [""]
