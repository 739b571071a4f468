"""Regenerate the figures of the README's set-up paragraph: run its main job, record what it measured.

    python scripts/readme_numbers.py                        # the README's `tsctl train`, from a clean runs folder
    python scripts/readme_numbers.py --out X.json -- trainer.steps=3 task=arithmetic   # Hydra overrides after --

The job is ``tsctl train`` with its defaults (plus the overrides), run from this checkout's ``src/`` in a new
runs folder, so the built-in model is warmed up afresh. From the run's own files (the built-in model's
``warmup.json``, the run's ``manifest.json``, ``config.yaml`` and ``metrics.jsonl``) the script writes the record,
``docs/readme_numbers.json`` by default: the warm-up's held-out greedy accuracy and time, the held-out curve at
every evaluated step, the final accuracy, the median step time, the wall time of the whole command, the
arithmetic the run computed with (:mod:`tsctl.io.rounding`), torch and transformers versions, the code revision
and the date. It then prints the README's paragraph written from that record (:func:`readme_paragraph`), which
``tests/test_readme_numbers.py`` requires the README to hold. Timings want an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "readme_numbers.json"
CODE = ("src", "conf", "pyproject.toml")
"""The checkout's paths whose changes can move the figures: the record's ``dirty`` flag looks at these."""


def run_job(runs_dir: Path, overrides: list[str]) -> float:
    """Run ``tsctl train runs_dir=RUNS_DIR OVERRIDES`` from this checkout's sources; its wall time in seconds.

    Raises:
        SystemExit: the command failed (its own output says why).
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tsctl", "train", f"runs_dir={runs_dir}", *overrides], env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: tsctl train exited with {done.returncode}; nothing recorded")
    return time.perf_counter() - start


def find_run(runs_dir: Path) -> Path:
    """The one run folder under ``runs_dir`` (``<experiment>/<name>/``, beside the model cache ``_models/``).

    Raises:
        SystemExit: there is not exactly one.
    """
    runs = [m.parent for m in runs_dir.glob("*/*/manifest.json") if m.parent.parent.name != "_models"]
    if len(runs) != 1:
        raise SystemExit(f"error: expected one run folder under {runs_dir}, found {len(runs)}")
    return runs[0]


def revision() -> tuple[str, bool]:
    """This checkout's commit, and whether its :data:`CODE` differs from that commit (uncommitted or untracked files)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    status = subprocess.run(["git", "status", "--porcelain", "--", *CODE], cwd=ROOT, capture_output=True, text=True, check=True)
    return head, bool(status.stdout.strip())


def build_record(run: Path, job_seconds: float, overrides: list[str], code: tuple[str, bool]) -> dict[str, Any]:
    """The record of the finished run folder ``run``, read from its files and its base model's ``warmup.json``.

    Raises:
        SystemExit: the run did not complete, or evaluated nothing.
    """
    manifest = json.loads((run / "manifest.json").read_text())
    if manifest.get("status") != "completed":
        raise SystemExit(f"error: {run} is {manifest.get('status')!r}, not completed")
    warmup = json.loads((Path(manifest["base_model"]["path"]) / "warmup.json").read_text())
    config = OmegaConf.load(run / "config.yaml")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    curve = {str(r["step"]): r["eval/greedy_accuracy"] for r in records if "eval/greedy_accuracy" in r}
    step_times = [r["time/step"] for r in records if "time/step" in r]
    if not curve or not step_times:
        raise SystemExit(f"error: {run}/metrics.jsonl holds no held-out evaluation or no step")
    last = max(curve, key=int)
    return {
        "command": " ".join(["tsctl train", *overrides]),
        "task": config.task.name,
        "steps": config.trainer.steps,
        "prompts_per_step": config.trainer.batch_size,
        "samples_per_prompt": config.trainer.n,
        "warmup_heldout_accuracy": warmup["heldout_accuracy"],
        "warmup_heldout_problems": warmup["heldout_problems"],
        "warmup_seconds": warmup["train_seconds"],
        "heldout_problems": config.trainer.eval_problems,
        "heldout_curve": curve,
        "final_step": int(last),
        "final_accuracy": curve[last],
        "median_step_seconds": statistics.median(step_times),
        "job_seconds": job_seconds,
        "arithmetic": manifest["arithmetic"],
        "versions": {k: manifest["versions"].get(k) for k in ("torch", "transformers")},
        "revision": code[0],
        "dirty": code[1],
        "date": manifest["created"][:10],
    }


def quoted_steps(record: dict[str, Any]) -> list[int]:
    """The evaluated steps the README quotes between start and end: a quarter, half and three quarters of the run."""
    steps = record["final_step"]
    return [steps * q // 4 for q in (1, 2, 3) if steps * q % 4 == 0 and str(steps * q // 4) in record["heldout_curve"]]


def readme_paragraph(record: dict[str, Any]) -> str:
    """The README's set-up paragraph, its figures written from ``record`` as the README shows them (one line)."""
    a, v = record["arithmetic"], record["versions"]
    threads = f"{a['torch_threads']} thread{'s' if a['torch_threads'] != 1 else ''}"
    where = f"{a['cpu_capability']} at {threads}" if a["device"] == "cpu" else a["device"]
    curve = record["heldout_curve"]
    between = ", ".join(f"{curve[str(s)]:.3f} at {s}" for s in quoted_steps(record))
    return (
        f"Measured on {where} (torch {v['torch']}, transformers {v['transformers']}; revision "
        f"{record['revision'][:7]}{' with local changes' if record['dirty'] else ''}, {record['date']}): the first run "
        f"spent {record['warmup_seconds'] / 60:.1f} minutes warming up the built-in model (cached for later runs), "
        f"then {record['median_step_seconds']:.2f} s per training step (median); the whole command, its "
        f"{record['steps']} steps ({record['prompts_per_step']} prompts x {record['samples_per_prompt']} samples each) "
        f"and their held-out evaluations included, took {record['job_seconds'] / 60:.0f} minutes. Held-out greedy accuracy on "
        f"{record['task']} went from {record['warmup_heldout_accuracy']:.3f} (the warmed-up model) to "
        f"{record['final_accuracy']:.3f} at step {record['final_step']}{f' ({between})' if between else ''}. "
        "These figures are `docs/readme_numbers.json`, which `python scripts/readme_numbers.py` writes from a fresh "
        "run of the command above. Another instruction set or thread count rounds differently (see \"Same run, same "
        "numbers\"): expect the same range, other digits, and timings in proportion to the machine."
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, run the job, write the record, print its figures and the README paragraph."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RECORD, help=f"the record to write (default {RECORD.relative_to(ROOT)})")
    parser.add_argument("--runs-dir", type=Path, help="an empty or new folder to run in, kept afterwards (default: a temporary one)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for tsctl train, after --")
    args = parser.parse_args(argv)
    if any(o.split("=")[0].lstrip("+~") == "runs_dir" for o in args.overrides):
        parser.error("runs_dir is this script's: use --runs-dir")
    if args.runs_dir is not None and args.runs_dir.exists() and any(args.runs_dir.iterdir()):
        parser.error(f"--runs-dir {args.runs_dir} is not empty: the job must start from a clean runs folder")
    code = revision()
    place = contextlib.nullcontext(args.runs_dir) if args.runs_dir else tempfile.TemporaryDirectory(prefix="readme-numbers-")
    with place as folder:
        runs_dir = Path(folder).resolve()
        print(f"[1/3] tsctl train {' '.join(args.overrides)} in {runs_dir} (warm-up, then training)", flush=True)
        job_seconds = run_job(runs_dir, args.overrides)
        run = find_run(runs_dir)
        print(f"[2/3] reading {run} and its base model's warmup.json", flush=True)
        record = build_record(run, job_seconds, args.overrides, code)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"[3/3] wrote {args.out}", flush=True)
    curve = ", ".join(f"{step} {acc:.3f}" for step, acc in record["heldout_curve"].items())
    print(
        f"warm-up: held-out greedy accuracy {record['warmup_heldout_accuracy']:.3f} in {record['warmup_seconds']:.0f} s\n"
        f"held-out curve (step accuracy): {curve}\n"
        f"final accuracy {record['final_accuracy']:.3f} at step {record['final_step']}; median step "
        f"{record['median_step_seconds']:.2f} s; whole command {record['job_seconds']:.0f} s\n"
        f"arithmetic {record['arithmetic']}; {record['versions']}; revision {record['revision']}"
        f"{' (dirty)' if record['dirty'] else ''}\n\n"
        "README.md, \"Set up and run\", the paragraph after the commands:\n\n"
        + textwrap.fill(readme_paragraph(record), width=110, break_on_hyphens=False, break_long_words=False)
    )


if __name__ == "__main__":
    main()
