"""Padding-free packed forwards: the same log-probs, entropies, losses, gradients and run metrics as padded rows."""

from __future__ import annotations

import pytest
import torch
from conftest import stable_metrics
from test_shared_prompts import PAD, tiny_model

from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import collate, pi_b_on_prefix
from tsctl.models.forward import Forward
from tsctl.models.logprobs import enable_activation_checkpointing, response_logprobs, token_stats
from tsctl.models.micro_batches import micro_batches
from tsctl.models.packing import CONTEXT, attention_rows, pack_rows, packed_hidden, packing_kind
from tsctl.models.samples import Sample
from tsctl.runconfig import compose_config
from update_context import update as update_step
from update_context import update_context

TOL = 1e-5


def sample(group: int, prompt: list[int], generated: list[int], prefix: list[int] = ()) -> Sample:
    return Sample(
        group=group, prompt_id=f"p{group}", prompt_ids=list(prompt), generated_ids=list(generated),
        generated_logprobs=[-0.5] * len(generated), finished=True, prefix_ids=list(prefix),
        prefix_logprobs=[-1.0] * len(prefix),
    )


# Three prompts of different lengths (one of a single token), rows of mixed response lengths, two seeded.
BATCH = [
    sample(0, [5, 6, 7], [8, 9, 10, 11]), sample(0, [5, 6, 7], [12]), sample(0, [5, 6, 7], [13, 14], prefix=[15, 16]),
    sample(0, [5, 6, 7], [17, 18, 19]), sample(0, [5, 6, 7], [20, 21, 22, 23, 24, 25, 26]),
    sample(1, [20, 21, 22, 23, 24, 25], [26, 27, 28]), sample(1, [20, 21, 22, 23, 24, 25], [29, 30, 31, 32, 33, 34]),
    sample(2, [3], [35, 36], prefix=[37]), sample(2, [3], [38]), sample(2, [3], [38, 39, 9, 10, 11]),
]


def batch_of(samples: list[Sample]):
    return collate(samples, torch.linspace(-1, 1, len(samples)), PAD)


def logprobs_and_grads(model, batch, **kwargs):
    """Log-probs [B, T], entropies [B, T] and the gradients of a loss that reads both on the real tokens."""
    model.zero_grad()
    logprobs, entropy = response_logprobs(model, batch, temperature=0.7, with_entropy=True, **kwargs)
    weights = torch.linspace(0.5, 1.5, logprobs.numel()).view_as(logprobs)
    ((logprobs * weights + entropy) * batch.resp_mask).sum().backward()
    return logprobs.detach(), entropy.detach(), [p.grad.clone() for p in model.parameters()]


def assert_same(padded, packed, mask) -> None:
    torch.testing.assert_close(packed[0][mask], padded[0][mask], rtol=0, atol=TOL)
    torch.testing.assert_close(packed[1][mask], padded[1][mask], rtol=0, atol=TOL)
    for a, b in zip(padded[2], packed[2]):
        torch.testing.assert_close(b, a, rtol=0, atol=TOL)


@pytest.mark.parametrize("attention, family", [("sdpa", "llama"), ("eager", "llama"), ("sdpa", "qwen2")])
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["rows", "mask"])
def test_packed_rows_give_the_padded_logprobs_entropies_and_gradients(attention, family, share, checkpointing):
    model = tiny_model(attention, family).train()
    if checkpointing:  # the packed forward then takes a block-diagonal mask
        enable_activation_checkpointing(model)
    batch = batch_of(BATCH)
    padded = logprobs_and_grads(model, batch, share_prompts=False)
    packed = logprobs_and_grads(model, batch, share_prompts=share, padding_free=True)
    assert_same(padded, packed, batch.resp_mask)
    assert (packed[0][~batch.resp_mask] == 0).all() and (packed[1][~batch.resp_mask] == 0).all()
    assert model.config._attn_implementation == attention  # switched back after the row-by-row forward


def test_the_varlen_layout_delimits_rows_by_positions_alone():
    """FlashAttention's path: one sequence, no mask; transformers then confines attention by the position ids."""
    model = tiny_model().eval()
    batch = batch_of(BATCH)
    packed = pack_rows(batch, share=False, kind="varlen")
    assert packed.input_ids.shape == (1, int(batch.attention_mask.sum() - len(batch)))
    with torch.no_grad():
        hidden = packed_hidden(model, packed, "varlen")
        padded = model.get_decoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    expected = torch.gather(padded, 1, batch.resp_index.unsqueeze(-1).expand(-1, -1, padded.shape[-1]))[batch.resp_mask]
    torch.testing.assert_close(hidden, expected, rtol=0, atol=TOL)


def test_positions_restart_per_row_and_shared_segments_hold_the_context_once():
    batch = batch_of(BATCH)
    alone = pack_rows(batch, share=False, kind="mask")
    assert alone.tokens == int(batch.attention_mask.sum()) - len(batch)  # every row but its last token
    real = alone.segment >= 0
    starts = alone.position_ids[real] == 0
    assert int(starts.sum()) == len(batch)  # one start per row
    shared = pack_rows(batch, share=True, kind="mask")
    # group 0: 5 rows in segments of 3 and 2 (context [5, 6] twice); group 1: a context of 5 once; group 2: none
    assert shared.tokens == (2 + 4 + 1 + 4) + (2 + 3 + 7) + (5 + 3 + 6) + (0 + 3 + 1 + 5)
    assert set(shared.owner[shared.segment >= 0].tolist()) == {CONTEXT, *range(len(batch))}
    allowed = shared.allowed()
    p, c = (shared.owner == 0).nonzero()[0].tolist()  # row 0's first continuation token
    sees = allowed[p, c].nonzero().flatten().tolist()
    assert [shared.owner[p, k].item() for k in sees] == [CONTEXT, CONTEXT, 0]  # its context and itself, no other row


def test_attention_rows_see_their_context_and_their_own_earlier_tokens():
    batch = batch_of(BATCH)
    packed = pack_rows(batch, share=True)
    assert packed.input_ids.shape == (1, packed.tokens) and packed.tokens == (2 + 4 + 1 + 4 + 3 + 7) + (5 + 3 + 6) + (0 + 3 + 1 + 5)
    rows = attention_rows(packed, "sdpa")
    assert sum(len(b.queries) for b in rows.blocks) == 2 + len(batch)  # two contexts (the one-token prompt has none), every row
    queries = torch.cat([b.queries.flatten() for b in rows.blocks])
    assert (queries[rows.slots] == torch.arange(packed.tokens)).all()  # every token's output comes back
    last = int((packed.owner[0] == 0).nonzero()[-1])  # row 0's last token: context [5, 6], then its 4 tokens
    for block in rows.blocks:
        at = (block.queries == last).nonzero()
        if len(at):
            (a, i), = at.tolist()
            assert packed.input_ids[0, block.keys[a][block.allowed[a, i]]].tolist() == [5, 6, 7, 8, 9, 10]


def test_the_packed_token_budget_counts_real_tokens():
    lengths = [10, 3, 7, 4, 12]
    chunks = micro_batches(torch.arange(5), lengths, max_tokens=14, packed=True)
    assert [c.tolist() for c in chunks] == [[0, 1], [2, 3], [4]]
    assert [c.tolist() for c in micro_batches(torch.arange(5), lengths, max_rows=1, max_tokens=100, packed=True)] == [[i] for i in range(5)]
    assert [c.tolist() for c in micro_batches(torch.arange(5), lengths, max_tokens=14)] == [[4], [0], [2, 3], [1]]  # padded: rows x longest


def test_the_forward_counts_the_packed_segments():
    model = tiny_model()
    batch = batch_of(BATCH)
    assert token_stats(model, batch, share_prompts=False, padding_free=True).tokens == pack_rows(batch, share=False).tokens
    assert token_stats(model, batch, share_prompts=True, padding_free=True).tokens == pack_rows(batch, share=True).tokens


def test_what_each_attention_runs():
    model = tiny_model()
    assert packing_kind(model, 100) == "rows" and packing_kind(model, 100, checkpointing=True) == "mask"
    model.config._attn_implementation = "flash_attention_2"
    assert packing_kind(model, 100) == "varlen"
    model.config._attn_implementation = "flex_attention"
    assert packing_kind(model, 100) is None
    model.config._attn_implementation, model.config.sliding_window = "sdpa", 8
    model.config.use_sliding_window = True
    assert packing_kind(model, 8) == "rows" and packing_kind(model, 9) is None  # past the window: padded rows


def test_recompute_packed_equals_padded_with_a_token_budget():
    model = tiny_model().eval()
    batch = batch_of(BATCH)
    padded = Forward(0.7, micro_batch_tokens=40).recompute(model, batch)
    packed = Forward(0.7, micro_batch_tokens=40, padding_free=True).recompute(model, batch)
    mask = batch.resp_mask
    for a, b in zip(padded, packed):
        torch.testing.assert_close(b[mask], a[mask], rtol=0, atol=TOL)


class RecordingSGD(torch.optim.SGD):
    """SGD that keeps a copy of the gradients of every step it takes."""

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, lr=lr)
        self.grads: list[list[torch.Tensor]] = []

    def step(self, closure=None):
        self.grads.append([p.grad.clone() for g in self.param_groups for p in g["params"]])
        return super().step(closure)


def update(packed: bool, micro_tokens: int, kl: bool):
    """One policy update of :data:`BATCH` (two mini-batches, entropy bonus, KL and dual clip): its metrics and gradients."""
    model = tiny_model().train()
    batch = batch_of(BATCH)
    cfg = TsctlConfig()
    cfg.engine.temperature = 0.7
    cfg.trainer.mini_batches, cfg.trainer.max_grad_norm = 2, 0.0
    cfg.trainer.micro_batch_tokens, cfg.trainer.pack = micro_tokens, packed
    cfg.algo.entropy_coef, cfg.algo.clip_c = 0.01, 3.0
    cfg.algo.kl_coef = 0.1 if kl else 0.0
    cfg.ratio = 25  # seeded: prefix tokens get their dual clip
    with torch.no_grad():
        old = pi_b_on_prefix(Forward(0.7).recompute(model, batch)[0] - 0.05 * torch.linspace(-1, 1, batch.resp_mask.numel()).view_as(batch.resp_mask), batch)
    ref = old - 0.1 if kl else None
    optimizer = RecordingSGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    metrics = update_step(update_context(cfg, model, optimizer, scheduler), batch, old, ref)
    return metrics.means(), optimizer.grads


@pytest.mark.parametrize("micro_tokens, kl", [(0, True), (30, False)])
def test_packed_update_gives_the_padded_loss_gradients_and_metrics(micro_tokens, kl):
    padded_metrics, padded_grads = update(False, micro_tokens, kl)
    packed_metrics, packed_grads = update(True, micro_tokens, kl)
    assert len(padded_grads) == len(packed_grads) == 2
    for a, b in zip(padded_grads, packed_grads):
        for x, y in zip(a, b):
            torch.testing.assert_close(y, x, rtol=0, atol=TOL)
    assert padded_metrics.keys() == packed_metrics.keys()
    for key, value in padded_metrics.items():
        if key != "forward_token_share":  # what the forward runs: fewer tokens packed
            assert packed_metrics[key] == pytest.approx(value, abs=TOL), key
    assert packed_metrics["forward_token_share"] < padded_metrics["forward_token_share"]


def test_a_packed_micro_run_logs_the_padded_run_metrics(micro, tmp_path):
    from tsctl.stages.train import train

    runs = {}
    for packed in ("false", "true"):
        train(compose_config([*micro, f"name=pack-{packed}", "trainer.steps=2", "trainer.eval_every=2", f"trainer.pack={packed}"]))
        runs[packed] = stable_metrics(tmp_path / "runs" / "default" / f"pack-{packed}")
    padded, packed = runs["false"], runs["true"]
    assert [r["step"] for r in padded] == [r["step"] for r in packed] == [0, 1, 2]
    for a, b in zip(padded, packed):
        assert a.keys() == b.keys()
        for key in a:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (a["step"], key, a[key], b[key])
