"""The ``hf`` rollout engine: batched sampling from a Hugging Face causal LM.

A lean decode loop in place of ``model.generate``. Per chunk of requests:

- the prompts are left-padded into one batch; each distinct prompt is prefilled once and its keys
  and values copied to every row that starts from it (the ``n`` samples of a prompt, seeded or not);
- a request's prefix (a Thinking Seeds behaviour prefix) is fed through the decode loop, one forced
  token per step, before the row starts sampling. A row with a ``k``-token prefix and a limit of
  ``m`` new tokens thus occupies steps ``0 .. k + m - 1``: with Thinking Seeds (``k + m`` is the
  response budget) seeded and plain rows end together, and the cache is no wider than prompt plus
  budget;
- keys and values go to buffers that start at twice the prompt width and double when full (no
  per-step concatenation);
- the additive attention mask is built once and sliced per step, positions count real tokens only;
- each step runs the last token only: on CPU, for supported architectures, through
  :class:`~tsctl.engines.fused_decode.FusedDecoder` (fused projections, reading each whole buffer
  with its tail masked); otherwise through the model's own forward, whose one-token attention on
  CPU is a plain matmul-softmax-matmul (:mod:`tsctl.engines.decode_attention`), faster there than the SDPA
  kernel at decode shapes. It then samples (temperature, top-p) with a seeded generator;
- a row stops at a sampled end token (any of ``end_ids``) or at its limit; once a quarter of the
  rows in the batch have stopped, they are dropped from it;
- besides the sampled tokens' log-probs, the engine reports the entropy at every generated token
  and at every prefix token (at the steps that force it), so the trainer needs no second forward
  for pi_old (``reports_token_stats``); at a forcing step it records the forced token's log-prob
  (``Completion.prefix_logprobs``: pi_old's, not pi_b's), never the one the sampler drew there;
- with a ``compute_dtype`` below the parameters' (bf16 compute over fp32 weights on GPU), every
  forward runs under ``torch.autocast`` to it, as the trainer's forwards do.

Requests are sorted by prompt to limit padding and chunked to ``batch_size``; results come back in
request order.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache

from tsctl.config.errors import ConfigError
from tsctl.engines.base import Completion, Request, SamplingParams
from tsctl.engines.decode_attention import DECODE_ATTENTION
from tsctl.engines.fused_decode import FusedDecoder
from tsctl.engines.kv_cache import PreallocatedLayer
from tsctl.engines.registry import ENGINES, EngineBuild
from tsctl.engines.sampling import sample
from tsctl.models.padding import additive_mask, left_pad, prefill_mask
from tsctl.models.precision import autocast
from tsctl.models.shared_prompts import sliding_window

_CHECK_EVERY = 4
"""Decode steps between looks at how many rows are still running (one host sync each)."""


@dataclass(frozen=True)
class _Row:
    """One request as the decode loop sees it: prompt ids (prefilled), prefix ids (forced), new-token limit."""

    prompt: tuple[int, ...]
    prefix: tuple[int, ...]
    limit: int


class HFEngine:
    """Samples continuations with a transformers causal LM in its own dtype and device.

    Args:
        model: a causal LM whose forward accepts a 4D additive attention mask, position ids and a
            ``Cache`` (any model with ``eager`` or ``sdpa`` attention).
        end_ids: the token, or the tokens, that end a sample (:func:`tsctl.models.prompts.end_token_ids`).
        pad_id: token used to left-pad prompts (never attended to).
        batch_size: most sequences decoded together.
        compute_dtype: autocast dtype of the forwards (None or float32: the parameters' own dtype).
    """

    reports_token_stats = True

    def __init__(
        self, model: PreTrainedModel, end_ids: int | Iterable[int], pad_id: int, batch_size: int = 256,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        attention = getattr(model.config, "_attn_implementation", "eager")
        if attention not in ("eager", "sdpa"):
            raise ValueError(
                f"HFEngine passes a 4D additive attention mask, which needs eager or sdpa attention; the model uses "
                f"{attention!r} (load it with attn_implementation='sdpa')"
            )
        self.model = model
        self.end_ids: tuple[int, ...] = (end_ids,) if isinstance(end_ids, int) else tuple(sorted(set(end_ids)))
        self.pad_id = pad_id
        self.batch_size = batch_size
        self.compute_dtype = compute_dtype
        limits = [n for n in (getattr(model.config, "max_position_embeddings", None), sliding_window(model)) if n is not None]
        self.context_length: int | None = min(limits, default=None)
        """The positions the model was built for (a longer request would run at positions it never saw), or its
        sliding attention window when shorter (which this engine does not apply: see :meth:`_check_window`)."""
        forward_args = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in forward_args else "past_key_values"
        self._keep_last = "logits_to_keep" in forward_args

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, requests: Sequence[Request], params: SamplingParams) -> list[Completion]:
        """Sample one completion per request, in request order (see :class:`~tsctl.engines.base.Engine`)."""
        if params.temperature < 0 or not 0 < params.top_p <= 1 or params.max_new_tokens < 1:
            raise ValueError(f"invalid sampling params {params}")
        if any(not r.prompt_ids for r in requests):
            raise ValueError("every request needs at least one prompt token")
        rows = [_Row(tuple(r.prompt_ids), tuple(r.prefix_ids), r.token_limit(params)) for r in requests]
        self._check_window(rows)
        order = sorted(range(len(rows)), key=lambda i: (len(rows[i].prompt), rows[i].prompt))
        generator = torch.Generator(device=self.device).manual_seed(params.seed)
        results: list[Completion | None] = [None] * len(rows)
        was_training = self.model.training
        attention = self.model.config._attn_implementation
        self.model.eval()
        if self.device.type == "cpu":
            self.model.config._attn_implementation = DECODE_ATTENTION
        try:
            with torch.inference_mode(), autocast(self.device, self.compute_dtype):
                fused = self.device.type == "cpu" and self.compute_dtype in (None, torch.float32)
                decoder = FusedDecoder.for_model(self.model) if fused else None
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start : start + self.batch_size]
                    for i, completion in zip(chunk, self._generate_chunk([rows[i] for i in chunk], params, generator, decoder)):
                        results[i] = completion
        finally:
            self.model.train(was_training)
            self.model.config._attn_implementation = attention
        return results  # type: ignore[return-value]

    def _check_window(self, rows: Sequence[_Row]) -> None:
        """Refuse rows that reach past the model's sliding attention window: the engine's explicit 4D
        mask has no window, so it would attend where the model's own forward does not."""
        window = sliding_window(self.model)
        longest = max((len(r.prompt) + len(r.prefix) + r.limit for r in rows), default=0)
        if window is not None and longest > window:
            raise ConfigError(
                "engine", f"the model attends through a sliding window of {window} tokens, which the hf engine does not apply, "
                f"and prompt + response reach {longest} tokens here; lower engine.max_new_tokens (or the prompts) so that "
                f"they fit in {window}, or use engine=vllm"
            )

    def sleep(self) -> None:
        """Nothing to release: the engine samples with the trainer's own model."""

    def wake_up(self) -> None:
        """Nothing to restore (see :meth:`sleep`)."""

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy the trainer's weights into the model (tensors tied to a given one may be left out)."""
        own = self.model.state_dict()
        unexpected = sorted(set(state_dict) - set(own))
        given = {own[k].data_ptr() for k in state_dict if k in own}
        missing = sorted(k for k, v in own.items() if k not in state_dict and v.data_ptr() not in given)
        if unexpected or missing:
            raise KeyError(f"state_dict does not match the model: missing {missing}, unexpected {unexpected}")
        with torch.no_grad():
            for name, tensor in state_dict.items():
                if own[name].data_ptr() != tensor.data_ptr():  # the trainer's own model needs no copy
                    own[name].copy_(tensor)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Cache) -> torch.Tensor:
        """Run the model on ids [N, Q] with mask [N, 1, Q, K] and positions [N, Q]; return the last position's logits [N, V]."""
        keep_arg = {"logits_to_keep": 1} if self._keep_last else {}
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
            **{self._cache_arg: cache}, **keep_arg,
        )
        return out.logits[:, -1]

    def _prefill(self, prompts: list[tuple[int, ...]], capacity: int) -> tuple[Cache, torch.Tensor, torch.Tensor]:
        """Run the prompts [B] through the model once, each distinct prompt only once.

        Returns:
            the cache holding every row's keys and values (room for ``capacity`` positions), the
            next-token logits [B, V] and the real-token mask [B, L] of the left-padded batch.
        """
        unique: dict[tuple[int, ...], int] = {}
        rows = [unique.setdefault(p, len(unique)) for p in prompts]
        ids, real = left_pad(list(unique), self.pad_id, self.device)
        cache = Cache(layer_class_to_replicate=functools.partial(PreallocatedLayer, capacity))
        positions = (real.cumsum(dim=1) - 1).clamp_min(0)
        logits = self._forward(ids, prefill_mask(real, self.model.dtype), positions, cache)
        if len(unique) < len(prompts):
            index = torch.tensor(rows, device=ids.device)
            cache.reorder_cache(index)
            logits, real = logits[index], real[index]
        return cache, logits, real

    def _generate_chunk(
        self, rows: list[_Row], params: SamplingParams, generator: torch.Generator, decoder: FusedDecoder | None
    ) -> list[Completion]:
        """Decode one batch of at most ``batch_size`` rows: each forces its prefix, then samples up to its limit.

        Decode steps run through ``decoder`` when given, else through the model's forward.
        """
        batch = len(rows)
        steps = max(len(r.prefix) + r.limit for r in rows)
        width = max(len(r.prompt) for r in rows)
        cache, logits, real = self._prefill([r.prompt for r in rows], width + steps - 1)
        device = real.device

        allowed = torch.cat([real, real.new_ones(batch, steps - 1)], dim=1)
        mask = additive_mask(allowed[:, None, None, :], self.model.dtype)  # [B, 1, 1, width + steps - 1]
        next_position = real.sum(dim=1, keepdim=True)  # [B, 1]
        starts = torch.tensor([len(r.prefix) for r in rows], device=device)  # first sampled step of each row
        ends = starts + torch.tensor([r.limit for r in rows], device=device)  # [B] one past each row's last step
        end_tokens = torch.tensor(self.end_ids, device=device)
        forcing = int(starts.max())
        forced = torch.full((batch, forcing), -1, dtype=torch.long)  # [B, S] prefix ids, right-padded with -1
        for i, r in enumerate(rows):
            forced[i, : len(r.prefix)] = torch.tensor(r.prefix, dtype=torch.long)
        forced = forced.to(device)
        tokens = torch.full((batch, steps), self.pad_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((batch, steps), dtype=torch.float32, device=device)
        entropy_table = torch.zeros((batch, steps), dtype=torch.float32, device=device)
        batch_rows = torch.arange(batch, device=device)  # request row of each batch row
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        for step in range(steps):
            token, logprob, entropy = sample(logits, params, generator, forced[batch_rows, step] if step < forcing else None)
            tokens[batch_rows, step] = token
            logprobs[batch_rows, step] = logprob
            entropy_table[batch_rows, step] = entropy
            done |= (torch.isin(token, end_tokens) & (starts[batch_rows] <= step)) | (ends[batch_rows] <= step + 1)
            if step == steps - 1:
                break
            if (step + 1) % _CHECK_EVERY == 0:
                running = int((~done).sum())
                if running == 0:
                    break
                if running <= len(done) * 3 // 4:
                    keep = (~done).nonzero().squeeze(1)
                    cache.reorder_cache(keep)
                    mask, next_position, batch_rows, done, token = (
                        mask[keep], next_position[keep], batch_rows[keep], done[keep], token[keep]
                    )
            step_mask = mask[..., : width + step + 1]
            if decoder is not None:
                logits = decoder.step(token, step_mask, next_position, cache)
            else:
                logits = self._forward(token[:, None], step_mask, next_position, cache)
            next_position += 1
        return self._completions(tokens, logprobs, entropy_table, starts, ends)

    def _completions(
        self, tokens: torch.Tensor, logprobs: torch.Tensor, entropies: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor
    ) -> list[Completion]:
        """Split the step tables tokens/logprobs/entropies [B, T] into completions.

        Row ``i`` forced its prefix at steps ``[0, starts[i])`` (log-probs of the forced tokens) and
        sampled from ``starts[i]`` until its first end token or ``ends[i]``.
        """
        steps = torch.arange(tokens.shape[1], device=tokens.device)
        sampled = (steps >= starts[:, None]) & (steps < ends[:, None])
        is_eos = torch.isin(tokens, torch.tensor(self.end_ids, device=tokens.device)) & sampled
        finished = is_eos.any(dim=1)
        stops = torch.where(finished, is_eos.int().argmax(dim=1) + 1, ends)
        return [
            Completion(token_ids=t[s:e], logprobs=lp[s:e], finished=f, entropies=h[s:e], prefix_entropies=h[:s], prefix_logprobs=lp[:s])
            for t, lp, h, s, e, f in zip(
                tokens.tolist(), logprobs.tolist(), entropies.tolist(), starts.tolist(), stops.tolist(), finished.tolist()
            )
        ]


@ENGINES.register("hf", in_process=True, own_logprobs=True)
def build(build: EngineBuild) -> HFEngine:
    """The ``hf`` engine over the model object it is given (``engine.batch_size`` sequences decoded together)."""
    return HFEngine(build.model, build.end_ids, pad_id=build.pad_id, batch_size=build.cfg.batch_size, compute_dtype=build.compute_dtype)
