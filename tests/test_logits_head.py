"""The trainer's LM head reproduces each model's own logits post-processing, or refuses the model."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    CohereConfig,
    CohereForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GraniteConfig,
    GraniteForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
)

from tsctl.models.batch import collate
from tsctl.models.loading import ModelLoadError
from tsctl.models.logits import known_head, logits_head
from tsctl.models.logprobs import response_logprobs
from tsctl.models.samples import Sample
from tsctl.models.shared_prompts import can_share_prompts

COMMON = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
    vocab_size=40, max_position_embeddings=128, pad_token_id=0, eos_token_id=2, bos_token_id=1,
)
# Post-processing strong enough to move log-probs by far more than the 1e-5 tolerance.
MODELS = {
    "gemma2": (Gemma2ForCausalLM, lambda: Gemma2Config(head_dim=8, final_logit_softcapping=0.5, **COMMON), "eager"),
    "gemma3": (Gemma3ForCausalLM, lambda: Gemma3TextConfig(head_dim=8, final_logit_softcapping=0.5, **COMMON), "sdpa"),
    "cohere": (CohereForCausalLM, lambda: CohereConfig(logit_scale=3.0, **COMMON), "sdpa"),
    "granite": (GraniteForCausalLM, lambda: GraniteConfig(logits_scaling=0.25, **COMMON), "sdpa"),
}


def sample(prompt: list[int], generated: list[int]) -> Sample:
    return Sample(group=0, prompt_id="p", prompt_ids=prompt, generated_ids=generated, generated_logprobs=[0.0] * len(generated), finished=True)


SAMPLES = [sample([5, 6, 7], [8, 9, 10]), sample([5, 6, 7], [11]), sample([3, 4], [12, 13, 14, 15])]


def own_forward_logprobs(model, s: Sample) -> torch.Tensor:
    """Log-softmax of the model's own forward at the positions predicting ``s``'s response tokens."""
    ids = torch.tensor([s.prompt_ids + s.response_ids])
    logits = model(input_ids=ids).logits.float().log_softmax(-1)[0, len(s.prompt_ids) - 1 : -1]
    return logits.gather(1, torch.tensor(s.response_ids)[:, None])[:, 0]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("share_prompts", [True, False])
def test_trainer_logprobs_equal_the_models_own_forward(name, share_prompts):
    model_class, config, attention = MODELS[name]
    torch.manual_seed(0)
    model = model_class._from_config(config(), attn_implementation=attention).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(30)  # random-init logits are tiny: make them O(1)
    batch = collate(SAMPLES, torch.zeros(len(SAMPLES)), 0)
    with torch.no_grad():
        logprobs, _ = response_logprobs(model, batch, share_prompts=share_prompts)
        plain = model.get_output_embeddings()(model.get_decoder()(input_ids=batch.input_ids[:1, :6]).last_hidden_state)
        for row, s in enumerate(SAMPLES):
            expected = own_forward_logprobs(model, s)
            torch.testing.assert_close(logprobs[row, : len(s.response_ids)], expected, atol=1e-5, rtol=0)
        # Without the post-processing the log-probs would be far off: the head really changes something.
        unprocessed = plain.float().log_softmax(-1)[0, 2:5].gather(1, torch.tensor([[8], [9], [10]]))[:, 0]
        assert (unprocessed - own_forward_logprobs(model, SAMPLES[0])).abs().max() > 1e-2
    assert known_head(model).describe() != "none"


class ScaledLlama(LlamaForCausalLM):
    """A model whose forward doubles its logits after the LM head: post-processing tsctl does not know."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 2
        return out


def test_a_model_with_unknown_logits_post_processing_is_refused():
    torch.manual_seed(0)
    model = ScaledLlama(LlamaConfig(**COMMON))
    with pytest.raises(ModelLoadError, match="ScaledLlama post-processes its logits .* handles final_logit_softcapping"):
        logits_head(model)
    torch.manual_seed(0)
    plain = LlamaForCausalLM(LlamaConfig(**COMMON))
    assert logits_head(plain).describe() == "none"  # a plain Llama passes the check


def test_prompts_are_not_shared_past_a_sliding_window():
    torch.manual_seed(0)
    model = Gemma3ForCausalLM._from_config(Gemma3TextConfig(head_dim=8, sliding_window=6, **COMMON), attn_implementation="sdpa")
    prompts = [(5, 6, 7), (3, 4)]
    assert can_share_prompts(model, prompts, rows=4, longest=6)
    assert not can_share_prompts(model, prompts, rows=4, longest=7)
    # Rows longer than the window run whole, where the model applies its own window: still exact.
    long_samples = [sample([5, 6, 7], [8, 9, 10, 11, 12, 13]), sample([5, 6, 7], [14])]
    with torch.no_grad():
        logprobs, _ = response_logprobs(model.eval(), collate(long_samples, torch.zeros(2), 0))
        torch.testing.assert_close(logprobs[0], own_forward_logprobs(model, long_samples[0]), atol=1e-5, rtol=0)
