"""Padding-free forwards: the rows of a micro-batch packed into sequences without padding.

A padded batch runs ``rows x longest row`` tokens through the model; with DAPO's spread of response
lengths a third of them or more are padding. Here every row becomes real tokens only: its prompt but
the last token (the *context*) followed by its *continuation*, the last prompt token, then the
response tokens but the last. Continuation token ``j`` predicts response token ``j``, and positions
restart at 0 in every row, so each row sees exactly what it sees in the padded batch.

With ``share`` the rows of a micro-batch that have the same prompt share one *segment*: its context
once, then each row's continuation, every continuation attending to the context and to its own
earlier tokens only (the prompt's work falls by the rows per prompt, as in
:mod:`tsctl.models.shared_prompts`, with no cache). Without, every row is its own segment.

How attention stays within a row (:func:`packing_kind`):

- ``rows`` (``eager``/``sdpa`` attention): all segments in one sequence, so the linear layers run
  on real tokens only, and each layer's attention runs row by row on padded blocks
  (:mod:`tsctl.models.row_attention`), as cheap as the padded batch's;
- ``mask`` (the same attentions under activation checkpointing, which recomputes the layers after
  :mod:`~tsctl.models.row_attention`'s switch is undone): segments placed first-fit-decreasing into
  sequences of :data:`BIN_SCALE` longest segments, a block-diagonal causal 4D mask, a shared segment
  at most :data:`SEGMENT_ROWS` continuations (the mask's attention is dense: quadratic in length);
- ``varlen`` (``flash_attention_*``): the rows in one sequence, the position ids alone delimiting
  them (transformers' varlen path); rows do not share prompts there.

Other attention implementations, and rows reaching past a sliding window (the explicit masks have
none), keep the padded forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from tsctl.models.batch import RolloutBatch
from tsctl.models.padding import additive_mask
from tsctl.models.row_attention import ROW_ATTENTION, AttentionRows
from tsctl.models.shared_prompts import sliding_window

SEGMENT_ROWS = 3
"""Most continuations one shared segment holds: its attention is dense, so its cost grows with the square
of its length (on the built-in model on CPU, 3 ran fastest of 1, 2, 3, 4 and 8)."""

BIN_SCALE = 1.5
"""Capacity of a packed sequence, in longest segments: room to fill the sequences (a row is often more
than half the longest) without making the dense attention much longer (1.5 ran faster than 1 and 2)."""

CONTEXT = -1
"""Owner of a context token in :attr:`PackedBatch.owner`: every continuation of its segment sees it."""


@dataclass
class PackedBatch:
    """A micro-batch as P packed sequences of C tokens.

    Attributes:
        input_ids: [P, C] tokens (0 in the tail slots past a sequence's last segment).
        position_ids: [P, C] position of each token within its row (0 in tail slots).
        segment: [P, C] segment of each token, unique over the batch (-1 in tail slots).
        owner: [P, C] the row each continuation token belongs to; :data:`CONTEXT` on context tokens.
        predictors: [N] flat index into ``P * C`` of the token whose hidden state predicts each real
            response token, in the row-major order of the batch's ``resp_mask``.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment: torch.Tensor
    owner: torch.Tensor
    predictors: torch.Tensor

    @property
    def tokens(self) -> int:
        """Real tokens the packed forward runs."""
        return int((self.segment >= 0).sum())

    def allowed(self) -> torch.Tensor:
        """Which token may attend to which, [P, C, C] bool: earlier tokens of its segment that are context
        or its own row's, and itself (a tail slot sees only itself, so its softmax stays finite)."""
        width = self.input_ids.shape[1]
        causal = torch.ones(width, width, dtype=torch.bool, device=self.segment.device).tril()
        same = (self.segment[:, :, None] == self.segment[:, None, :]) & (self.segment[:, None, :] >= 0)
        visible = (self.owner[:, None, :] == CONTEXT) | (self.owner[:, :, None] == self.owner[:, None, :])
        return (causal & same & visible) | torch.eye(width, dtype=torch.bool, device=self.segment.device)


@dataclass
class _Segment:
    """One segment's tokens, positions and owners, and the rows whose continuations it holds."""

    tokens: list[int]
    positions: list[int]
    owners: list[int]
    rows: list[tuple[int, int]]  # (row, offset of its continuation in the segment)


def packing_kind(model: PreTrainedModel, longest: int, checkpointing: bool = False) -> str | None:
    """``"rows"``, ``"mask"``, ``"varlen"`` (see the module docstring) or None (padded): how a packed forward
    of rows of up to ``longest`` tokens runs on ``model`` (``checkpointing``: with activation checkpointing)."""
    attention = str(getattr(model.config, "_attn_implementation", "eager"))
    if attention.startswith("flash_attention"):
        return "varlen"
    window = sliding_window(model)
    if attention not in ("eager", "sdpa") or (window is not None and longest > window):
        return None
    return "mask" if checkpointing else "rows"


def pack_rows(batch: RolloutBatch, share: bool, kind: str = "rows") -> PackedBatch:
    """Pack ``batch`` for a forward of ``kind`` (see the module docstring); ``share``: rows with the same
    prompt share a segment (not under ``varlen``, whose attention sees whole segments)."""
    segments = _batch_segments(batch, share, kind)
    response_lengths = batch.resp_mask.sum(1)
    if kind == "mask":
        bins = _first_fit_decreasing([len(s.tokens) for s in segments])
    else:
        bins = [list(range(len(segments)))]
    width = max(sum(len(segments[s].tokens) for s in b) for b in bins)
    shape = (len(bins), width)
    input_ids = torch.zeros(shape, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    segment = torch.full(shape, -1, dtype=torch.long)
    owner = torch.full(shape, CONTEXT, dtype=torch.long)
    starts: dict[int, int] = {}
    for p, members in enumerate(bins):
        at = 0
        for s in members:
            seg, n = segments[s], len(segments[s].tokens)
            input_ids[p, at : at + n] = torch.tensor(seg.tokens, dtype=torch.long)
            position_ids[p, at : at + n] = torch.tensor(seg.positions, dtype=torch.long)
            owner[p, at : at + n] = torch.tensor(seg.owners, dtype=torch.long)
            segment[p, at : at + n] = s
            for row, offset in seg.rows:
                starts[row] = p * width + at + offset
            at += n
    predictors = torch.cat(
        [torch.arange(starts[row], starts[row] + n) for row, n in enumerate(response_lengths.tolist()) if n]
        or [torch.zeros(0, dtype=torch.long)]
    )
    device = batch.device
    return PackedBatch(input_ids.to(device), position_ids.to(device), segment.to(device), owner.to(device), predictors.to(device))


def _batch_segments(batch: RolloutBatch, share: bool, kind: str) -> list[_Segment]:
    """The segments :func:`pack_rows` lays out for ``batch``."""
    if share and kind == "varlen":
        raise ValueError("packed rows share prompts only under eager or sdpa attention, not FlashAttention's varlen path")
    response_lengths = batch.resp_mask.sum(1)
    prompt_lengths = (batch.attention_mask.sum(1) - response_lengths).tolist()
    rows = batch.input_ids.tolist()
    per_segment = (SEGMENT_ROWS if kind == "mask" else len(rows)) if share else 1
    return _segments(rows, prompt_lengths, response_lengths.tolist(), share, per_segment)


def _segments(
    rows: list[list[int]], prompt_lengths: list[int], response_lengths: list[int], share: bool, per_segment: int
) -> list[_Segment]:
    """The segments of the rows: one per row, or (``share``) one per run of up to ``per_segment`` rows with
    the same prompt. Rows with an empty response predict nothing and are left out."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for row, (p, r) in enumerate(zip(prompt_lengths, response_lengths)):
        if r:
            key = tuple(rows[row][:p]) if share else (row,)
            by_prompt.setdefault(key, []).append(row)
    return [
        _segment(rows, prompt_lengths, response_lengths, members[start : start + per_segment])
        for members in by_prompt.values() for start in range(0, len(members), per_segment)
    ]


def _segment(rows: list[list[int]], prompt_lengths: list[int], response_lengths: list[int], members: list[int]) -> _Segment:
    """A segment of ``members``, rows with the same prompt: the context once, then each row's continuation."""
    first = members[0]
    context = prompt_lengths[first] - 1
    seg = _Segment(rows[first][:context], list(range(context)), [CONTEXT] * context, [])
    for row in members:
        r = response_lengths[row]
        seg.rows.append((row, len(seg.tokens)))
        seg.tokens += rows[row][context : context + r]
        seg.positions += list(range(context, context + r))
        seg.owners += [row] * r
    return seg


def _first_fit_decreasing(sizes: list[int]) -> list[list[int]]:
    """Indices of ``sizes`` in bins of :data:`BIN_SCALE` times the largest size, first fit, largest first."""
    capacity = int(max(sizes) * BIN_SCALE)
    bins: list[list[int]] = []
    room: list[int] = []
    for item in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        place = next((b for b, free in enumerate(room) if free >= sizes[item]), None)
        if place is None:
            bins.append([])
            room.append(capacity)
            place = len(bins) - 1
        bins[place].append(item)
        room[place] -= sizes[item]
    return bins


def packed_hidden(model: PreTrainedModel, packed: PackedBatch, kind: str) -> torch.Tensor:
    """Final hidden states [N, d] that predict each real response token (order of :attr:`PackedBatch.predictors`),
    from a forward of ``kind`` (:func:`packing_kind`)."""
    decoder = model.get_decoder()
    # No cache: with none, transformers reads packed sequences from the position ids (the varlen path).
    inputs = {"input_ids": packed.input_ids, "position_ids": packed.position_ids, "use_cache": False}
    if kind == "mask":
        hidden = decoder(**inputs, attention_mask=additive_mask(packed.allowed()[:, None], model.dtype)).last_hidden_state  # mask [P, 1, C, C]
    elif kind == "varlen":
        hidden = decoder(**inputs).last_hidden_state
    else:
        config = model.config
        rows = attention_rows(packed, config._attn_implementation)
        config._attn_implementation = ROW_ATTENTION
        try:
            hidden = decoder(**inputs, attention_rows=rows).last_hidden_state
        finally:
            config._attn_implementation = rows.inner
    return hidden.reshape(-1, hidden.shape[-1])[packed.predictors]


def attention_rows(packed: PackedBatch, inner: str) -> AttentionRows:
    """The attention rows of a one-sequence packed batch: each context over itself, each continuation over
    its segment's context and itself (:class:`~tsctl.models.row_attention.AttentionRows`)."""
    segment, owner = packed.segment[0].tolist(), packed.owner[0].tolist()
    contexts: dict[int, list[int]] = {}
    continuations: dict[int, list[int]] = {}
    for n, (s, o) in enumerate(zip(segment, owner)):
        (contexts.setdefault(s, []) if o == CONTEXT else continuations.setdefault(o, [])).append(n)
    rows = [(c, c, 0) for c in contexts.values()]
    rows += [(q, contexts.get(segment[q[0]], []) + q, len(contexts.get(segment[q[0]], []))) for q in continuations.values()]
    return AttentionRows.build(rows, len(segment), inner, packed.segment.device)
