"""RL step time, rollout throughput and Thinking Seeds overhead, against TRL and plain HF generate.

One run measures, on the built-in tiny model (default ``TinyModelConfig``, character tokenizer, fp32,
CPU) and the same RL settings on every side (16 prompts x 8 samples, 48 new tokens, 2 mini-batches,
DAPO loss with clip 0.2 / 0.28, no KL, lr 2e-4, temperature 1):

(a) seconds per RL step of ``tsctl train`` against TRL's ``GRPOTrainer`` (``loss_type="dapo"``, no
    vLLM). One RL step is: sample 128 responses, score them, one no-grad forward for the old
    log-probs, two optimiser steps. TRL is configured to do exactly that: a generation batch of 128,
    ``per_device_train_batch_size=64``, ``steps_per_generation=2`` (so it also computes old log-probs),
    ``beta=0`` (no reference model), no gradient checkpointing; its step is timed from
    ``on_step_begin`` to ``on_step_end`` of its two optimiser steps (start-up excluded).
(b) seconds per step of tsctl at ``ratio=25 refresh=10`` against ``ratio=0``: each run covers one
    whole refresh window, so the seed generation of that window (written at its first step) is
    amortised over the window's steps. Every step's ``time/step`` includes ``time/seeds``.
(c) generated tokens/s of tsctl's ``hf`` engine against one plain ``model.generate`` call on the same
    batch of 128 sequences (16 prompts x 8), same sampling (temperature 1, no top-k, no top-p).
(d) training tokens/s and achieved GFLOP/s of tsctl's update phase (``time/update``), against an
    fp32 1024x1024 ``torch.matmul`` peak measured in the same rounds with the same thread count. For
    reference, a plain HF forward + backward + AdamW step on the same batch is measured too, and so
    are matmuls of the update's own shapes (one mini-batch's tokens through one block's projections),
    what the update's GEMMs alone reach next to the square peak. Packed against padded
    (``rl_bench/packing.py``): the update's tokens/s on one batch of the first step's prompts with
    responses of 16 to 48 tokens, ``trainer.pack`` on over off, prompts shared (the target's
    ``d_packed_over_padded``) and not (``packed_over_padded_rows``), the four updates interleaved
    with the other sides, each ratio taken within a round.

(e) the exploration arena (``rl_bench/arena.py``): seconds per RL step of each entry (Clip-Cov, KL-Cov, forking tokens,
    pass@k advantages, the KL term's four divergences at ``algo.kl_coef=0.1``, M2PO, sequence-level MIS, LUFFY's
    shaping of trace tokens) over plain DAPO's at the same ``ratio`` (0, or 25 for the entries that need seeds; the
    trace seeds' own DAPO for the shaping), the two run in the same rounds; ``--no-arena`` leaves it out.

(a), (b), (d) with ``trainer.compile`` (:mod:`tsctl.models.compiled`): each tsctl side runs again with the update's
    decoder layers compiled (``*_compiled`` figures; ``compiled_update_speedup`` is the uncompiled update's time over
    the compiled one's, ``d_packed_compiled_speedup`` the same on (d)'s packed batch). The process keeps what it
    compiled, so the compile happens once, in the warm-up, and is timed there (``compile_s``).

Equal work: the model is freshly initialised (the same weights for every side) and its EOS logit is
pushed to -1e4 by a forward hook on the LM head, so no response stops early: every side generates
exactly 48 tokens per sample. Rewards are then all 0 (so are the advantages); that changes no
amount of computation on either side.

Noise: the sides are interleaved in rounds (the order rotates each round); each figure is the
median over rounds, with the min-max spread. Ratios are taken within a round, then summarised.
Every time is taken twice: wall-clock (what the targets are judged on) and CPU seconds of this
process, which a machine shared with other jobs disturbs far less (with one torch thread, CPU
seconds are the work done; wall seconds also count the time other processes held the core).

FLOPs of the update phase, per step (model FLOPs, padding excluded), for rows of length l_i
(prompt + response) and R response tokens::

    6 * P_layers * sum_i l_i  +  12 * n_layers * d * sum_i l_i^2  +  6 * d * V * R

with P_layers the parameters of the transformer blocks (attention and MLP projections, norms), the
second term attention scores and values (full l x l, forward and backward) and the third the LM head,
which tsctl applies at response positions only. The plain HF reference computes logits at every
position, so its LM-head term uses sum_i l_i instead of R.

tsctl runs each distinct prompt of a mini-batch through the model once (``trainer.share_prompts``), so
its update executes fewer FLOPs than its rows stand for. (d) divides the FLOPs it executes: the two
block terms scaled by the step's ``forward_token_share`` (tokens its forwards ran / tokens of its
rows, from the run's metrics). ``update_model_gflops_per_s`` divides the whole rows' FLOPs instead:
the work a row-by-row update would have done, per second of tsctl's update.

    pip install -e ".[bench]"
    python bench/rl_step.py [--rounds 3] [--steps 10] [--threads 1] [--gen-repeats 5] [--skip-trl] [--no-compile] [--profile]
    python bench/rl_step.py --packing-only [--rounds 7]   # (d)'s packed against padded alone, about a minute
    python bench/rl_step.py --arena-only [--rounds 3]     # (e) alone: each entry's step time over DAPO's

Writes ``bench/results/<timestamp>.json`` and prints a table; ``--profile`` adds pyinstrument call
trees of one run of each side (``<timestamp>-profile-<side>.txt``) for finding what bounds a figure.

The parts live in ``bench/rl_bench/``: ``settings.py`` (what every side runs with, the targets),
``sides.py`` (tsctl's loop, TRL's trainer, the engine against ``model.generate``, a plain HF update),
``timing.py`` (wall and CPU clocks, matmul peaks, update FLOPs), ``packing.py`` ((d)'s packed and padded updates),
``arena.py`` ((e)'s entries) and ``report.py`` (figures, medians, the table); this script runs the interleaved rounds
and writes the record.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterator

os.environ.setdefault("TSCTL_NO_PROGRESS", "1")

import torch  # noqa: E402
from rich.console import Console  # noqa: E402

from rl_bench.arena import arena_report, arena_sides  # noqa: E402
from rl_bench.packing import packing_sides  # noqa: E402
from rl_bench.report import machine, met, print_table, summarise  # noqa: E402
from rl_bench.settings import RESULTS, TARGETS, Settings  # noqa: E402
from rl_bench.sides import bench_generation, bench_task, plain_update, run_trl, run_tsctl, save_bench_model  # noqa: E402
from rl_bench.timing import Stopwatch, matmul_peak, rotate, shape_matmul_peak, step_lengths, timed, update_flops  # noqa: E402
from tsctl.models.loading import load_model  # noqa: E402
from tsctl.models.prompts import PromptFormatter  # noqa: E402
from tsctl.tasks.base import Problem  # noqa: E402


def run_rounds(args: argparse.Namespace, s: Settings, model_dir: Path, work: Path, problems: list[Problem], console: Console) -> list[dict]:
    """All rounds of (a), (b), (d) and (e): tsctl ratio 0, tsctl ratio 25, TRL, matmul peak, plain HF update, the
    packed and padded updates (``--packing-only``: these alone), the arena's entries and the DAPO side on trace seeds
    (``--arena-only``: these and DAPO at ratio 0 and 25 alone)."""
    arena = arena_sides(s, model_dir, work, problems, args.steps, plain=args.arena_only) if args.arena else {}
    if args.arena_only:
        with console.status("warm-up: a short run of each side"):
            for side in arena.values():
                side(-1, min(2, args.steps))
        return interleave(args, arena, {}, console)
    updates, packing_tokens = packing_sides(s, model_dir, problems, args.compile)
    packing: dict[str, Callable[[int], object]] = {name: (lambda r, side=side: side()) for name, side in updates.items()}
    if args.packing_only:
        for side in updates.values():
            side()  # warm-up (the compiled side compiles here)
        return interleave(args, packing, {"packing_tokens": packing_tokens}, console)
    flops_model, tokenizer = load_model(model_dir, "float32", "cpu")
    formatter = PromptFormatter(tokenizer, use_chat_template=False)

    def tsctl_side(ratio: int, compiled: bool = False) -> Callable[[int], dict]:
        def go(r: int) -> dict:
            out = run_tsctl(s, model_dir, work / "runs", f"ratio{ratio}{'-compiled' if compiled else ''}-round{r}", ratio, args.steps, compiled)
            lengths = [step_lengths(s, formatter, problems, step) for step in range(args.steps)]
            assert out["train_tokens"] == [sum(x) for x in lengths], "token count differs from tsctl's own"
            head = s.samples * s.max_new_tokens
            out["update_model_gflop"] = [update_flops(flops_model, x, head) / 1e9 for x in lengths]
            out["update_gflop"] = [update_flops(flops_model, x, head, share) / 1e9 for x, share in zip(lengths, out["forward_token_share"])]
            return out

        return go

    def trl_side(r: int) -> dict:
        return run_trl(s, model_dir, work / f"trl-round{r}", problems, args.steps, args.threads)

    constants: dict = {"packing_tokens": packing_tokens}
    with console.status("warm-up: a short run of each side (and the compile, timed)"):
        run_tsctl(s, model_dir, work / "runs", "warmup-ratio0", 0, 2)
        run_tsctl(s, model_dir, work / "runs", "warmup-ratio25", 25, 2)
        if args.compile:  # the first compile of this process (the on-disk cache of an earlier one may shorten it)
            constants["compile_s"] = sum(run_tsctl(s, model_dir, work / "runs", "warmup-ratio0-compiled", 0, 2, True)["wall_compile_s"])
            run_tsctl(s, model_dir, work / "runs", "warmup-ratio25-compiled", 25, 2, True)
        if not args.skip_trl:
            run_trl(s, model_dir, work / "trl-warmup", problems, 1, args.threads)
        for side in updates.values():
            side()
        for side in arena.values():
            side(-1, 2)
    sides: dict[str, Callable[[int], object]] = {
        "tsctl_ratio0": tsctl_side(0),
        "tsctl_ratio25": tsctl_side(25),
        **({"tsctl_ratio0_compiled": tsctl_side(0, True), "tsctl_ratio25_compiled": tsctl_side(25, True)} if args.compile else {}),
        "matmul_peak_gflops": lambda r: matmul_peak(),
        "shape_matmul_gflops": lambda r: shape_matmul_peak(flops_model, sum(step_lengths(s, formatter, problems, 0)) // s.mini_batches),
        "plain_update_gflops": lambda r: plain_update(s, model_dir, problems),
        **packing,
        **arena,
    }
    if not args.skip_trl:
        sides["trl"] = trl_side
    return interleave(args, sides, constants, console)


def interleave(args: argparse.Namespace, sides: dict[str, Callable[[int], object]], constants: dict, console: Console) -> list[dict]:
    """``args.rounds`` rounds of every side (called with the round number), the order rotating each round;
    each round's results by side, with ``constants``."""
    rounds = []
    for r in range(args.rounds):
        result: dict = dict(constants)
        for name in rotate(list(sides), r):
            with console.status(f"round {r + 1}/{args.rounds}: {name}"):
                result[name], seconds = timed(sides[name], r)
            console.log(f"round {r + 1}/{args.rounds}: {name} in {seconds['wall']:.0f}s")
        rounds.append(result)
    return rounds


@contextlib.contextmanager
def workdir(keep: str | None) -> Iterator[Path]:
    """``keep`` when given (created), else a temporary folder removed afterwards."""
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield Path(keep)
    else:
        with tempfile.TemporaryDirectory(prefix="tsctl-bench-") as tmp:
            yield Path(tmp)


def profile_sides(args: argparse.Namespace, s: Settings, model_dir: Path, work: Path, problems: list[Problem], out: Path, console: Console) -> list[Path]:
    """pyinstrument call trees of short runs of each side (tsctl ratio 0 and 25, TRL), as text next to ``out``."""
    from pyinstrument import Profiler

    sides: dict[str, Callable[[], object]] = {
        "tsctl-ratio0": lambda: run_tsctl(s, model_dir, work / "runs", "profile-ratio0", 0, args.steps),
        "tsctl-ratio25": lambda: run_tsctl(s, model_dir, work / "runs", "profile-ratio25", 25, args.steps),
    }
    if not args.skip_trl:
        sides["trl"] = lambda: run_trl(s, model_dir, work / "trl-profile", problems, args.steps, args.threads)
    written = []
    for name, side in sides.items():
        with console.status(f"profiling {name}"):
            profiler = Profiler(interval=0.005)
            with profiler:
                side()
        path = out.with_name(f"{out.stem}-profile-{name}.txt")
        path.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
        written.append(path)
    return written


def main(argv: list[str] | None = None, s: Settings = Settings()) -> dict:
    """Run the bench with the command-line arguments ``argv`` and the RL settings ``s`` (by default those of the
    module docstring); print the table and return the record it writes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of (a), (b), (d), (e) (default 3)")
    parser.add_argument("--steps", type=int, default=10, help="RL steps per run and side; = refresh covers one seed window (default 10)")
    parser.add_argument("--gen-repeats", type=int, default=5, help="interleaved repeats of (c) (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, the same for every side (default 1)")
    parser.add_argument("--skip-trl", action="store_true", help="skip (a), e.g. when TRL is not installed")
    parser.add_argument("--workdir", default=None, help="keep run folders here (default: a temporary folder)")
    parser.add_argument("--out", default=None, help="JSON path (default: bench/results/<timestamp>.json)")
    parser.add_argument("--profile", action="store_true", help="also write pyinstrument call trees of each side (needs pyinstrument)")
    alone = parser.add_mutually_exclusive_group()
    alone.add_argument("--packing-only", action="store_true", help="run only (d)'s packed against padded updates (no TRL, no (c))")
    alone.add_argument("--arena-only", action="store_true", help="run only (e): each arena entry's step time over plain DAPO's")
    parser.add_argument("--no-arena", dest="arena", action="store_false", help="leave out (e), the arena's entries")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="leave out the sides with trainer.compile on (by default each tsctl side runs with it off and on)")
    args = parser.parse_args(argv)
    if args.packing_only or args.arena_only:
        args.skip_trl, args.gen_repeats, args.arena = True, 0, args.arena_only
    if args.arena_only:
        args.compile = False
    if not args.skip_trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            sys.exit('TRL is not installed: pip install -e ".[bench]" (or pass --skip-trl)')
    torch.set_num_threads(args.threads)
    console = Console(width=max(Console().width, 120))
    problems = list(bench_task(s).problems("train"))
    watch = Stopwatch()
    out = Path(args.out) if args.out else RESULTS / f"{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with workdir(args.workdir) as work:
        model_dir = work / "model"
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor")  # an empty compile cache: compile_s is a first compile's
        save_bench_model(model_dir, s.seed)
        generation = None
        if not (args.packing_only or args.arena_only):
            with console.status("(c) engine vs model.generate"):
                generation = bench_generation(s, model_dir, problems, args.gen_repeats)
        rounds = run_rounds(args, s, model_dir, work, problems, console)
        profiles = profile_sides(args, s, model_dir, work, problems, out, console) if args.profile else []
    summary = summarise(rounds, generation)
    print_table(console, summary, args)
    report = {
        "created": dt.datetime.now().isoformat(timespec="seconds"),
        "seconds": watch.read()["wall"],
        "args": vars(args), "settings": asdict(s), "machine": machine(),
        "targets": {k: {"op": op, "value": v, "met_wall": met(k, summary[k]["wall"]["median"]), "met_cpu": met(k, summary[k]["cpu"]["median"])}
                    for k, (op, v) in TARGETS.items() if k in summary},
        "arena": arena_report(summary, s, work / "traces.jsonl"),
        "summary": summary, "generation": generation, "rounds": rounds, "profiles": [str(p) for p in profiles],
    }
    out.write_text(json.dumps(report, indent=1))
    console.print(f"wrote {out} in {report['seconds']:.0f}s")
    return report


if __name__ == "__main__":
    main()
