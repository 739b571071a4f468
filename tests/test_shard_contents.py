"""What a seed or rollout shard holds, checked wherever one is read (``tsctl rollout``, ``tsctl train``'s seed windows
and their resume): generated rows, damaged one field at a time, are refused naming the file, the row and the column;
valid rows pass. ``tsctl rollout`` continues the seeds its own ``ratio`` and ``trainer.n`` say, not the shard's."""

from __future__ import annotations

import hashlib
import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import micro_args
from tsctl.cli import app
from tsctl.config.errors import ConfigError
from tsctl.engines.hf import HFEngine
from tsctl.io.checkpoints import save_checkpoint
from tsctl.io.shard_contents import RowLimits, check_rows, read_checked
from tsctl.io.shards import ROLLOUT, SEED, ShardError, checksum_path, read_shard, write_shard
from tsctl.models.prompts import PromptFormatter
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.runconfig import compose_config
from tsctl.seeds.bank import SeedBank
from tsctl.seeds.shard_limits import unknown_pi_b
from tsctl.stages.rollout import seeds_per_prompt
from tsctl.tasks.registry import build_task

PATH = Path("/shards/seeds.parquet")
FIX = "write it again with `tsctl seed`"
TRACE = "traces:/data/traces.jsonl"
VALID = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DAMAGED = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@st.composite
def seed_rows(draw: st.DrawFn) -> tuple[dict[str, list], RowLimits]:
    """A valid seed shard's columns and the limits they fit: ``k`` seeds for each of 1..3 prompts, some from a trace."""
    k, prompts = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    vocab, context = draw(st.integers(20, 300)), draw(st.integers(12, 40))
    cols: dict[str, list] = {name: [] for name in SEED.schema.names}
    for row in range(k * prompts):
        plen = draw(st.integers(1, 6))
        rlen = draw(st.integers(0, min(10, context - plen - 1)))
        span = draw(st.integers(0, rlen))
        trace = draw(st.booleans())
        cols["prompt_id"].append(f"p{row // k}")
        cols["prompt_ids"].append(draw(st.lists(st.integers(0, vocab - 1), min_size=plen, max_size=plen)))
        cols["response_ids"].append(draw(st.lists(st.integers(0, vocab - 1), min_size=rlen, max_size=rlen)))
        cols["logprobs"].append([math.nan] * rlen if trace else draw(st.lists(st.floats(-30, 0), min_size=rlen, max_size=rlen)))
        cols["entropies"].append([math.nan] * rlen if trace else draw(st.lists(st.floats(0, 8), min_size=rlen, max_size=rlen)))
        cols["checkpoint"].append(TRACE if trace else "step-0")
        cols["checkpoint_step"].append(0)
        cols["cut"].append(draw(st.integers(0, span)))
        cols["finished"].append(draw(st.booleans()))
        cols["span"].append(span)
        cols["behaviour_reward"].append(1.0)
        cols["predicted"].append(None)
    return cols, RowLimits(vocab=vocab, context=context, per_prompt=k, prompts=prompts, unknown_pi_b=unknown_pi_b())


@st.composite
def rollout_rows(draw: st.DrawFn) -> tuple[dict[str, list], RowLimits]:
    """A valid rollout shard's columns and the limits they fit: groups of ``n`` samples, the first seeded (some by a trace)."""
    n, groups = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    vocab, context = draw(st.integers(20, 300)), draw(st.integers(12, 40))
    cols: dict[str, list] = {name: [] for name in ROLLOUT.schema.names}
    for row in range(n * groups):
        plen = draw(st.integers(1, 6))
        rlen = draw(st.integers(1, context - plen))
        prefix = draw(st.integers(0, rlen)) if row % n == 0 else 0
        trace = row % n == 0 and draw(st.booleans())
        logprobs = draw(st.lists(st.floats(-30, 0), min_size=rlen, max_size=rlen))
        cols["group"].append(row // n)
        cols["prompt_id"].append(f"p{row // n}")
        cols["prompt_ids"].append(draw(st.lists(st.integers(0, vocab - 1), min_size=plen, max_size=plen)))
        cols["response_ids"].append(draw(st.lists(st.integers(0, vocab - 1), min_size=rlen, max_size=rlen)))
        cols["prefix_len"].append(prefix)
        cols["logprobs"].append([math.nan] * prefix + logprobs[prefix:] if trace else logprobs)
        cols["behaviour_checkpoint"].append(TRACE if trace else "step-0" if row % n == 0 else "")
        cols["behaviour_step"].append(0 if row % n == 0 else -1)
        cols["policy_step"].append(1)
        cols["reward"].append(float(row % 2))
        cols["advantage"].append(0.0)
        cols["finished"].append(True)
    return cols, RowLimits(vocab=vocab, context=context, per_prompt=n, unknown_pi_b=unknown_pi_b())


def table(kind: str, cols: dict[str, list]) -> pa.Table:
    return pa.Table.from_pydict(cols, schema=(SEED if kind == "seed" else ROLLOUT).schema)


def refusal(kind: str, cols: dict[str, list], limits: RowLimits) -> str:
    with pytest.raises(ShardError) as err:
        check_rows(PATH, kind, table(kind, cols), limits, FIX)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{PATH}: row ") and text.endswith(f"; {FIX}")
    return text


def outside(draw: st.DrawFn, low: int, high: int) -> int:
    """An int32 outside ``[low, high]``: just below or above it, or far off."""
    return draw(st.one_of(st.integers(low - 2, low - 1), st.integers(high + 1, high + 2), st.integers(-(2**31), low - 1),
                          st.integers(high + 1, 2**31 - 1)))


def any_row(draw: st.DrawFn, cols: dict[str, list]) -> int:
    return draw(st.integers(0, len(cols["prompt_id"]) - 1))


def token(draw: st.DrawFn, cols: dict[str, list], limits: RowLimits) -> tuple[int, str]:
    """A token id outside [0, vocab) in one row's prompt or response."""
    spots = [(field, r, p) for field in ("prompt_ids", "response_ids") for r, ids in enumerate(cols[field]) for p in range(len(ids))]
    field, row, at = draw(st.sampled_from(spots))
    cols[field][row][at] = outside(draw, 0, limits.vocab - 1)
    return row, field


def too_long(draw: st.DrawFn, cols: dict[str, list], limits: RowLimits) -> tuple[int, str]:
    """One row's prompt grown past the context."""
    row = any_row(draw, cols)
    extra = limits.context - len(cols["prompt_ids"][row]) - len(cols["response_ids"][row]) + draw(st.integers(1, 5))
    cols["prompt_ids"][row] += [0] * extra
    return row, "prompt_ids + response_ids"


def not_finite(field: str, allowed: Callable[[dict[str, list], int, int], bool], value: float):
    """A damage: ``value`` (NaN or an infinity) at a spot of ``field`` where it is not allowed (NaN is where ``allowed``)."""

    def damage(draw: st.DrawFn, cols: dict[str, list], limits: RowLimits) -> tuple[int, str]:
        spots = [(r, p) for r, values in enumerate(cols[field]) for p in range(len(values)) if not (math.isnan(value) and allowed(cols, r, p))]
        assume(spots)
        row, at = draw(st.sampled_from(spots))
        cols[field][row][at] = value
        return row, field

    return damage


def column(field: str, bad: Callable[[st.DrawFn, dict[str, list], int], object]):
    """A damage: one row's ``field`` set to ``bad(draw, cols, row)``."""

    def damage(draw: st.DrawFn, cols: dict[str, list], limits: RowLimits) -> tuple[int, str]:
        row = any_row(draw, cols)
        cols[field][row] = bad(draw, cols, row)
        return row, field

    return damage


def foreign(field: str, value: object):
    """A damage: a row other than its block's first holding another prompt's ``field``."""

    def damage(draw: st.DrawFn, cols: dict[str, list], limits: RowLimits) -> tuple[int, str]:
        assume(limits.per_prompt > 1)
        row = draw(st.sampled_from([r for r in range(len(cols[field])) if r % limits.per_prompt]))
        cols[field][row] = value
        return row, field

    return damage


def short(draw: st.DrawFn, cols: dict[str, list], limits: RowLimits) -> tuple[int, str]:
    """The last row gone: the last prompt's block is not whole (and a seed shard holds a prompt too few)."""
    rows = len(cols["prompt_id"])
    assume(limits.prompts is not None or limits.per_prompt > 1 or rows == 1)
    for values in cols.values():
        values.pop()
    return (rows - 1 if limits.prompts is not None else rows - limits.per_prompt), "prompt_id"


def null(draw: st.DrawFn, cols: dict[str, list], limits: RowLimits) -> tuple[int, str]:
    """No value where the kind wants one."""
    row, field = any_row(draw, cols), draw(st.sampled_from(["prompt_id", "prompt_ids", "cut", "span", "checkpoint"]))
    cols[field][row] = None
    return row, field


def trace(cols: dict[str, list], row: int, at: int) -> bool:
    return cols["checkpoint"][row] == TRACE


def trace_prefix(cols: dict[str, list], row: int, at: int) -> bool:
    return cols["behaviour_checkpoint"][row] == TRACE and at < cols["prefix_len"][row]


SEED_DAMAGE = {
    "token id": token,
    "too long": too_long,
    "cut": column("cut", lambda draw, cols, row: outside(draw, 0, cols["span"][row])),
    "span": column("span", lambda draw, cols, row: outside(draw, 0, len(cols["response_ids"][row]))),
    "NaN log-prob": not_finite("logprobs", trace, math.nan),
    "inf log-prob": not_finite("logprobs", trace, math.inf),
    "-inf log-prob": not_finite("logprobs", trace, -math.inf),
    "NaN entropy": not_finite("entropies", trace, math.nan),
    "inf entropy": not_finite("entropies", trace, math.inf),
    "log-probs misaligned": column("logprobs", lambda draw, cols, row: cols["logprobs"][row] + [-1.0]),
    "another prompt's seed": foreign("prompt_id", "elsewhere"),
    "a seed short": short,
    "null": null,
}
ROLLOUT_DAMAGE = {
    "token id": token,
    "too long": too_long,
    "prefix_len": column("prefix_len", lambda draw, cols, row: outside(draw, 0, len(cols["response_ids"][row]))),
    "NaN log-prob": not_finite("logprobs", trace_prefix, math.nan),
    "-inf log-prob": not_finite("logprobs", trace_prefix, -math.inf),
    "another group's sample": foreign("group", 99),
    "a sample short": short,
}


@given(seed_rows())
@VALID
def test_valid_seed_rows_pass(drawn):
    cols, limits = drawn
    check_rows(PATH, "seed", table("seed", cols), limits, FIX)


@given(rollout_rows())
@VALID
def test_valid_rollout_rows_pass(drawn):
    cols, limits = drawn
    check_rows(PATH, "rollout", table("rollout", cols), limits, FIX)


@pytest.mark.parametrize("damage", SEED_DAMAGE)
@given(drawn=seed_rows(), data=st.data())
@DAMAGED
def test_a_damaged_seed_row_is_refused_naming_its_row_and_column(damage, drawn, data):
    cols, limits = drawn
    row, field = SEED_DAMAGE[damage](data.draw, cols, limits)
    assert f"row {row}, {field}: " in refusal("seed", cols, limits)


@pytest.mark.parametrize("damage", ROLLOUT_DAMAGE)
@given(drawn=rollout_rows(), data=st.data())
@DAMAGED
def test_a_damaged_rollout_row_is_refused_naming_its_row_and_column(damage, drawn, data):
    cols, limits = drawn
    row, field = ROLLOUT_DAMAGE[damage](data.draw, cols, limits)
    assert f"row {row}, {field}: " in refusal("rollout", cols, limits)


def test_the_refusal_says_what_is_wrong_and_how_many_rows_share_it():
    cols = {name: [] for name in SEED.schema.names}
    for row in range(4):  # 2 prompts x 2 seeds; rows 1 and 3 cut past their span
        for name, value in [("prompt_id", f"p{row // 2}"), ("prompt_ids", [1, 2]), ("response_ids", [3, 4, 5]), ("logprobs", [-1.0] * 3),
                            ("entropies", [0.5] * 3), ("checkpoint", "step-0"), ("checkpoint_step", 0), ("cut", 1 + 6 * (row % 2)),
                            ("finished", True), ("span", 2), ("behaviour_reward", 0.0), ("predicted", None)]:
            cols[name].append(value)
    limits = RowLimits(vocab=6, context=10, per_prompt=2, prompts=2)
    assert refusal("seed", cols, limits) == f"{PATH}: row 1, cut: 7 is outside [0, span=2] (the response's tokens 3) (and 1 more row(s)); {FIX}"
    cols["cut"] = [1, 1, 1, 1]
    cols["response_ids"][2] = [3, 6, 5]
    assert "row 2, response_ids: token id 6 at position 1 is outside the model's vocabulary [0, 6)" in refusal("seed", cols, limits)
    cols["response_ids"][2] = [3, 4, 5]
    cols["logprobs"][3] = [-1.0, math.nan, -1.0]
    assert "row 3, logprobs: nan at position 1 is not finite" in refusal("seed", cols, limits)
    cols["checkpoint"][3] = TRACE  # a trace's pi_b is unknown: NaN is what it holds
    check_rows(PATH, "seed", table("seed", cols), RowLimits(vocab=6, context=10, per_prompt=2, prompts=2, unknown_pi_b=unknown_pi_b()))
    assert "row 4, prompt_id: 4 rows where 3 prompts at 2 seed(s) per prompt take 6" in refusal("seed", cols, RowLimits(6, 10, 2, 3, ("traces:",)))
    assert "row 0, prompt_ids + response_ids: 2 + 3 = 5 tokens, beyond the context of 4" in refusal("seed", cols, RowLimits(6, 4, 2, 2, ("traces:",)))
    cols["cut"][0] = cols["span"][0] = 3  # the whole response as the prefix: its continuation needs one more token
    assert "row 0, cut: prompt 2 + prefix 3 + 1 continued token = 6, beyond the context of 5" in refusal("seed", cols, RowLimits(6, 5, 2, 2, ("traces:",)))


def rewrite(path: Path, cols: dict[str, list], metadata: dict[str, str]) -> None:
    """Write ``cols`` over the shard ``path`` with a fresh, matching ``.sha256``: what the checksum cannot catch."""
    table = pa.Table.from_pydict(cols, schema=SEED.schema).replace_schema_metadata(
        {"tsctl.kind": "seed", "tsctl.schema_version": str(SEED.version), **metadata})
    pq.write_table(table, path)
    checksum_path(path).write_text(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n")
def test_a_shard_written_again_with_a_fresh_checksum_passes_the_reader_but_not_the_check(tmp_path):
    path = tmp_path / "seeds.parquet"
    cols = {name: [] for name in SEED.schema.names}
    for name, value in [("prompt_id", "p0"), ("prompt_ids", [1, 2]), ("response_ids", [3, 4, 5]), ("logprobs", [-1.0] * 3),
                        ("entropies", [0.5] * 3), ("checkpoint", "step-0"), ("checkpoint_step", 0), ("cut", 2),
                        ("finished", True), ("span", 2), ("behaviour_reward", 0.0), ("predicted", None)]:
        cols[name].append(value)
    write_shard(path, "seed", cols, {"seeds_per_prompt": "1"})
    limits = RowLimits(vocab=6, context=10, per_prompt=1, prompts=1)
    assert read_checked(path, "seed", limits).table.to_pydict()["cut"] == [2]
    cols["cut"] = [40]
    rewrite(path, cols, {"seeds_per_prompt": "1"})
    assert read_shard(path, "seed").table.to_pydict()["cut"] == [40]  # checksum, kind, version and columns all pass
    with pytest.raises(ShardError) as err:
        read_checked(path, "seed", limits)
    assert str(err.value) == (f"{path}: row 0, cut: 40 is outside [0, span=2] (the response's tokens 3); "
                              "write it again with `tsctl seed` (its settings and shards.overwrite=true)")


def test_rollout_continues_the_count_its_own_ratio_and_n_seed():
    path, base = Path("/shards/seeds.parquet"), compose_config([]).cfg
    cfg = lambda ratio, n: replace(base, ratio=ratio, trainer=replace(base.trainer, n=n))  # noqa: E731
    written = {"seeds_per_prompt": "1", "ratio": "25", "trainer_n": "4", "first_step": "0"}
    assert seeds_per_prompt(cfg(25, 4), path, written) == 1
    assert seeds_per_prompt(cfg(25, 8), path, {}) == 2  # no count recorded: the rows' blocks are checked instead
    with pytest.raises(ShardError) as err:
        seeds_per_prompt(cfg(50, 4), path, written)
    assert str(err.value) == (
        f"{path}: written with 1 seed(s) per prompt, but this command's ratio=50 with trainer.n=4 seeds 2 of each group's samples; "
        "write a matching shard: rerun `tsctl seed` with this command's overrides and shards.overwrite=true, "
        "or run `tsctl rollout` with ratio=25 trainer.n=4 as the shard was written")
    with pytest.raises(ShardError, match=r"1 seed\(s\) per prompt, but this command's ratio=25 with trainer.n=8 seeds 2 "):
        seeds_per_prompt(cfg(25, 8), path, written)  # n alone changes the count
    with pytest.raises(ConfigError, match=r"ratio=0 with trainer.n=4 seeds 0 .* pass the ratio it was written for \(ratio=25 trainer.n=4\)"):
        seeds_per_prompt(cfg(0, 4), path, written)


BANK = ["model=micro", "task=arithmetic", "task.train_size=200", "task.heldout_size=20", "engine.max_new_tokens=10",
        "ratio=50", "refresh=3", "trainer.steps=6", "trainer.batch_size=2", "trainer.n=4", "seed=4"]
"""Seed windows 0..2 and 3..5, 2 prompts a step, 2 seeds each: 12 rows a window."""


@pytest.fixture
def bank_run(tmp_path):
    cfg = compose_config(BANK).cfg
    tok = build_char_tokenizer()
    model = build_tiny_model(cfg.model.tiny, tok, seed=0).eval()
    fmt = PromptFormatter(tok)
    task = build_task(cfg.task)
    engine = HFEngine(model, fmt.eos_id, fmt.pad_id)
    first = SeedBank(tmp_path / "seeds", cfg, fmt, task, list(task.problems("train")), tmp_path / "checkpoints", "unused-base")
    first.prepare(3, model, engine)  # window 3 opens: the current weights write it
    save_checkpoint(tmp_path / "checkpoints", 3, model, tok, {})
    written = read_shard(first.path(3), "seed")
    damaged = written.table.to_pydict()
    damaged["response_ids"][5] = damaged["response_ids"][5][:-1] + [len(tok)]  # one id past the vocabulary
    rewrite(first.path(3), damaged, written.metadata)

    def resumed() -> SeedBank:
        return SeedBank(tmp_path / "seeds", cfg, fmt, task, list(task.problems("train")), tmp_path / "checkpoints", "unused-base")

    return resumed, model, engine, written.table.to_pydict(), first.path(3)


def test_a_resumed_run_writes_a_window_whose_rows_do_not_fit_again_from_its_checkpoint(bank_run):
    resumed, model, engine, written, path = bank_run
    assert len(written["prompt_id"]) == 12 and engine.context_length == 256
    bank = resumed()
    bank.check_resume(4, model, engine)  # checkpoint step-3 is there: the shard can be written again
    bank.prepare(4, model, engine)
    assert read_checked(path, "seed", bank.limits(3, 6, model, engine)).table.to_pydict() == written  # the same seeds as before


def test_a_resumed_run_whose_damaged_window_cannot_be_written_again_says_which_row(bank_run, tmp_path):
    resumed, model, engine, written, path = bank_run
    shutil.rmtree(tmp_path / "checkpoints" / "step-3")
    before = path.read_bytes()
    with pytest.raises(ShardError) as err:
        resumed().check_resume(4, model, engine)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{path}: the seed shard of steps 3..5 is missing or damaged (row 5, response_ids: token id ")
    assert f"is outside the model's vocabulary [0, {model.get_input_embeddings().num_embeddings})" in text
    assert "checkpoint step-3, the behaviour policy that wrote it, is gone" in text and path.read_bytes() == before


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, model_cache) -> tuple[list[str], Path]:
    """``tsctl seed ratio=50`` (2 of trainer.n=4) of the micro model: the overrides and the shard folder."""
    root = tmp_path_factory.mktemp("seeded")
    args = [*micro_args(root / "runs", model_cache), "ratio=50"]
    result = CliRunner().invoke(app, ["seed", *args])
    assert result.exit_code == 0, result.output
    return args, root / "runs" / "default" / "shards"


def refused(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    lines = result.output.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    return lines[0]


def test_rollout_refuses_a_shard_written_for_another_count_and_its_hint_works(seeded, monkeypatch):
    args, shards = seeded
    before = (shards / "seeds.parquet").read_bytes()
    with monkeypatch.context() as patched:  # refused before the policy is loaded
        patched.setattr("tsctl.stages.rollout.load_policy", lambda *a, **k: pytest.fail("the policy was loaded"))
        line = refused("rollout", *args, "ratio=25")
    assert line == (
        f"error: {shards / 'seeds.parquet'}: written with 2 seed(s) per prompt, but this command's ratio=25 with trainer.n=4 seeds 1 "
        "of each group's samples; write a matching shard: rerun `tsctl seed` with this command's overrides and shards.overwrite=true, "
        "or run `tsctl rollout` with ratio=50 trainer.n=4 as the shard was written")
    assert (shards / "seeds.parquet").read_bytes() == before and not (shards / "rollouts.parquet").exists()
    result = CliRunner().invoke(app, ["rollout", *args, "ratio=25", "ratio=50", "trainer.n=4"])  # the hint, applied
    assert result.exit_code == 0, result.output
    rolled = read_shard(shards / "rollouts.parquet", "rollout").table.to_pydict()
    groups = len(rolled["group"]) // 4
    assert len(rolled["group"]) == 16 and [sum(s >= 0 for s in rolled["behaviour_step"][g * 4 : g * 4 + 4]) for g in range(groups)] == [2] * 4


@pytest.mark.parametrize("damage, words, loads", [
    (lambda cols, vocab: cols["cut"].__setitem__(3, 99), "row 3, cut: 99 is outside [0, span=", False),
    (lambda cols, vocab: cols["response_ids"][2].__setitem__(0, vocab), "row 2, response_ids: token id ", True),  # its vocabulary
    (lambda cols, vocab: cols["prompt_id"].__setitem__(1, "elsewhere"), "row 1, prompt_id: 'elsewhere' inside rows 0..1", False),
], ids=["cut", "token id", "another prompt's seed"])
def test_rollout_refuses_a_seed_row_that_does_not_fit_naming_it(seeded, tmp_path, monkeypatch, damage, words, loads):
    args, shards = seeded
    if not loads:  # refused before the policy is loaded
        monkeypatch.setattr("tsctl.stages.rollout.load_policy", lambda *a, **k: pytest.fail("the policy was loaded"))
    out = tmp_path / "shards"
    out.mkdir()
    shard = read_shard(shards / "seeds.parquet", "seed")
    cols = shard.table.to_pydict()
    damage(cols, build_char_tokenizer().__len__())
    rewrite(out / "seeds.parquet", cols, shard.metadata)
    line = refused("rollout", *args, f"shards.out_dir={out}")
    assert line.startswith(f"error: {out / 'seeds.parquet'}: {words}"), line
    assert line.endswith("; write it again with `tsctl seed`, this command's overrides and shards.overwrite=true")
    assert sorted(p.name for p in out.iterdir() if p.name != ".lock") == ["seeds.parquet", "seeds.parquet.sha256"]  # nothing written
