"""Seeds from outside the run (``seeds.source``): another causal LM, or a file of traces.

``seeds.source=model`` (``seeds.source_path``: any HF causal LM folder or hub id): that model writes
every window's behaviour responses and is pi_b. Its tokenizer must be the policy's (same vocabulary
and EOS; another family sharing the tokenizer is fine), else the run stops with one line naming
the difference. It sees the policy's prompt token ids (the policy's chat template), samples at the
rollout temperature with the ``hf`` engine (a second vLLM engine would not fit beside the first),
and pi_b is its own teacher-forced log-prob of each token at that temperature, always recomputed
(never the engine's): ``pi_b(o_t) = softmax(z_t / T)[o_t]`` of that model. It is loaded once and
kept for the run.

``seeds.source=traces`` (``seeds.source_path``: a JSONL or Parquet file): rows with a ``response``
text and a ``prompt_id`` (the task's problem id) or a ``question`` (the exact question text). A
trace is encoded with the policy's tokenizer, EOS appended, and cut to ``engine.max_new_tokens``
tokens (unfinished when cut). Slot ``j`` of a prompt served at step ``s`` takes that prompt's trace
``(s * k + j) mod m`` (``m`` traces, ``k`` seeds per prompt: the traces rotate over the run); a
prompt without a trace gets no seeds (its samples are plain); before training, a file that covers
no train prompt is refused and one that covers only some says how many (:meth:`TraceSource.coverage`).
pi_b of a trace is unknown: the shard stores NaN log-probs and entropies, and
``seeds.trace_logprobs`` decides the ratio of its prefix tokens (:mod:`tsctl.trainer.denominators`).
``truncation=entropy`` needs pi_b's entropies and is refused with traces.

Both write the seed shard's columns; ``checkpoint`` says where a seed came from (``model:<path>``,
``traces:<path>``: the entry's declared ``label`` and the path, read by :func:`source_of`) and
``checkpoint_step`` is the window's first step (so ``seeds/behaviour_age`` counts steps since the seeds
were written).

Each entry of :data:`SOURCES` declares what the rest of the toolkit asks of a source: ``own`` (the run's
own snapshots, which the behaviour pool and its selectors choose among), ``path`` (what
``seeds.source_path`` must name; None: it takes none), ``path_is_file``, ``entropies`` (it gives pi_b's
entropies, which ``truncation=entropy`` reads), ``known_logprobs`` (it gives pi_b's log-probs; without
them ``seeds.trace_logprobs`` decides) and ``label`` (how a seed's ``checkpoint`` names it).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from transformers import PreTrainedTokenizerBase

from tsctl.config.errors import ConfigError
from tsctl.config.registry import Registry
from tsctl.config.schema import TsctlConfig
from tsctl.engines.factory import build_engine, in_process
from tsctl.models.loading import load_model
from tsctl.models.precision import compute_dtype
from tsctl.models.prompts import PromptFormatter
from tsctl.seeds.generate import cut_points, graded, seed_columns
from tsctl.tasks.base import Problem, Task
from tsctl.tasks.records import DataError, read_records


def check_tokenizer(policy: PreTrainedTokenizerBase, other: PreTrainedTokenizerBase, where: str) -> None:
    """Raise a one-line :class:`ConfigError` unless ``other`` maps every token to the id ``policy`` does, with the same EOS."""
    mine, theirs = policy.get_vocab(), other.get_vocab()
    if mine != theirs:
        only = sorted(set(theirs.items()) ^ set(mine.items()), key=lambda kv: kv[1])[0]
        detail = f"{len(theirs)} tokens vs the policy's {len(mine)}; first difference: {only[0]!r} -> {only[1]}"
        raise ConfigError("seeds.source_path", f"the tokenizer of {where} is not the policy's ({detail}); seeds from another model need the policy's tokenizer")
    if other.eos_token_id != policy.eos_token_id:
        raise ConfigError("seeds.source_path", f"{where} ends responses with token {other.eos_token_id}, the policy with {policy.eos_token_id}; seeds from another model need the same EOS token")


class ModelSource:
    """Another causal LM as pi_b (``seeds.source=model``)."""

    def __init__(self, cfg: TsctlConfig, formatter: PromptFormatter, task: Task) -> None:
        self.cfg, self.formatter, self.task = cfg, formatter, task
        self.where = str(cfg.seeds.source_path)
        self.model, tokenizer = load_model(self.where, cfg.model.dtype, cfg.model.device, key="seeds.source_path")
        check_tokenizer(formatter.tokenizer, tokenizer, self.where)
        self.model.eval()
        self.engine = build_engine(in_process(cfg.engine), self.model, formatter.end_ids, formatter.pad_id, self.where, seed=cfg.seed, compute_dtype=compute_dtype(cfg, self.model))

    def columns(self, problems: Sequence[Problem], k: int, first: int, serve_steps: Sequence[int], sample_seed: int) -> dict[str, list]:
        """``k`` seeds per problem written by the other model, pi_b its teacher-forced log-probs."""
        return seed_columns(
            self.model, self.engine, self.formatter, self.task, problems, k, self.cfg,
            checkpoint=SOURCES.needs("model").label + self.where, checkpoint_step=first, sample_seed=sample_seed, serve_steps=serve_steps, teacher_forced=True,
        )


class TraceSource:
    """Responses read from a file, pi_b unknown (``seeds.source=traces``)."""

    def __init__(self, cfg: TsctlConfig, formatter: PromptFormatter, task: Task) -> None:
        self.cfg, self.formatter, self.task = cfg, formatter, task
        self.where = str(cfg.seeds.source_path)
        fields = {"prompt_id": "prompt_id", "question": "question", "response": "response"}
        records, _ = read_records(
            self.where, fields, optional=("prompt_id", "question"), skip_key=None, path_key="seeds.source_path",
            fix=lambda key: f"every trace needs its text in a {key!r} field",
        )
        self.by_id: dict[str, list[tuple[list[int], bool]]] = {}
        self.by_question: dict[str, list[tuple[list[int], bool]]] = {}
        for record in records:
            v = record.values
            if v["prompt_id"] is None and v["question"] is None:
                raise DataError(f"{self.where} line {record.line}: a trace needs a 'prompt_id' or a 'question' field")
            trace = self.encode(v["response"] or "")
            if v["prompt_id"] is not None:
                self.by_id.setdefault(v["prompt_id"], []).append(trace)
            else:
                self.by_question.setdefault(v["question"].strip(), []).append(trace)
        if not records:
            raise DataError(f"{self.where}: no traces; write one JSON object per line with 'question' (or 'prompt_id') and 'response'")

    def encode(self, text: str) -> tuple[list[int], bool]:
        """Token ids of a trace (EOS appended) cut to ``engine.max_new_tokens``, and whether it is whole."""
        ids = self.formatter.response_ids(text)
        limit = self.cfg.engine.max_new_tokens
        return (ids, True) if len(ids) <= limit else (ids[:limit], False)

    def traces(self, problem: Problem) -> list[tuple[list[int], bool]]:
        """The traces of ``problem``, by id first, else by question text."""
        return self.by_id.get(problem.id) or self.by_question.get(problem.question.strip(), [])

    def coverage(self, problems: Sequence[Problem]) -> str | None:
        """How many of ``problems`` (the train prompts) have a trace: None for all, a one-line note for some.

        Raises:
            ConfigError: no problem has a trace (the run would be plain DAPO).
        """
        covered = sum(bool(self.traces(p)) for p in problems)
        if covered == 0:
            example = f"prompt_id {next(iter(self.by_id))!r} is none of the task's ids (such as {problems[0].id!r})" if self.by_id and problems else "no question matches"
            raise ConfigError(
                "seeds.source_path", f"no trace in {self.where} belongs to any of the {len(problems)} train prompts ({example}), so no sample "
                "would be seeded; write each trace's 'prompt_id' as the task's problem id or its 'question' as the exact question text"
            )
        if covered < len(problems):
            return f"seeds.source_path: traces cover {covered} of the {len(problems)} train prompts; the other {len(problems) - covered} get no seeds (their samples are plain)"
        return None

    def columns(self, problems: Sequence[Problem], k: int, first: int, serve_steps: Sequence[int], sample_seed: int) -> dict[str, list]:
        """``k`` trace seeds per problem (rows of a problem without traces are empty, ``checkpoint`` "")."""
        rows = []
        for problem, step in zip(problems, serve_steps):
            found = self.traces(problem)
            for j in range(k):
                ids, finished = found[(step * k + j) % len(found)] if found else ([], False)
                rows.append((problem, step, ids, finished, bool(found)))
        kept = [r for r in rows if r[4]]
        found_cuts, found_spans = cut_points([r[2] for r in kept], [None] * len(kept), [r[1] for r in kept], self.formatter, self.task, self.cfg, np.random.default_rng(sample_seed))
        cuts, spans = iter(found_cuts), iter(found_spans)
        label = SOURCES.needs("traces").label + self.where
        return {
            "prompt_id": [r[0].id for r in rows],
            "prompt_ids": [self.formatter.prompt_ids(r[0].question) for r in rows],
            "response_ids": [r[2] for r in rows],
            "logprobs": [[math.nan] * len(r[2]) for r in rows],
            "entropies": [[math.nan] * len(r[2]) for r in rows],
            "checkpoint": [label if r[4] else "" for r in rows],
            "checkpoint_step": [first] * len(rows),
            "cut": [next(cuts) if r[4] else 0 for r in rows],
            "finished": [r[3] for r in rows],
            **graded([r[0] for r in rows], [r[2] for r in rows], [next(spans) if r[4] else 0 for r in rows], self.formatter, self.task),
        }


SOURCES: Registry[Callable[[TsctlConfig, PromptFormatter, Task], ModelSource | TraceSource | None]] = Registry(
    "seed source", key="seeds.source", own=False, path=None, path_is_file=False, entropies=True, known_logprobs=True, label="",
)
"""Who writes the seeds, by ``seeds.source``: the run's own snapshots (``self``: no outside source), another model, a trace file."""
SOURCES.register("self", own=True)(lambda cfg, formatter, task: None)
SOURCES.register("model", path="an HF model folder or hub id", label="model:")(ModelSource)
SOURCES.register("traces", path="a JSONL or Parquet file of traces", path_is_file=True, entropies=False, known_logprobs=False, label="traces:")(TraceSource)


def source_of(checkpoint: str) -> str:
    """The ``seeds.source`` that wrote a seed, from its ``checkpoint`` (the entry whose ``label`` begins it; else the run's own)."""
    names = SOURCES.names()
    labelled = [name for name in names if SOURCES.needs(name).label and checkpoint.startswith(SOURCES.needs(name).label)]
    return labelled[0] if labelled else next(name for name in names if SOURCES.needs(name).own)


def external_source(cfg: TsctlConfig, formatter: PromptFormatter, task: Task) -> ModelSource | TraceSource | None:
    """The source named by ``seeds.source`` (None for ``self``: the run's own snapshots)."""
    return SOURCES.get(cfg.seeds.source)(cfg, formatter, task)
