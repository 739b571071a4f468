"""Regenerate docs/RESULTS.md: the sweeps behind tsctl's published numbers, their statistics and plots,
what they say about the four claims of the Thinking Seeds method, and one sweep beyond the paper: which
snapshot of a behaviour pool should write the seeds (``seeds.selector``), with its seeded samples by source, arm, age and prefix length.

    python scripts/results.py                     # run (or resume) every sweep, then write the page
    python scripts/results.py --only countdown-ratio --jobs 2
    python scripts/results.py --render            # only rewrite the page from what has finished
    python scripts/results.py --render --check    # ... and fail if a section on it does not come from its records

Every sweep is ``tsctl ablate experiment=results name=<sweep> ...``: rerunning the script skips finished
points and resumes interrupted ones, so the page can be finished over several sittings, on several
machines. Every finished run leaves its record (config, manifest, metrics, final evaluation; no
checkpoint) in ``docs/results/<sweep>/runs/`` (:mod:`tsctl.io.run_records`), which is what the page is
written from and what a later sitting restores into its runs folder instead of training the point again.
A sweep's section (``section.md``) and, for a ratio sweep, its verdicts on the claims (``section.json``)
are kept beside its records: a sweep with fewer records than the runs its kept section stands on (a sweep
being trained again) shows that section until they catch up, which ``--check`` reports as a section not
written from records; one with neither is listed as pending, with the command that runs it. The page says
how many runs each table stands on, and what they ran (code revision, uncommitted changes, warm-up model,
arithmetic) and whether they share it. The ratio sweep's ``ratio=25``, the truncation sweep's
``truncation=uniform`` and the refresh sweep's ``refresh=10`` points are one configuration: a seed's run trained in one of them is copied into the others (:data:`DEFAULT_RUN`).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from omegaconf import OmegaConf

from tsctl.config.errors import ConfigError
from tsctl.io import atomic
from tsctl.io.run_records import is_record, restore_record, save_record
from tsctl.io.runs import RunDir, config_changes
from tsctl.models.builtin import WARMUP_REPORT, base_model_entry, builtin_dir, weights_digest
from tsctl.runconfig import compose_config
from tsctl.analysis.report import report
from tsctl.analysis.attribution import attribution_rows, markdown_section
from tsctl.analysis.claims import CLAIMS, assess
from tsctl.analysis.compare import Summary, compare, problem_scores, summarize
from tsctl.analysis.crossed import mean_squares, seed_spread
from tsctl.analysis.plots import plot_passk
from tsctl.analysis.points import POINT_SEP, Point, Run, base_weights, find_runs, group_points, header, is_done
from tsctl.analysis.tables import bounds_rows, comparison_notes, comparison_rows, md_table, notes, table_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_arms import HELD_OUT, Decided, arms_section, family, family_lines, quote, seeds_text, no_warmup_lines, trained_again_lines, untested, warmup_point  # noqa: E402  (this script's own folder)
from results_scoring import WARMUP, score_trajectory, score_warmup  # noqa: E402
from results_regime import regime_lines, score_candidates  # noqa: E402
from results_known import Key, Twice, box, estimate, made_twice, page_holm, section_note, surviving, twice_lines  # noqa: E402
from results_spec import FINDINGS, SECTIONS, SWEEPS, WARMUP_MODEL, Section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "RESULTS.md"
FIGURES = ROOT / "docs" / "results"

DEFAULT_RUN = {"countdown-ratio": "ratio=25", "countdown-truncation": "truncation=uniform", "countdown-refresh": "refresh=10"}
"""sweep -> its point that is the default countdown run at ``ratio=25`` (``truncation=uniform`` and ``refresh=10``
are the defaults): the same configuration in each of these sweeps, so a seed's run is trained in one of them
and copied into the others (:func:`share_runs`, after a check of every key of its saved config)."""


def point_folder(settings: list[str], seed: int) -> str:
    """A point's folder name as ``tsctl ablate`` writes it (Hydra's ``override_dirname``): the swept
    ``key=value`` pairs and the seed, sorted, joined by ``-``."""
    return POINT_SEP.join(sorted([*settings, f"seed={seed}"]))


def share_runs(name: str, seeds: int, steps: Optional[int], runs_dir: str, weights: Optional[str] = None) -> list[Path]:
    """Copy into sweep ``name`` the finished runs of its :data:`DEFAULT_RUN` point that another sweep has.

    A run is copied only when its saved config is, key by key, the config the point would train (place
    keys aside) and it started from the built-in ``weights`` (this machine's; a run that does not name its
    weights, or ``weights`` None, is not held back); a target folder that exists is left alone. The copy's config and manifest name its new
    place and where it came from (``copied_from``). Returns the folders written.
    """
    if name not in DEFAULT_RUN:
        return []
    overrides = resolved(name, runs_dir)
    setting = DEFAULT_RUN[name]
    point = [setting if o.split("=", 1)[0] == setting.split("=", 1)[0] else o for o in overrides]
    place = ["experiment=results", f"name={name}", f"runs_dir={runs_dir}"] + ([f"trainer.steps={steps}"] if steps else [])
    written = []
    for seed in range(seeds):
        target = Path(runs_dir) / "results" / name / point_folder([setting], seed)
        sources = [Path(runs_dir) / "results" / other / point_folder([at], seed) for other, at in DEFAULT_RUN.items() if other != name]
        for source in sources:
            if target.exists() or not source.is_dir() or not is_done(RunDir(source)):
                continue
            source_weights = started_from(source)
            if weights and source_weights not in (None, weights):
                print(f"{name}: {source} started from built-in weights {source_weights}, not this machine's {weights}; not copied", flush=True)
                continue
            wanted = [*point, f"seed={seed}", *place]
            changes = config_changes(OmegaConf.load(source / "config.yaml"), compose_config(wanted).node)
            if changes:
                print(f"{name}: {source} is not the {setting} point ({changes}); not copied", flush=True)
                continue
            copy_run(source, target, name, wanted)
            written.append(target)
            print(f"{name}: {target.name} is {source} (the same configuration), copied", flush=True)
    return written


def copy_run(source: Path, target: Path, name: str, overrides: list[str]) -> None:
    """Copy the finished run ``source`` to ``target`` of sweep ``name``, staged outside the sweep folder (no
    report sees half a copy), with its config, manifest and Hydra overrides naming its new place."""
    staging = target.parent.parent / f".{name}-{target.name}.copying"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging, ignore=shutil.ignore_patterns(".lock"))
    config = OmegaConf.load(staging / "config.yaml")
    config.experiment, config.name = f"results/{name}", target.name
    atomic.write_text(staging / "config.yaml", OmegaConf.to_yaml(config))
    manifest = json.loads((staging / "manifest.json").read_text()) | {"copied_from": str(source)}
    atomic.write_json(staging / "manifest.json", manifest)
    atomic.write_text(staging / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(overrides)))
    target.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(target)


def records_of(name: str) -> Path:
    """The folder of sweep ``name``'s run records, one per finished point and seed."""
    return FIGURES / name / "runs"


def keep_records(name: str, runs_dir: Path) -> list[Path]:
    """Record every finished run of sweep ``name`` under ``runs_dir`` that has no record yet (an existing
    record is never overwritten: a run trains to the same numbers on the same code). The page is about runs
    of the sweep's own length: a run of other ``trainer.steps`` (``--steps``) is left out. Returns the records written."""
    folder = Path(runs_dir) / "results" / name
    if not folder.is_dir():
        return []
    default_steps = compose_config([o.split(",")[0] for o in resolved(name, str(runs_dir))]).cfg.trainer.steps
    written = []
    for run in sorted(p for p in folder.iterdir() if p.is_dir()):
        target = records_of(name) / run.name
        if target.exists() or not is_done(RunDir(run)):
            continue
        steps = OmegaConf.select(OmegaConf.load(run / "config.yaml"), "trainer.steps", default=default_steps)
        if steps != default_steps:
            print(f"{name}: {run.name} ran trainer.steps={steps}, not the sweep's {default_steps}; no record kept", flush=True)
            continue
        name_base_model(run, Path(runs_dir))
        save_record(run, target)
        written.append(target)
    return written


def name_base_model(run: Path, runs_dir: Path) -> None:
    """Give the manifest of a run trained before manifests named their base model its ``base_model``: the
    cached built-in model its overrides lead to under ``runs_dir`` (the folder the run is in, never the working
    directory's), which is the one it started from (the cache is written once, unless rebuilt), so that the
    report can tell whether the runs of a sweep started from the same weights."""
    manifest = RunDir(run).manifest()
    overrides = run / ".hydra" / "overrides.yaml"
    if "base_model" in manifest or not overrides.is_file():
        return
    try:
        kept = [str(o) for o in OmegaConf.load(overrides) if not str(o).startswith("runs_dir=")]
        cfg = compose_config([*kept, f"runs_dir={runs_dir}"]).cfg
    except ConfigError:  # overrides this code no longer takes: the model is not known
        return
    cached = builtin_dir(cfg)
    if cfg.model.path == "builtin" and (cached / WARMUP_REPORT).is_file():
        atomic.write_json(run / "manifest.json", manifest | {"base_model": base_model_entry(cfg, str(cached))})


def restore_records(name: str, runs_dir: Path) -> list[Path]:
    """Write under ``runs_dir`` a finished run folder for every record of sweep ``name`` that has no folder
    there, so that ``tsctl ablate`` skips the point. Returns the folders written."""
    folder = Path(runs_dir) / "results" / name
    written = []
    for record in sorted(p for p in records_of(name).iterdir() if is_record(p)) if records_of(name).is_dir() else []:
        if not (folder / record.name).exists():
            restore_record(record, folder / record.name)
            written.append(folder / record.name)
    return written


def run_sweep(name: str, seeds: int, steps: Optional[int], jobs: int, runs_dir: str) -> None:
    """``tsctl ablate`` the sweep (resumes what exists, skips what has a record); a failed point does not
    stop the others. Every finished run's record is kept.

    Runs of one sweep must start from the same weights: a sweep whose records started from a built-in model
    other than the one this machine warms up (another machine's arithmetic) is not trained further here, and
    only runs from this machine's model are copied in (:func:`share_runs`).
    """
    weights = machine_weights(name, runs_dir)
    overrides, baseline = resolved(name, runs_dir), SWEEPS[name].baseline
    sources = set(DEFAULT_RUN) if name in DEFAULT_RUN else set()  # the sweeps share_runs copies from
    for sweep in ({name} | sources) if steps is None else ():  # records are runs of the default length
        restore_records(sweep, Path(runs_dir))
    recorded = [started_from(r) for r in records_of(name).iterdir() if is_record(r)] if records_of(name).is_dir() else []
    foreign = sorted({digest for digest in recorded if digest not in (None, weights)})
    if foreign:
        print(f"{name}: not trained here: its records started from built-in weights {', '.join(foreign)}, this machine's "
              f"warm-up gives {weights}, and runs from different weights are not comparable. Train the whole sweep here "
              f"(move docs/results/{name}/runs/ aside first) or on a machine whose warm-up gives {', '.join(foreign)}.", flush=True)
        return
    share_runs(name, seeds, steps, runs_dir, weights)
    # seed first: Hydra sweeps the first override outermost, so an unfinished sweep has whole seeds (paired points)
    args = [f"seed={','.join(map(str, range(seeds)))}", *overrides, "experiment=results", f"name={name}", f"runs_dir={runs_dir}"]
    if swept(baseline, overrides):  # a sweep of one point (seeds aside) has no other point to compare with its baseline
        args.append(f"report.baseline={baseline}")
    if steps:
        args.append(f"trainer.steps={steps}")
    if jobs > 1:  # each worker then takes its share of the cores (tsctl.distributed.job_pinning)
        args += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"]
    print(f"== {name}: tsctl ablate {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "tsctl", "ablate", *args], check=False)
    keep_records(name, Path(runs_dir))


def swept(baseline: str, overrides: list[str]) -> bool:
    """Whether the key of ``baseline`` (``ratio=0``) takes several values in ``overrides`` (``ratio=0,25``)."""
    key = baseline.split("=", 1)[0]
    return any(o.split("=", 1)[0] == key and "," in o.split("=", 1)[1] for o in overrides)


def warmup_overrides(name: str, runs_dir: str) -> list[str]:
    """The overrides of sweep ``name`` that its warm-up reads (its task and model keys, first values) and its runs folder."""
    first = [o.split(",")[0] for o in SWEEPS[name].overrides if o.split("=")[0].split(".")[0] in ("task", "model")]  # all the warm-up reads
    return [*first, f"runs_dir={runs_dir}"]


def resolved(name: str, runs_dir: str) -> list[str]:
    """Sweep ``name``'s overrides with :data:`WARMUP_MODEL` replaced by the folder of the warmed-up built-in model
    its runs start from (under ``runs_dir``)."""
    overrides = SWEEPS[name].overrides
    if not any(WARMUP_MODEL in o for o in overrides):
        return list(overrides)
    folder = str(builtin_dir(compose_config(warmup_overrides(name, runs_dir)).cfg).absolute())
    return [o.replace(WARMUP_MODEL, folder) for o in overrides]


def machine_weights(name: str, runs_dir: str) -> Optional[str]:
    """The digest of the built-in model this machine trains sweep ``name`` from (``tsctl warmup`` builds it
    first when it is not cached); None when the sweep does not start from the built-in model."""
    first = warmup_overrides(name, runs_dir)
    cfg = compose_config(first).cfg
    if cfg.model.path != "builtin":
        return None
    subprocess.run([sys.executable, "-m", "tsctl", "warmup", *first], check=True)
    return weights_digest(builtin_dir(cfg))


def score(name: str, seeds: int, runs_dir: str, warmup_model: Optional[Path] = None) -> None:
    """Score with the final evaluation's code what sweep ``name``'s section shows besides its runs: the warmed-up model
    they start from (one record per sampling seed, :func:`results_scoring.score_warmup`) and every kept checkpoint of
    the runs of a section's ``trajectory`` arms (:func:`results_scoring.score_trajectory`).

    The warmed-up model is this machine's (warmed up first when not cached), or ``warmup_model``: a folder with the
    weights the sweep's records started from (warmed up at the revision that trained them); a sweep whose records
    started from other weights than the model scored here is refused, since its warm-up row would be another model's.
    """
    first = [o.split(",")[0] for o in resolved(name, runs_dir)]
    if warmup_model is None:
        digest = machine_weights(name, runs_dir)
        model = builtin_dir(compose_config(warmup_overrides(name, runs_dir)).cfg) if digest is not None else None
    else:
        model, digest = warmup_model, weights_digest(warmup_model)
    recorded = {started_from(r) for r in records_of(name).iterdir() if is_record(r)} - {None} if records_of(name).is_dir() else set()
    if model is not None and recorded - {digest}:
        raise SystemExit(f"{name}: its records started from built-in weights {', '.join(sorted(recorded))}, not {digest}: pass "
                         "--warmup-model with a folder of those weights (the warm-up at the revision that trained them)")
    if model is not None:
        score_warmup(FIGURES, [*first, f"runs_dir={runs_dir}"], model, digest, seeds)
    points = {arm.point for section in SECTIONS.values() for arm in section.arms if arm.sweep == name and arm.label in section.trajectory}
    folder = Path(runs_dir) / "results" / name
    for run in sorted(p for p in folder.iterdir() if p.is_dir()) if points and folder.is_dir() else []:
        overrides = [str(o) for o in OmegaConf.load(run / ".hydra" / "overrides.yaml")] if (run / ".hydra" / "overrides.yaml").is_file() else []
        if is_done(RunDir(run)) and points & set(overrides):
            written = score_trajectory(run, FIGURES / name / "trajectory" / run.name, lambda r: compose_config(overrides).cfg)
            print(f"{name}: {run.name}: {len(written)} checkpoint(s) scored", flush=True)


def trained_again(name: str) -> Optional[tuple[Section, list[str]]]:
    """The section and arm labels that train sweep ``name``'s points again from a kept warm-up model (None: none does)."""
    again = SWEEPS[name].trained_again
    return (SECTIONS[again.section], again.arms) if again is not None else None


def started_from(run: Path) -> Optional[str]:
    """The built-in weights' digest the run (or record) folder ``run`` started from, None when not recorded."""
    return base_weights(RunDir(run).manifest())


def section(name: str, runs_dir: Path) -> tuple[list[str], list[Point], Optional[Summary], list[dict]]:
    """The page section of one sweep (tables, plots), its points, their summary (none before a run) and its
    comparisons as the table of findings quotes them (:func:`results_arms.quote`)."""
    title, baseline = SWEEPS[name].title, SWEEPS[name].baseline
    folder = runs_dir / "results" / name
    lines = [f"## {title}", ""]
    try:
        runs = find_runs(folder)
    except FileNotFoundError:
        return lines + [f"Pending: not yet run with records; `python scripts/results.py --only {name}` runs it.", ""], [], None, []
    points = group_points(runs)
    key, value = baseline.split("=", 1)
    values = sorted({str(r.settings.get(key)) for r in runs})
    alone = len(points) == 1 and len(values) == 1
    if alone:  # one point's runs so far (the baseline's or copied ones): name it, nothing to compare with yet
        points[0].label, points[0].settings = f"{key}={values[0]}", {key: values[0]}
    summary = summarize(points)
    rows = compare(summary, {key: value}) if not alone else []
    warm = warmup_point(points, FIGURES, runs_dir)
    shown = summarize([warm, *points]) if warm else summary
    out = report(folder, echo=False, baseline=None if alone else baseline)
    target = FIGURES / name
    target.mkdir(parents=True, exist_ok=True)
    images = sorted(out.glob("*.png"))
    for image in images:
        shutil.copyfile(image, target / image.name)
    if warm is not None:  # the warm-up's pass@k beside the points'
        plot_passk([warm, *points], target / "passk.png")
    finished = sum(1 for r in runs if r.status == "completed")
    lines += [f"Finished so far: {finished} run(s), each recorded in `docs/results/{name}/runs/`; a point not started has no row.", ""]
    lines += provenance(name, [r for r in runs if r.status == "completed"])
    again = trained_again(name)
    lines += md_table(*table_rows(shown)) + ["", notes(summary), ""] + (no_warmup_lines(points, [name]) if warm is None else [])
    lines += trained_again_lines(again) if again is not None else []
    if rows:
        lines += [f"Paired against {baseline}:", "", *md_table(*comparison_rows(rows)), ""]
        lines += ["What each comparison rules out:", "", *md_table(*bounds_rows(rows)), "", comparison_notes(summary), ""]
    against_warm = family([(p, warm, m) for p in points for m in HELD_OUT]) if warm is not None else []
    lines += family_lines("Exploratory: each point against the warm-up model it started from, on the held-out metrics "
                          "(a Holm family of its own):", against_warm)
    lines += next((seed_spread_check(p) for p in points if p.label == baseline), [])
    attribution = markdown_section(attribution_rows(points, summary.level), summary.level)
    if attribution:  # one level down: a part of this sweep's section
        lines += [attribution.replace("## Seeded", "### Seeded", 1)]
    lines += [f"![{name} {image.stem}](results/{name}/{image.name})" for image in images] + [""]
    quotes = [quote(r, f"the section's table, Holm over {len(rows)}") for r in rows]
    quotes += [quote(r, f"exploratory, Holm over {len(against_warm)}") for r in against_warm]
    return lines, points, summary, quotes


def seed_spread_check(point: Point) -> list[str]:
    """Seeds against seeds, within one setting: for each held-out metric with per-problem scores, how much the
    point's seeds' scores spread against what drawing the held-out problems alone predicts
    (:func:`~tsctl.analysis.crossed.seed_spread`), and what that says, in words."""
    rows, real = [], []
    for metric in ("greedy_accuracy", "pass@1", "pass@2", "pass@4", "pass@8"):
        scored = [problem_scores(r, metric) for r in point.used]
        if len(scored) < 2 or any(s is None for s in scored) or len({tuple(s[0]) for s in scored}) != 1:
            continue
        table = np.stack([s[1] for s in scored])
        ratio, p = seed_spread(table)
        if np.isnan(ratio):
            continue
        seeds, problems = table.shape
        spread = float(table.mean(axis=1).std(ddof=1))
        ms = mean_squares(table)
        predicted = float(np.sqrt(ms.cell / problems))
        rows.append([header(metric), str(seeds), str(problems), f"{spread:.4f}", f"{predicted:.4f}", f"{ratio:.2f}", f"{p:.3g}"])
        if p < 0.05:
            real.append(header(metric))
    if not rows:
        return []
    lines = [f"Seeds against seeds, within {point.label}: how much its seeds' held-out scores spread, against what drawing the "
             "held-out problems alone predicts (the seed-by-problem and sampling noise of the scores, over the problems; "
             "ratio = F of the seeds' mean square to the cells', p its upper tail).", "",
             *md_table(["metric", "seeds", "problems", "std over seeds", "std from problem sampling alone", "ratio (F)", "p"], rows), ""]
    if real:
        lines += [f"On {_listed(real)} the seeds of one setting differ by more than problem sampling explains (p < 0.05, each "
                  "metric on its own): a run's score depends on its seed beyond the luck of which problems were drawn, so a test "
                  "that compared two runs over problems alone would call runs of one setting different more often than 5% of the "
                  "time. That is why every comparison above is over seeds (the paired t over seeds, or seeds and problems "
                  "together), and why differences smaller than the seeds' spread need more seeds to be seen.", ""]
    else:
        lines += ["On no held-out metric do the seeds of one setting differ by more than problem sampling explains (p < 0.05, "
                  f"each metric on its own); with {len(point.used)} seeds this says little of seed-to-seed differences smaller "
                  "than that noise.", ""]
    return lines


NOT_RECORDED = "not recorded"
"""What the page says of a manifest field a run did not record (older runs lack some)."""


def _listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def provenance(name: str, finished: list[Run]) -> list[str]:
    """What the finished runs ran (code revision and whether it had uncommitted changes, the warm-up model's weights,
    the arithmetic: device, instruction set, torch threads), whether they share each, how long their training took,
    and which of them are copies (:data:`DEFAULT_RUN`). A field an older manifest lacks is ``not recorded``."""
    if not finished:
        return []
    fields = {  # what -> (the manifest field, how many runs say each value)
        "code revision": ("git_revision", Counter(r.revision[:7] if r.revision else NOT_RECORDED for r in finished)),
        "uncommitted changes": ("git_dirty", Counter({True: "yes", False: "none"}.get(r.dirty, NOT_RECORDED) for r in finished)),
        "warm-up model": ("base_model, its weights' sha256", Counter(r.base_weights or NOT_RECORDED for r in finished)),
        "arithmetic": ("arithmetic: device, CPU, torch threads", Counter(r.arithmetic or NOT_RECORDED for r in finished)),
    }
    minutes = [sum(x.get("time/step", 0.0) for x in r.train_records) / 60 for r in finished]
    lines = [f"What the {len(finished)} finished run(s) ran (manifest.json): "
             + "; ".join(f"{what} ({key}): " + ", ".join(f"{value} ({n} run(s))" for value, n in sorted(counts.items()))
                         for what, (key, counts) in fields.items())
             + f". Training took {np.mean(minutes):.0f} min per run "
             f"({min(minutes):.0f}-{max(minutes):.0f}; the sum of the step times, held-out evaluations aside).", ""]
    differ = [what for what, (_, counts) in fields.items() if len(set(counts) - {NOT_RECORDED}) > 1]
    unknown = [what for what, (_, counts) in fields.items() if NOT_RECORDED in counts and what not in differ]
    shared = [what for what in fields if what not in differ + unknown]
    said = [f"They share their {_listed(shared)}."] if shared else []
    if differ:
        said.append(f"They differ in their {_listed(differ)}: a difference between points may come from that rather than the setting.")
    if unknown:
        said.append(f"Not every run recorded its {_listed(unknown)}, so {'that is' if len(unknown) == 1 else 'those are'} not known to be shared.")
    lines += [" ".join(said), ""]
    copied: dict[str, list[str]] = {}
    for run in finished:
        source = RunDir(run.path).manifest().get("copied_from")
        if source:
            copied.setdefault(Path(source).parent.name, []).append(str(run.seed))
    for source_sweep, seeds in sorted(copied.items()):
        lines += [f"The {DEFAULT_RUN[name]} runs of seeds {', '.join(seeds)} are the {source_sweep} sweep's "
                  f"{DEFAULT_RUN.get(source_sweep, 'same')} runs, copied: the same configuration, checked key by key.", ""]
    return lines


def sweep_part(name: str, scratch: Path) -> tuple[list[str], Optional[list[dict]], list[dict]]:
    """Sweep ``name``'s section of the page, for a ratio sweep its verdict on each claim (status, lines), and its
    comparisons as the table of findings quotes them.

    They are written anew from the sweep's records (restored under ``scratch``) when these are at least as
    many as the runs the kept section stands on, and then kept (``section.md``, ``section.json``); else the
    kept ones are shown, so a sweep trained again does not shrink the page until it has caught up.
    """
    kept_md, kept_json = FIGURES / name / "section.md", FIGURES / name / "section.json"
    kept = json.loads(kept_json.read_text()) if kept_json.is_file() else {"runs": 0, "claims": None}
    restored = restore_records(name, scratch)
    if restored and len(restored) >= kept["runs"]:
        lines, points, summary, quotes = section(name, scratch)
        claims = None
        if name.endswith("-ratio") and summary is not None:
            claims = [{"status": status, "lines": found} for _, status, found in assess(points, summary)]
        atomic.write_text(kept_md, "\n".join(lines) + "\n")
        atomic.write_json(kept_json, {"runs": len(restored), "claims": claims, "quotes": quotes})
        return lines, claims, quotes
    if not kept_md.is_file():
        return section(name, scratch)[0], None, []  # pending
    lines = kept_md.read_text().splitlines()
    if restored:
        lines += [f"`docs/results/{name}/runs/` holds {len(restored)} record(s) so far: this section is written anew from "
                  f"them once they are as many as the {kept['runs']} run(s) it stands on.", ""]
    return lines, kept["claims"], kept.get("quotes", [])


ARM_SWEEPS = {arm.sweep for section in SECTIONS.values() for arm in section.arms}
"""The sweeps whose runs the page shows as arms of a :data:`SECTIONS` entry, not as sections of their own."""


def render(runs_dir: Optional[Path] = None) -> str:
    """The whole page from the sweeps' records (:func:`sweep_part`), after keeping the records of the
    finished runs under ``runs_dir`` (when given): its head, the findings (:func:`findings`), the claims, the sections."""
    body, claim_blocks, quotes, starts = [], [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SWEEPS:
            if runs_dir is not None:
                keep_records(name, runs_dir)
        for name in SWEEPS:
            if name in ARM_SWEEPS:
                continue
            lines, found, said = sweep_part(name, Path(tmp))
            quotes[name], starts[name] = said, len(body)
            body += lines
            if found is not None:
                claim_blocks.append((name, found))
        decided = Decided()
        for name in SECTIONS:
            for sweep in sorted({arm.sweep for arm in SECTIONS[name].arms}):
                restore_records(sweep, Path(tmp))
            lines, _, quotes[name] = arms_section(name, SECTIONS[name], FIGURES, Path(tmp), decided, provenance)
            body += lines
    twice, page_p, claim_blocks = made_twice(quotes), page_holm(decided), surviving(claim_blocks, quotes)
    for name, start in sorted(starts.items(), key=lambda item: -item[1]):  # the last section first: the earlier starts stay put
        body[start + 2:start + 2] = section_note(name, twice)  # under the section's heading
    claims = ["## The method's claims, as these runs see them", "",
              "Claim (iii) counts a comparison as better only where its rerun from a newly warmed-up model, when there is one, said so "
              "again (\"Made twice\" above); claims (i), (ii) and (iv) were not made again.", ""]
    for i, claim in enumerate(CLAIMS):
        claims += [f"### {claim.title}", ""]
        if not claim_blocks:
            claims += ["- no ratio sweep has finished runs yet."]
        for name, found in claim_blocks:
            claims += [f"- {name}, in sum: {found[i]['status']}.", *(f"  - {line}" for line in found[i]["lines"])]
        claims.append("")
    head = [
        "# Results",
        "",
        "Regenerate with `python scripts/results.py` (resumable; `--render` rewrites this page from the finished runs' records",
        "in `docs/results/<sweep>/runs/`, which a later `python scripts/results.py` restores instead of training them again).",
        "Every run is `tsctl train` on the built-in model at the default settings unless the sweep says otherwise;",
        "each point is several seeds, paired by seed in every comparison. 95% intervals throughout. Verdicts come from",
        "p-values Holm-adjusted within the family that decides them, declared in `scripts/results_spec.py` with the sweep,",
        "before its runs: a sweep's own section decides its comparison table against its baseline; a section built from",
        "arms decides its primary comparisons only. Every other comparison (each point against the warm-up model it",
        "started from; the primary pairs on other metrics; claims (i), (ii) and (iv), which no table makes) is exploratory,",
        "adjusted in a family of its own and labelled so. One comparison has one verdict wherever it is shown: claim (iii)",
        "and a section that shows another's primary comparison take that family's verdict. Every comparison says what its",
        "interval rules out and the smallest effect its seeds could detect (MDE, 80% power). Each section's first row is",
        "the warm-up model its runs started from, scored with the final evaluation's code, problems and sampling seeds;",
        "a section whose warm-up model has no scored record says so under its table, and why.",
        "The runs behind this page ran with one torch thread each (`OMP_NUM_THREADS=1`, or `--jobs 2` on 2 cores) beside",
        "other work, so their wall times say nothing about the README's. Each section says how many of its runs have",
        "finished. Compare points within a section: a section's runs start from one warmed-up built-in model (its weights'",
        "digest is in the section's first lines); `python scripts/results.py` adds no run to a sweep whose records started",
        "from other weights. The torch thread count is part of a run's arithmetic: the countdown run ratio=25 seed=0 at one",
        "and at two threads samples differently from step 19 on, so the same configuration with other threads or on another",
        "machine is another draw, not the same run. Each section's first lines say what its runs ran, from their manifests:",
        "the code revision and whether it had uncommitted changes, the warm-up model's weights' digest, and the arithmetic",
        "with its torch thread count, and whether the runs share each; a field older runs did not record is said to be \"not",
        "recorded\" (before the thread count was recorded, a point of a parallel sweep took every core once it ran alone).",
        "Every section on this page is written from its runs' records (`python scripts/results.py --render --check` fails",
        "otherwise); a sweep without records is listed as pending, with the command that runs it.",
        "",
    ]
    return "\n".join(head[:2] + box(quotes, twice, page_p) + head[2:] + findings(quotes, claim_blocks, twice, page_p) + claims + body + regime_lines(FIGURES)) + "\n"


WORDS = "findings.md"
"""The findings in words under :data:`FIGURES` (written by hand, each number in it from the table above it)."""


def findings(quotes: dict[str, list[dict]], claim_blocks: list[tuple[str, list[dict]]], twice: Sequence[Twice] = (),
             page_p: Optional[dict[Key, float]] = None) -> list[str]:
    """The page's opening section: the table of findings (:data:`FINDINGS`, each with the verdict of the family that
    decides it below; a primary one also with its Holm p over every section's primaries, ``page_p``; a first sweep's
    comparison made again from a newly warmed-up model with what that said, ``twice``), the claims' status per ratio sweep,
    the comparisons made twice (:func:`results_known.twice_lines`), and the findings in words (:data:`WORDS`)."""
    page_p = page_p or {}
    rows = []
    for q in FINDINGS:
        found = next((d for d in quotes.get(q.section, []) if (d["setting"], d["baseline"], d["metric"]) == (q.setting, q.baseline, q.metric)), None)
        compared = f"{q.setting} vs {q.baseline}, {header(q.metric)}"
        if found is None:
            missing = "no warm-up row (its section says why)" if q.baseline == WARMUP and quotes.get(q.section) else "pending: no records yet"
            rows.append([q.question, q.regime, compared, missing, "–", "–", "–"])
            continue
        means = f"{compared}: {found['setting_mean']:.3f} vs {found['baseline_mean']:.3f} ({seeds_text(found['seeds'])})"
        if math.isnan(found["p_holm"]):  # too few paired runs for an interval or a test: no verdict yet
            rows.append([q.question, q.regime, means, f"{found['difference']:+.3f} (no interval)", f"– ({found['family']})",
                         untested(found["seeds"]), found["rules_out"]])
            continue
        family, verdict = found["family"], found["verdict"]
        if (q.section, q.setting, q.baseline, q.metric) in page_p:
            family += f"; {page_p[(q.section, q.setting, q.baseline, q.metric)]:.3g} over all {len(page_p)} primaries"
        again = next((tw for tw in twice if tw.first is found), None)
        if again is not None and not again.outcome.startswith("said again"):
            verdict += f" (made again from a newly warmed-up model, {estimate(again.again)}: {again.outcome.split(';')[0]})"
        rows.append([q.question, q.regime, means, f"{found['difference']:+.3f} [{found['low']:+.3f}, {found['high']:+.3f}]",
                     f"{found['p_holm']:.3g} ({family})", verdict, found["rules_out"]])
    lines = ["## Findings", "", "Each row is a comparison a section below makes, with the verdict of the family that decides it there.", "",
             *md_table(["question", "regime", "comparison", "difference [95% CI]", "Holm p (family)", "verdict", "rules out"], rows), ""]
    if claim_blocks:
        head = ["claim", *(f"{name}" for name, _ in claim_blocks)]
        status = [[claim.title, *(found[i]["status"] for _, found in claim_blocks)] for i, claim in enumerate(CLAIMS)]
        lines += ["The method's four claims, each ratio sweep's verdict (the comparisons behind each are below; claim (iii) counts a "
                  "comparison as better only where its rerun from a newly warmed-up model, when there is one, said so again):", "",
                  *md_table(head, status), ""]
    lines += twice_lines(list(twice))
    words = FIGURES / WORDS
    return lines + ([words.read_text().rstrip("\n"), ""] if words.is_file() else [])


def unregenerable() -> list[str]:
    """One line for each sweep whose section the page shows but its records cannot write: a kept ``section.md``
    standing on more runs than ``docs/results/<sweep>/runs/`` holds records. A pending sweep (neither) shows no result."""
    lines = []
    for name in SWEEPS:
        kept_md, kept_json = FIGURES / name / "section.md", FIGURES / name / "section.json"
        stands_on = json.loads(kept_json.read_text())["runs"] if kept_json.is_file() else 0
        records = sum(1 for r in records_of(name).iterdir() if is_record(r)) if records_of(name).is_dir() else 0
        if kept_md.is_file() and records < stands_on:
            lines.append(f"{name}: its section stands on {stands_on} run(s) but docs/results/{name}/runs/ holds {records} record(s)")
    return lines


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(SWEEPS), help="run only these sweeps (the page still shows all)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of the ratio sweeps (default 5)")
    parser.add_argument("--ablation-seeds", type=int, default=3, help="seeds of the truncation and refresh sweeps (default 3)")
    parser.add_argument("--steps", type=int, default=None, help="trainer.steps of every run (default: the default run's length; runs of another length "
                        "keep no record, so they stay off the page: a quick look, `tsctl report` on their sweep folder)")
    parser.add_argument("--jobs", type=int, default=1, help="points in parallel (joblib), each with its share of the cores")
    parser.add_argument("--runs-dir", default="runs", help="runs_dir of the sweeps (default runs)")
    parser.add_argument("--score-only", action="store_true", help="train nothing: score the warm-up model of the --only sweeps "
                        "(and every kept checkpoint of their trajectory arms) where no score is recorded yet, then write the page")
    parser.add_argument("--warmup-model", type=Path, default=None, help="with --score-only: the folder of the warmed-up model "
                        "the sweeps' records started from, when this revision warms up other weights")
    parser.add_argument("--score-regimes", action="store_true", help="train nothing: warm up and score the hard regime's declared candidates "
                        "(results_spec.HARD_CANDIDATES) where no record is kept yet, then write the page")
    parser.add_argument("--render", action="store_true", help="train nothing: keep the records of the runs finished under --runs-dir and rewrite the page")
    parser.add_argument("--check", action="store_true", help="fail (exit 1, a line per sweep) when a section on the page cannot be "
                        "written from its records; with --render, after writing the page")
    parser.add_argument("--page", type=Path, default=PAGE, help=f"where to write the page (default {PAGE.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    if args.score_regimes:
        score_candidates(FIGURES, args.runs_dir)
    elif not args.render and not args.check:
        for name in args.only or list(SWEEPS):
            seeds = SWEEPS[name].seeds or (args.seeds if name.endswith("-ratio") else args.ablation_seeds)
            if not args.score_only:
                run_sweep(name, seeds, args.steps, args.jobs, args.runs_dir)
            score(name, seeds, args.runs_dir, args.warmup_model)
    if args.render or not args.check:
        args.page.write_text(render(Path(args.runs_dir)))
        print(f"wrote {args.page}")
    if args.check:
        failed = unregenerable()
        for line in failed:
            print(f"not from records: {line}", file=sys.stderr)
        if failed:
            raise SystemExit(1)
        print("every section on the page is written from its records")


if __name__ == "__main__":
    main()
