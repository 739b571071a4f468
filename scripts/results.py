"""Regenerate docs/RESULTS.md: the sweeps behind tsctl's published numbers, their statistics and plots,
what they say about the four claims of the Thinking Seeds method, and one sweep beyond the paper: which
snapshot of a behaviour pool should write the seeds (``seeds.selector``), with where the gain came from.

    python scripts/results.py                     # run (or resume) every sweep, then write the page
    python scripts/results.py --only countdown-ratio --jobs 2
    python scripts/results.py --render            # only rewrite the page from what has finished

Every sweep is ``tsctl ablate experiment=results name=<sweep> ...``: rerunning the script skips finished
points and resumes interrupted ones, so the page can be finished over several sittings. The page says
how many runs each table stands on; a sweep with no finished run is listed as pending. The truncation
and refresh sweeps' baseline points are the ratio sweep's ``ratio=25`` runs, copied (:data:`SHARED`), so
run ``countdown-ratio`` first.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from omegaconf import OmegaConf

from tsctl.io import atomic
from tsctl.io.runs import RunDir, config_changes
from tsctl.stages.ablate import POINT_SEP, is_done
from tsctl.stages.compose import compose_config
from tsctl.stages.report import report
from tsctl.stages.report.attribution import attribution_rows, markdown_section
from tsctl.stages.report.claims import CLAIMS, assess
from tsctl.stages.report.compare import Summary, compare, problem_scores, summarize
from tsctl.stages.report.points import Point, Run, find_runs, group_points
from tsctl.stages.report.tables import comparison_rows, notes, table_rows
from tsctl.stages.report.stats import SAME, paired_bootstrap, verdict

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "RESULTS.md"
FIGURES = ROOT / "docs" / "results"

SWEEPS: dict[str, tuple[str, list[str], str]] = {
    "countdown-ratio": ("Countdown: off-policy ratio", ["task=countdown", "ratio=0,25,50"], "ratio=0"),
    "arithmetic-ratio": ("Arithmetic chains: off-policy ratio", ["task=arithmetic", "ratio=0,25,50"], "ratio=0"),
    "countdown-truncation": ("Countdown, ratio 25: truncation strategy", ["task=countdown", "ratio=25", "truncation=fixed,uniform,boundary,entropy"], "truncation=uniform"),
    "countdown-refresh": ("Countdown, ratio 25: refresh interval T", ["task=countdown", "ratio=25", "refresh=5,10,20"], "refresh=10"),
    "countdown-selectors": ("Countdown, ratio 25, a pool of 4 behaviour snapshots: which one writes the seeds",
                            ["task=countdown", "ratio=25", "seeds.pool_size=4", "seeds.selector=latest,uniform,bandit"], "seeds.selector=latest"),
}
"""name -> (title, overrides, baseline). Ratio sweeps take ``--seeds`` seeds, the others ``--ablation-seeds``.
Every section shows the seeded samples' attribution (by source, arm, age, prefix length) when its runs have seeds."""

SHARED: dict[str, tuple[str, str]] = {
    "countdown-truncation": ("countdown-ratio", "ratio=25"),
    "countdown-refresh": ("countdown-ratio", "ratio=25"),
}
"""sweep -> (sweep, point) whose finished runs are its baseline point's runs: ``truncation=uniform`` and
``refresh=10`` are the defaults, so the ratio sweep's ``ratio=25`` runs are the very same configuration and are
copied in (after a check of every key of their saved config) rather than trained again."""


def point_folder(settings: list[str], seed: int) -> str:
    """A point's folder name as ``tsctl ablate`` writes it (Hydra's ``override_dirname``): the swept
    ``key=value`` pairs and the seed, sorted, joined by ``-``."""
    return POINT_SEP.join(sorted([*settings, f"seed={seed}"]))


def share_baseline(name: str, seeds: int, steps: Optional[int], runs_dir: str) -> list[Path]:
    """Copy into sweep ``name`` the finished runs of the point :data:`SHARED` names as its baseline point's.

    A run is copied only when its saved config is, key by key, the config the baseline point would train
    (place keys aside); a target folder that exists is left alone. The copy's config and manifest name its
    new place and where it came from (``copied_from``). Returns the folders written.
    """
    if name not in SHARED:
        return []
    source_sweep, source_point = SHARED[name]
    _, overrides, baseline = SWEEPS[name]
    point = [baseline if o.split("=", 1)[0] == baseline.split("=", 1)[0] else o for o in overrides]
    place = ["experiment=results", f"name={name}", f"runs_dir={runs_dir}"] + ([f"trainer.steps={steps}"] if steps else [])
    written = []
    for seed in range(seeds):
        source = Path(runs_dir) / "results" / source_sweep / point_folder([source_point], seed)
        target = Path(runs_dir) / "results" / name / point_folder([baseline], seed)
        if target.exists() or not source.is_dir() or not is_done(RunDir(source)):
            continue
        wanted = [*point, f"seed={seed}", *place]
        changes = config_changes(OmegaConf.load(source / "config.yaml"), compose_config(wanted).node)
        if changes:
            print(f"{name}: {source} is not the {baseline} point ({changes}); it will be trained", flush=True)
            continue
        staging = target.parent.parent / f".{name}-{target.name}.copying"  # outside the sweep: no report sees half a copy
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging, ignore=shutil.ignore_patterns(".lock"))
        config = OmegaConf.load(staging / "config.yaml")
        config.experiment, config.name = f"results/{name}", target.name
        atomic.write_text(staging / "config.yaml", OmegaConf.to_yaml(config))
        manifest = json.loads((staging / "manifest.json").read_text()) | {"copied_from": str(source)}
        atomic.write_json(staging / "manifest.json", manifest)
        atomic.write_text(staging / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(wanted)))
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(target)
        written.append(target)
        print(f"{name}: {target.name} is {source} (the same configuration), copied", flush=True)
    return written


def run_sweep(name: str, seeds: int, steps: Optional[int], jobs: int, runs_dir: str) -> None:
    """``tsctl ablate`` the sweep (resumes what exists); a failed point does not stop the others."""
    _, overrides, baseline = SWEEPS[name]
    share_baseline(name, seeds, steps, runs_dir)
    args = [*overrides, f"seed={','.join(map(str, range(seeds)))}", "experiment=results", f"name={name}", f"runs_dir={runs_dir}", f"report.baseline={baseline}"]
    if steps:
        args.append(f"trainer.steps={steps}")
    if jobs > 1:  # each worker then takes its share of the cores (tsctl.distributed.job_pinning)
        args += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"]
    print(f"== {name}: tsctl ablate {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "tsctl", "ablate", *args], check=False)


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(row) + " |" for row in rows)]


def section(name: str, runs_dir: Path) -> tuple[list[str], list[Point], Optional[Summary]]:
    """The page section of one sweep (tables, plots), its points and their summary (none before a run)."""
    title, _, baseline = SWEEPS[name]
    folder = runs_dir / "results" / name
    lines = [f"## {title}", ""]
    try:
        runs = find_runs(folder)
    except FileNotFoundError:
        return lines + [f"Pending: no run yet (`python scripts/results.py --only {name}`).", ""], [], None
    points = group_points(runs)
    key, value = baseline.split("=", 1)
    alone = len(points) == 1 and all(str(r.settings.get(key)) == value for r in runs)
    if alone:  # only the baseline's runs so far: name their point, nothing to compare with yet
        points[0].label, points[0].settings = baseline, {key: value}
    summary = summarize(points)
    rows = compare(summary, {key: value}) if not alone else []
    out = report(folder, echo=False, baseline=None if alone else baseline)
    target = FIGURES / name
    target.mkdir(parents=True, exist_ok=True)
    images = sorted(out.glob("*.png"))
    for image in images:
        shutil.copyfile(image, target / image.name)
    finished = sum(1 for r in runs if r.status == "completed")
    lines += [f"Finished so far: {finished} run(s); a point whose runs are still going shows 0 completed, one not started has no row.", ""]
    lines += provenance(name, [r for r in runs if r.status == "completed"])
    lines += _md_table(*table_rows(summary)) + ["", notes(summary), ""]
    if rows:
        lines += [f"Paired against {baseline}:", "", *_md_table(*comparison_rows(rows)), ""]
    lines += next((same_setting_check(p) for p in points if p.label == baseline), [])
    attribution = markdown_section(attribution_rows(points, summary.level), summary.level)
    if attribution:  # one level down: a part of this sweep's section
        lines += [attribution.replace("## Where", "### Where", 1)]
    lines += [f"![{name} {image.stem}](results/{name}/{image.name})" for image in images] + [""]
    return lines, points, summary


def same_setting_check(point: Point, resamples: int = 2000) -> list[str]:
    """An A/A check of the per-problem test: every pair of the point's seeds compared on held-out greedy
    accuracy problem by problem, as two settings would be. Both runs of a pair share their setting, so
    a calibrated test calls about 5% of the pairs different."""
    scored = [(r.seed, problem_scores(r, "greedy_accuracy")) for r in point.used]
    scored = [(seed, found[1]) for seed, found in scored if found is not None]
    pairs = list(itertools.combinations(scored, 2))
    if len(pairs) < 3 or len({len(scores) for _, scores in scored}) != 1:
        return []
    tests = [paired_bootstrap(a[None], b[None], resamples=resamples) for (_, a), (_, b) in pairs]
    called = sum(verdict(t) != SAME for t in tests)
    p_values = [t.p_value for t in tests]
    return [f"Same-setting check: the {len(pairs)} pairs of {point.label} seeds, compared problem by problem as two settings "
            f"are, were called different {called} time(s) (p from {min(p_values):.2f} to {max(p_values):.2f}; a calibrated "
            f"test calls about 5% of them so).", ""]


def provenance(name: str, finished: list[Run]) -> list[str]:
    """Which code the finished runs ran, how long their training took, and which of them are copies (:data:`SHARED`)."""
    if not finished:
        return []
    revisions = sorted({(r.revision or "unknown")[:7] for r in finished})
    minutes = [sum(x.get("time/step", 0.0) for x in r.train_records) / 60 for r in finished]
    lines = [f"Code: git revision {', '.join(revisions)}. Training took {np.mean(minutes):.0f} min per run "
             f"({min(minutes):.0f}-{max(minutes):.0f}; the sum of the step times, held-out evaluations aside).", ""]
    copied = [r for r in finished if RunDir(r.path).manifest().get("copied_from")]
    if copied:
        source_sweep, source_point = SHARED[name]
        lines += [f"The {SWEEPS[name][2]} runs of seeds {', '.join(str(r.seed) for r in copied)} are the {source_sweep} sweep's "
                  f"{source_point} runs, copied: the same configuration, checked key by key.", ""]
    return lines


def render(runs_dir: Path) -> str:
    """The whole page from the sweeps as they stand."""
    body, ratio_sweeps = [], []
    for name in SWEEPS:
        lines, points, summary = section(name, runs_dir)
        body += lines
        if name.endswith("-ratio") and summary is not None:
            ratio_sweeps.append((name, points, summary))
    assessed = [(name, assess(points, summary)) for name, points, summary in ratio_sweeps]
    claims = ["## The method's claims, as these runs see them", ""]
    for i, claim in enumerate(CLAIMS):
        claims += [f"### {claim.title}", ""]
        if not assessed:
            claims += ["- no ratio sweep has finished runs yet."]
        for name, found in assessed:
            _, status, lines = found[i]
            claims += [f"- {name}, in sum: {status}.", *(f"  - {line}" for line in lines)]
        claims.append("")
    head = [
        "# Results",
        "",
        "Regenerate with `python scripts/results.py` (resumable; `--render` rewrites this page from what has finished).",
        "Every run is `tsctl train` on the built-in model at the default settings unless the sweep says otherwise;",
        "each point is several seeds, paired by seed in every comparison. 95% intervals throughout.",
        "The runs behind this page ran with one torch thread each (`OMP_NUM_THREADS=1`) beside other work, so their",
        "wall times say nothing about the README's. Each section says how many of its runs have finished.",
        "",
    ]
    return "\n".join(head + claims + body) + "\n"


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(SWEEPS), help="run only these sweeps (the page still shows all)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of the ratio sweeps (default 5)")
    parser.add_argument("--ablation-seeds", type=int, default=3, help="seeds of the truncation and refresh sweeps (default 3)")
    parser.add_argument("--steps", type=int, default=None, help="trainer.steps of every run (default: the default run's length)")
    parser.add_argument("--jobs", type=int, default=1, help="points in parallel (joblib), each with its share of the cores")
    parser.add_argument("--runs-dir", default="runs", help="runs_dir of the sweeps (default runs)")
    parser.add_argument("--render", action="store_true", help="do not run anything; only rewrite the page")
    parser.add_argument("--page", type=Path, default=PAGE, help=f"where to write the page (default {PAGE.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    if not args.render:
        for name in args.only or list(SWEEPS):
            seeds = args.seeds if name.endswith("-ratio") else args.ablation_seeds
            run_sweep(name, seeds, args.steps, args.jobs, args.runs_dir)
    args.page.write_text(render(Path(args.runs_dir)))
    print(f"wrote {args.page}")


if __name__ == "__main__":
    main()
