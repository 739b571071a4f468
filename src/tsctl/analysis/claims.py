"""The four claims of the Thinking Seeds method, assessed on a ratio sweep.

A sweep whose only swept key is ``ratio``, with a ``ratio=0`` point and at least one seeded point, is a
*ratio sweep*; ``tsctl report`` then adds a section saying, claim by claim, what its completed runs
support. Each claim lists its paired comparisons (:class:`Finding`: by seed; held-out metrics also by
problem, from :func:`~tsctl.analysis.compare.compare` against ``ratio=0``). One comparison has one
verdict: claim (iii)'s comparisons are rows of the sweep's comparison table and keep that table's
Holm-adjusted p (the table is their family); the comparisons of claims (i), (ii) and (iv), which the table
does not make, are one family per claim (:mod:`~tsctl.analysis.families`), adjusted together. Each
line gives the interval, the raw and adjusted p and the family, the verdict from the adjusted p, what the
interval rules out and the minimum detectable effect of the paired t-test over seeds
(:mod:`~tsctl.analysis.wording`, :mod:`~tsctl.analysis.power`). :func:`claim_status` sums up the verdicts:

(i) under plain on-policy training (``ratio=0``) entropy falls over training, and along the response
    position, more so as training goes on. Measured: over training (last 10% of steps against the first
    10%); along the position (the last position bin against the first) in the first 10% of steps, which
    says what is there from the start, and in the last 10%; and whether that drop deepens over training
    (the last-minus-first-bin gap, last 10% of steps against the first 10%): verdict ``lower`` for each;
(ii) prefix tokens are clipped far more often than suffix tokens (per seeded point, the share of
     each source's tokens clipped over all steps): ``higher``;
(iii) every ratio > 0 beats ratio 0 on held-out greedy accuracy and pass@k: ``better``;
(iv) seeded runs keep a higher entropy (mean over the last 10% of steps against ``ratio=0``'s at the
     same seed): ``higher``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from tsctl.analysis.compare import Row, Summary, compare
from tsctl.analysis.families import holm
from tsctl.analysis.points import Point, Run, final_values, higher_is_better, mean_of, tail
from tsctl.analysis.power import min_detectable_effect
from tsctl.analysis.stats import Comparison, paired_difference
from tsctl.analysis.wording import decide, rules_out

BASELINE = "ratio=0"
"""The label of plain DAPO's point, which every claim is about or compares with."""


@dataclass(frozen=True)
class Finding:
    """One comparison of a claim, before its family's Holm adjustment.

    Attributes:
        lead: what is compared, with both means (or why there is no interval yet).
        comparison: the paired comparison; None while too few runs have finished for an interval.
        how: which test (``n=5``, ``seeds and problems``).
        higher_is_better: the metric's better direction, None when it has none.
        mde: the minimum detectable effect at 80% power of the paired t-test over seeds.
        spec: the format of the numbers, in the metric's units.
        units: what ``mde``'s paired t-test is over: seeds, or warm-up models where they are a random unit.
        table_p: the p-value Holm-adjusted in the comparison table's family, for a comparison the table makes
            (it keeps that verdict); None for one adjusted within its claim.
    """

    lead: str
    comparison: Optional[Comparison] = None
    how: str = ""
    higher_is_better: Optional[bool] = None
    mde: float = math.nan
    spec: str = ".4g"
    table_p: Optional[float] = None
    units: str = "seeds"

    def written(self, p_holm: float, level: float) -> tuple[str, Optional[str]]:
        """The finding's line (the verdict in bold) and its verdict, None without an interval; ``p_holm`` is its p
        adjusted within its claim, unless it keeps the table's (:attr:`table_p`)."""
        c = self.comparison
        if c is None:
            return self.lead, None
        p_holm, family = (self.table_p, "the comparison table's family") if self.table_p is not None else (p_holm, "the claim's family")
        said = decide(c.diff.mean, p_holm, 1 - level, self.higher_is_better)
        n = self.spec
        bounds = rules_out(c.diff.low, c.diff.high, self.higher_is_better, n)
        return (f"{self.lead}; difference {c.diff.mean:+{n}} [{level:.0%} CI {c.diff.low:+{n}}, {c.diff.high:+{n}}] ({self.how}), "
                f"p={c.p_value:.3g}, Holm p={p_holm:.3g} ({family}): **{said}**; {bounds}; MDE {self.mde:{n}} (80% power, paired t over {self.units})."), said


@dataclass(frozen=True)
class Claim:
    """One claim: its title, the verdict each comparison needs for it to hold, and its comparisons from
    the sweep's points by label, the rows against ``ratio=0`` and the confidence level."""

    title: str
    expected: str
    comparisons: Callable[[dict[str, Point], list[Row], float], list[Finding]]


def _end_entropy(run: Run, key: str, last: bool = True) -> Optional[float]:
    """Mean of ``key`` over the run's last (or first) 10% of training steps, None when no step logged it."""
    return mean_of(tail(run.train_records, last=last), key)


def _position_bins(run: Run) -> list[str]:
    """The run's ``entropy_by_pos/<bin>`` labels, in position order."""
    labels = {k.split("/", 1)[1] for r in run.train_records for k in r if k.startswith("entropy_by_pos/")}
    return sorted(labels, key=lambda label: int(label.split("-")[0].rstrip("+")))


def paired_finding(what: str, a: list[float], b: list[float], unit: str, level: float) -> Finding:
    """``what``: mean of a vs mean of b in ``unit``, with their paired difference over seeds at ``level``."""
    if len(a) < 2:
        return Finding(f"{what}: {len(a)} finished run(s), too few for an interval.")
    c = paired_difference(a, b, level)
    mde = min_detectable_effect(c.diff.std, c.diff.n, 1 - level)
    return Finding(f"{what}: {np.mean(a):.4g} vs {np.mean(b):.4g} {unit}", c, f"n={len(a)}", None, mde)


def entropy_falls(points: dict[str, Point], rows: list[Row], level: float) -> list[Finding]:
    """(i) Entropy under plain on-policy training: over training, and along the position at the start and
    at the end of training, and the change of that drop over training."""
    base = points.get(BASELINE)
    if base is None or not base.used:
        return [Finding(f"no finished {BASELINE} run yet.")]
    runs = base.used
    early = [float(np.mean([r["entropy"] for r in tail(run.train_records, last=False)])) for run in runs]
    late = [float(np.mean([r["entropy"] for r in tail(run.train_records)])) for run in runs]
    lines = [paired_finding("over training: entropy in the last 10% of steps minus the first 10%", late, early, "nats/token", level)]
    bins = _position_bins(runs[0])
    if len(bins) < 2:
        return lines
    first_bin, last_bin = f"entropy_by_pos/{bins[0]}", f"entropy_by_pos/{bins[-1]}"
    cells = [(_end_entropy(r, first_bin, False), _end_entropy(r, last_bin, False), _end_entropy(r, first_bin), _end_entropy(r, last_bin)) for r in runs]
    cells = [c for c in cells if None not in c]
    along = f"tokens {bins[-1]} (reached only by responses longer than {bins[-1].split('-')[0].rstrip('+')} tokens) minus tokens {bins[0]}"
    start_gap, end_gap = [c[1] - c[0] for c in cells], [c[3] - c[2] for c in cells]
    return lines + [
        paired_finding(f"along the position, already in the first 10% of steps: {along}", [c[1] for c in cells], [c[0] for c in cells], "nats/token", level),
        paired_finding(f"along the position, last 10% of steps: {along}", [c[3] for c in cells], [c[2] for c in cells], "nats/token", level),
        paired_finding("the drop along the position over training (lower: it deepens, higher: it narrows): that difference in the last "
                       "10% of steps minus in the first 10%", end_gap, start_gap, "nats/token", level),
    ]


def prefix_clipped(points: dict[str, Point], rows: list[Row], level: float) -> list[Finding]:
    """(ii) Prefix tokens are clipped far more often than suffix tokens (:func:`~tsctl.analysis.points.final_values`'
    clipped % of each source's tokens over all steps)."""
    lines = []
    for label, point in points.items():
        values = [final_values(r) for r in point.used]
        values = [v for v in values if "clipped_pct/prefix" in v and "clipped_pct/suffix" in v]
        if not values:
            continue
        prefix, suffix = [v["clipped_pct/prefix"] for v in values], [v["clipped_pct/suffix"] for v in values]
        times = np.mean(prefix) / max(np.mean(suffix), 1e-12)
        lines.append(paired_finding(f"{label}: clipped % of prefix minus suffix tokens ({times:.1f}x)", prefix, suffix, "%", level))
    return lines or [Finding("no finished seeded run yet.")]


def ratio_beats_zero(points: dict[str, Point], rows: list[Row], level: float) -> list[Finding]:
    """(iii) Every ratio > 0 beats ratio 0 on held-out accuracy and pass@k."""
    lines = []
    for r in rows:
        if higher_is_better(r.metric):
            c = r.decided
            lead = f"{r.point.label} vs {r.baseline.label}, {r.metric}: {r.setting_mean:.3f} vs {r.baseline_mean:.3f}"
            if np.isnan(c.diff.low):
                lines.append(Finding(f"{lead} ({len(r.seeds)} finished pair(s), too few for an interval)."))
                continue
            lines.append(Finding(lead, c, r.how, True, r.mde, ".3f", r.p_holm, "warm-up models" if r.warmups > 1 else "seeds"))
    return lines or [Finding("no paired comparison yet.")]


def seeded_entropy(points: dict[str, Point], rows: list[Row], level: float) -> list[Finding]:
    """(iv) Seeded runs keep a higher entropy (mean over the last 10% of steps, all tokens the rollout policy saw), runs
    paired by warm-up model and seed."""
    base = points.get(BASELINE)
    if base is None:
        return [Finding(f"no finished {BASELINE} run yet.")]
    base_by_run = {(r.warmup, r.seed): _end_entropy(r, "entropy") for r in base.used}
    lines = []
    for label, point in points.items():
        if label == BASELINE:
            continue
        pairs = [(_end_entropy(r, "entropy"), base_by_run[r.warmup, r.seed]) for r in point.used if (r.warmup, r.seed) in base_by_run]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if not pairs:  # its runs are still going
            continue
        lines.append(paired_finding(f"{label} minus {BASELINE}, entropy at the end of training", [a for a, _ in pairs], [b for _, b in pairs], "nats/token", level))
    return lines or [Finding("no finished seeded run yet.")]


CLAIMS = [
    Claim("(i) Under plain on-policy training (ratio=0) entropy falls over training, and along the response position, "
          "more so as training goes on", "lower", entropy_falls),
    Claim("(ii) Prefix tokens are clipped far more often than suffix tokens", "higher", prefix_clipped),
    Claim("(iii) Every ratio > 0 beats ratio 0 on held-out accuracy and pass@k", "better", ratio_beats_zero),
    Claim("(iv) Seeded runs keep a higher entropy", "higher", seeded_entropy),
]


def claim_status(verdicts: list[Optional[str]], expected: str) -> str:
    """What a claim's comparisons say together: how many of those with a verdict (None: still waiting) say ``expected``."""
    found = [v for v in verdicts if v is not None]
    waiting = len(verdicts) - len(found)
    if not found:
        return "**pending**: no comparison with an interval yet"
    agree = sum(v == expected for v in found)
    status = "supported" if agree == len(found) else "not supported" if agree == 0 else "partly supported"
    if waiting:
        return f"**{status}** so far: {agree} of {len(found)} comparison(s) say {expected}; {waiting} more wait for finished runs"
    return f"**{status}**: {agree} of {len(found)} comparison(s) say {expected}"


def is_ratio_sweep(points: list[Point]) -> bool:
    """Only ``ratio`` is swept, with a ``ratio=0`` point and another."""
    return len(points) >= 2 and all(set(p.settings) == {"ratio"} for p in points) and any(p.label == BASELINE for p in points)


Assessed = list[tuple[Claim, str, list[str]]]
"""Every claim with its summed-up status and the lines of its comparisons."""


def assess(points: list[Point], summary: Summary, rows: Optional[list[Row]] = None) -> Assessed:
    """Every claim with its summed-up status and its comparison lines (see the module docstring);
    ``rows``: the comparisons against ``ratio=0`` when the caller has them already."""
    rows = compare(summary, {"ratio": "0"}) if rows is None else rows
    by_label = {p.label: p for p in points}
    out = []
    for claim in CLAIMS:
        found = claim.comparisons(by_label, rows, summary.level)
        own = [i for i, f in enumerate(found) if f.table_p is None]  # the claim's own family: what the table does not decide
        adjusted = dict(zip(own, holm([found[i].comparison.p_value if found[i].comparison else math.nan for i in own])))
        p_holm = [adjusted.get(i, math.nan) for i in range(len(found))]
        written = [f.written(p, summary.level) for f, p in zip(found, p_holm)]
        out.append((claim, claim_status([said for _, said in written], claim.expected), [text for text, _ in written]))
    return out


def markdown_section(assessed: Assessed) -> str:
    """The ``summary.md`` section of a ratio sweep's assessed claims."""
    parts = ["", "## The Thinking Seeds claims, as these runs see them", ""]
    for claim, status, lines in assessed:
        parts += [f"- {claim.title}: {status}.", *(f"  - {line}" for line in lines)]
    return "\n".join(parts) + "\n"
