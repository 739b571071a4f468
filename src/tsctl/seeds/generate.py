"""Write seeds: full behaviour-policy responses, their teacher-forced log-probs and entropies, cut points."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine, Request, SamplingParams
from tsctl.engines.own_logprobs import uses_engine_logprobs
from tsctl.models.batch import collate
from tsctl.models.forward import Forward
from tsctl.models.precision import model_device
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import Sample
from tsctl.seeds.truncation import CutContext, choose_cut, cut_span, find_answer_start
from tsctl.tasks.base import Problem, Task


def boundary_ids(formatter: PromptFormatter) -> frozenset[int]:
    """Token ids that end a reasoning step: those whose text contains a newline."""
    tok = formatter.tokenizer
    return frozenset(i for i in range(len(tok)) if "\n" in tok.decode([i]))


def seed_columns(
    model: PreTrainedModel,
    engine: Engine,
    formatter: PromptFormatter,
    task: Task,
    problems: Sequence[Problem],
    k: int,
    cfg: TsctlConfig,
    checkpoint: str,
    checkpoint_step: int,
    sample_seed: int,
    serve_steps: Sequence[int] | None = None,
    teacher_forced: bool = False,
) -> dict[str, list]:
    """Columns of a seed shard: ``k`` behaviour responses per problem, rows in problem order.

    ``serve_steps[i]`` is the training step that will use problem ``i``'s seeds (what the
    ``schedule`` strategy reads); by default the checkpoint's step.

    The behaviour policy is ``model`` (the engine samples from it). Log-probs and entropies at the
    sampling temperature come from the engine when ``trainer.old_logprobs`` allows it (see
    :mod:`tsctl.engines.own_logprobs`) and ``teacher_forced`` is off, else from a teacher-forced
    forward of the same weights (the trainer's :class:`~tsctl.models.forward.Forward`).
    """
    e = cfg.engine
    prompts = [formatter.prompt_ids(p.question) for p in problems]
    requests = [Request(prompt_ids=ids) for ids in prompts for _ in range(k)]
    params = SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=sample_seed)
    completions = engine.generate(requests, params)
    samples = [Sample(group=i // k, prompt_id=problems[i // k].id, prompt_ids=r.prompt_ids, generated_ids=c.token_ids, generated_logprobs=c.logprobs, finished=c.finished) for i, (r, c) in enumerate(zip(requests, completions))]
    if uses_engine_logprobs(cfg, engine, model) and not teacher_forced:
        logprobs, entropies = [c.logprobs for c in completions], [c.entropies for c in completions]
    else:
        logprobs, entropies = _teacher_forced(model, samples, formatter.pad_id, cfg)
    steps = [serve_steps[s.group] if serve_steps is not None else checkpoint_step for s in samples]
    ends = [s.generated_ids[-1] if s.finished else formatter.eos_id for s in samples]
    cuts, spans = cut_points([s.generated_ids for s in samples], entropies, steps, formatter, task, cfg, np.random.default_rng(sample_seed), ends)
    return {
        "prompt_id": [s.prompt_id for s in samples],
        "prompt_ids": [list(s.prompt_ids) for s in samples],
        "response_ids": [s.generated_ids for s in samples],
        "logprobs": logprobs,
        "entropies": entropies,
        "checkpoint": [checkpoint] * len(samples),
        "checkpoint_step": [checkpoint_step] * len(samples),
        "cut": cuts,
        "finished": [s.finished for s in samples],
        **graded([problems[s.group] for s in samples], [s.generated_ids for s in samples], spans, formatter, task),
    }


def graded(rows: Sequence[Problem], responses: Sequence[list[int]], spans: Sequence[int], formatter: PromptFormatter, task: Task) -> dict[str, list]:
    """The seed-shard columns every source adds: each row's ``span``, the task's grade of its whole behaviour response
    (``behaviour_reward``; ``rows[i]`` is row ``i``'s problem) and ``predicted``, None until the seed controller places
    the seed (:mod:`tsctl.seeds.controller`)."""
    return {
        "span": list(spans),
        "behaviour_reward": [task.reward(problem, formatter.decode(ids)) for problem, ids in zip(rows, responses)],
        "predicted": [None] * len(rows),
    }


def cut_points(
    responses: Sequence[list[int]],
    entropies: Sequence[Sequence[float] | None],
    steps: Sequence[int],
    formatter: PromptFormatter,
    task: Task,
    cfg: TsctlConfig,
    rng: np.random.Generator,
    ends: Sequence[int] | None = None,
) -> tuple[list[int], list[int]]:
    """The ``truncation`` strategy's cut of each behaviour response, in order (``rng`` draws in that order), and the
    longest cut it allowed (:func:`~tsctl.seeds.truncation.cut_span`).

    ``entropies[i]`` is pi_b's entropy at each token of ``responses[i]`` (None when unknown: only
    a strategy declaring ``entropies``, such as ``entropy``, needs it); ``steps[i]`` is the training step that will use the seed (``schedule``);
    ``ends[i]`` is the end token a finished response ends with (EOS or, in chat, ``<|im_end|>``),
    never part of a prefix (default: the tokenizer's EOS).
    """
    marker = formatter.tokenizer.encode(task.answer_marker, add_special_tokens=False) if task.answer_marker else None
    bounds = boundary_ids(formatter)
    cuts, spans = [], []
    for i, (ids, ent, step) in enumerate(zip(responses, entropies, steps)):
        answer = find_answer_start(ids, marker, bounds) if marker else None
        end = ends[i] if ends is not None else formatter.eos_id
        ctx = CutContext(eos_id=end, entropies=ent, boundary_ids=bounds, answer_start=answer, step=step, total_steps=cfg.trainer.steps)
        cuts.append(choose_cut(cfg.truncation, ids, ctx, cfg.seeds, rng))
        spans.append(cut_span(ids, ctx, cfg.seeds))
    return cuts, spans


def _teacher_forced(model: PreTrainedModel, samples: list[Sample], pad_id: int, cfg: TsctlConfig, chunk: int = 128) -> tuple[list[list[float]], list[list[float]]]:
    """Per-sample log-probs and entropies of the generated tokens under ``model`` (the trainer's forward
    settings), at most ``chunk`` rows per forward."""
    batch = collate(samples, torch.zeros(len(samples)), pad_id, model_device(model))
    lp, ent = Forward.of(cfg).recompute(model, batch, max_rows=chunk)
    lengths = [len(s.generated_ids) for s in samples]
    return [row[:n] for row, n in zip(lp.tolist(), lengths)], [row[:n] for row, n in zip(ent.tolist(), lengths)]
