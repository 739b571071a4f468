"""LoRA through peft (``model.lora``): a new adapter is the base model, only the adapter trains, the reference is the
base with the adapter off, the adapter folder loads back merged with the same log-probs, and bad settings are refused
in one line. Against the real peft, on a tiny Llama in float32."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from tsctl.config.errors import ConfigError
from tsctl.config.schema import LoraConfig, TsctlConfig
from tsctl.engines.base import Request, SamplingParams
from tsctl.engines.fused_decode import FusedDecoder
from tsctl.engines.hf import HFEngine
from tsctl.engines.vllm_lora import vllm_rank
from tsctl.io.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_file_tensors, has_adapter, save_weights
from tsctl.models.batch import collate
from tsctl.models.forward import Forward
from tsctl.models.loading import ModelLoadError, load_model
from tsctl.models.logprobs import enable_activation_checkpointing
from tsctl.models.lora import FAMILY_TARGETS, adapter_off, adapter_state, add_adapter, load_adapter_weights, trainable_parameters
from tsctl.models.samples import Sample
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.runconfig import compose_config
from tsctl.trainer.optim import make_optimizer
from tsctl.trainer.reference import load_reference, reference_logprobs
from update_context import update, update_context

SETTINGS = LoraConfig(rank=4, alpha=8.0)


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=40, max_position_embeddings=128, pad_token_id=0, eos_token_id=2, bos_token_id=1,
    )
    return LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()


def batch():
    """Six samples over three prompts, responses of 1 to 4 tokens."""
    samples = [
        Sample(group=i % 3, prompt_id=f"p{i % 3}", prompt_ids=[3 + i % 3, 7, 9], generated_ids=[10 + (i * 7 + j) % 25 for j in range(1 + i % 4)],
               generated_logprobs=[0.0] * (1 + i % 4), finished=True)
        for i in range(6)
    ]
    return collate(samples, torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0]), 0, "cpu")


def logprobs(model, rows, padding_free: bool = False) -> torch.Tensor:
    return Forward(padding_free=padding_free).recompute(model, rows, entropy=False)[0]


def trained_adapter(model) -> None:
    """Give every ``lora_B`` (zero when new) random values, as training would."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)


def adapted_model(base: str = "base-folder") -> LlamaForCausalLM:
    """The tiny model with an adapter whose every ``B`` is random (as after training)."""
    policy = tiny_model()
    add_adapter(policy, SETTINGS, base, seed=0)
    trained_adapter(policy)
    return policy


def test_a_new_adapter_is_the_base_model_and_draws_from_its_own_seed_only():
    base = tiny_model()
    rows = batch()
    before = logprobs(base, rows)
    rng = torch.get_rng_state()
    policy = tiny_model()
    add_adapter(policy, SETTINGS, "base-folder", seed=7)
    assert torch.equal(torch.get_rng_state(), rng)  # the run's random streams are untouched
    assert torch.equal(logprobs(policy, rows), before)  # B = 0: exactly the base
    again = tiny_model()
    add_adapter(again, SETTINGS, "base-folder", seed=7)
    assert all(torch.equal(a, b) for a, b in zip(adapter_state(policy).values(), adapter_state(again).values()))
    trainable = {name for name, p in policy.named_parameters() if p.requires_grad}
    adapted = {name.split(".lora_")[0].rsplit(".", 1)[1] for name in trainable}
    assert adapted == set(FAMILY_TARGETS["llama"]) and all(".lora_" in name for name in trainable)
    assert len(trainable) == 2 * 7 * 2  # A and B, 7 projections, 2 layers
    assert [id(p) for p in trainable_parameters(policy)] == [id(p) for n, p in policy.named_parameters() if n in trainable]


def test_the_adapter_off_is_the_base_and_on_again_afterwards():
    rows = batch()
    base = logprobs(tiny_model(), rows)
    policy = adapted_model()
    adapted = logprobs(policy, rows)
    assert (adapted - base).abs().max() > 1e-2
    with adapter_off(policy):
        assert torch.equal(logprobs(policy, rows), base)
    assert torch.equal(logprobs(policy, rows), adapted)
    assert all(p.requires_grad == (".lora_" in n) for n, p in policy.named_parameters())


@pytest.mark.parametrize("padding_free", [False, True])
def test_the_saved_adapter_loads_merged_with_the_adapters_log_probs(tmp_path, padding_free):
    tokenizer = build_char_tokenizer()
    base = tiny_model()
    base.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    policy = adapted_model(str(tmp_path / "base"))
    save_weights(policy, tmp_path / "adapter")
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir()) == [ADAPTER_CONFIG, ADAPTER_WEIGHTS]
    assert json.loads((tmp_path / "adapter" / ADAPTER_CONFIG).read_text())["base_model_name_or_path"] == str(tmp_path / "base")
    merged, _ = load_model(tmp_path / "adapter", device="cpu")
    assert not has_adapter(merged) and type(merged.model.layers[0].self_attn.q_proj) is torch.nn.Linear
    rows = batch()
    assert (logprobs(merged, rows, padding_free) - logprobs(policy, rows, padding_free)).abs().max() < 1e-5
    again = tiny_model()
    add_adapter(again, SETTINGS, str(tmp_path / "base"), seed=3)
    load_adapter_weights(again, tmp_path / "adapter")
    assert torch.equal(logprobs(again, rows, padding_free), logprobs(policy, rows, padding_free))


def test_an_adapter_whose_weights_name_other_modules_is_refused_in_one_line(tmp_path):
    base = tiny_model()
    base.save_pretrained(tmp_path / "base")
    build_char_tokenizer().save_pretrained(tmp_path / "base")
    policy = tiny_model()
    add_adapter(policy, LoraConfig(rank=2, target_modules=["q_proj"]), str(tmp_path / "base"), seed=0)
    save_weights(policy, tmp_path / "adapter")
    weights = load_file(tmp_path / "adapter" / ADAPTER_WEIGHTS)
    save_file({k.replace("q_proj", "v_proj"): v for k, v in weights.items()}, tmp_path / "adapter" / ADAPTER_WEIGHTS)
    with pytest.raises(ModelLoadError, match="does not match its base model") as err:
        load_model(tmp_path / "adapter", device="cpu")
    assert "\n" not in str(err.value)
    (tmp_path / "base" / "config.json").unlink()
    with pytest.raises(ModelLoadError, match="is a LoRA adapter of the base model"):
        load_model(tmp_path / "adapter", device="cpu")


def test_the_update_steps_the_adapter_only_and_the_kl_reference_is_the_base():
    cfg = TsctlConfig()
    cfg.engine.temperature = 1.0
    cfg.trainer.lr, cfg.trainer.max_grad_norm, cfg.algo.kl_coef = 1e-2, 0.0, 0.1
    policy = adapted_model()
    base = {k: v.clone() for k, v in policy.state_dict().items() if ".lora_" not in k}
    lora = adapter_state(policy)
    optimizer, scheduler = make_optimizer(cfg, policy)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(lora)
    ref_model = load_reference(cfg, "base-folder", policy)
    assert ref_model is policy  # no second copy
    rows = batch()
    ref = reference_logprobs(ref_model, rows, Forward(), cfg.algo.ref_placement)
    assert torch.equal(ref, logprobs(tiny_model(), rows))  # the base model's log-probs
    update(update_context(cfg, policy, optimizer, scheduler), rows, logprobs(policy, rows), ref)
    after = policy.state_dict()
    assert all(torch.equal(after[k], v) for k, v in base.items())  # the base weights, bit for bit
    moved = adapter_state(policy)
    assert all(not torch.equal(moved[k], v) for k, v in lora.items() if "lora_B" in k)


@pytest.mark.parametrize(("override", "key"), [
    ("model.lora.rank=-1", "model.lora.rank"),
    ("model.lora.alpha=0", "model.lora.alpha"),
    ("model.lora.dropout=1.0", "model.lora.dropout"),
    ("model.lora.target_modules=[]", "model.lora.target_modules"),
    ("model.lora.target_modules=[model.layers.0.q_proj]", "model.lora.target_modules"),
])
def test_bad_lora_settings_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        compose_config(["model.lora.rank=4", override])
    assert err.value.key == key and "\n" not in str(err.value)


@pytest.mark.parametrize(("overrides", "key"), [
    (["model.lora.alpha=32"], "model.lora.alpha"),
    (["model.lora.target_modules=[q_proj]"], "model.lora.target_modules"),
    (["model.lora.rank=8", "algo.kl_coef=0.1", "algo.ref_placement=cpu"], "algo.ref_placement"),
])
def test_lora_settings_that_cannot_take_effect_are_refused(overrides, key):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, idle=True)
    assert err.value.key == key and "cannot take effect" in str(err.value)


def test_the_vllm_engine_takes_a_lora_policy_up_to_vllms_largest_rank_and_refuses_a_larger_one_in_one_line():
    assert compose_config(["model.lora.rank=512", "engine=vllm"]).cfg.model.lora.rank == 512
    with pytest.raises(ConfigError) as err:
        compose_config(["model.lora.rank=513", "engine=vllm"])
    assert err.value.key == "model.lora.rank" and "largest LoRA rank vLLM serves (512)" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("rank", "served"), [(1, 1), (2, 8), (8, 8), (9, 16), (300, 320), (512, 512)])
def test_vllm_serves_an_adapter_in_the_smallest_of_its_ranks_that_holds_it(rank, served):
    assert vllm_rank(rank) == served


def test_a_models_state_dict_gives_the_adapter_files_tensors_under_the_files_keys(tmp_path):
    model = tiny_model()
    add_adapter(model, SETTINGS, "base-folder", seed=0)
    trained_adapter(model)
    save_weights(model, tmp_path)
    saved = load_file(str(tmp_path / ADAPTER_WEIGHTS))
    tensors = adapter_file_tensors(model.state_dict())
    assert tensors.keys() == saved.keys() and len(saved) == 2 * 7 * 2  # lora_A and lora_B of 7 projections in 2 layers
    assert all(torch.equal(tensors[k], saved[k]) for k in saved)


def test_target_modules_that_match_nothing_are_refused_naming_the_key():
    with pytest.raises(ConfigError) as err:
        add_adapter(tiny_model(), LoraConfig(rank=2, target_modules=["qkv"]), "base-folder", seed=0)
    assert err.value.key == "model.lora.target_modules" and "\n" not in str(err.value)


def test_the_hf_engine_decodes_a_lora_policy_through_the_fused_step_with_the_adapters_log_probs(monkeypatch):
    policy = adapted_model()
    assert FusedDecoder.for_model(policy) is not None
    calls = []
    step = FusedDecoder.step
    monkeypatch.setattr(FusedDecoder, "step", lambda self, *args: calls.append(1) or step(self, *args))
    requests = [Request([5, 9, 11]), Request([7, 3, 8, 21], (4, 6))]
    completions = HFEngine(policy, 2, 0).generate(requests, SamplingParams(temperature=1.0, max_new_tokens=6, seed=3))
    assert calls
    for request, completion in zip(requests, completions):
        context = list(request.prompt_ids) + list(request.prefix_ids)
        with torch.no_grad():
            logits = policy(torch.tensor([context + completion.token_ids])).logits[0, len(context) - 1 : -1]
            with adapter_off(policy):
                base = policy(torch.tensor([context + completion.token_ids])).logits[0, len(context) - 1 : -1]
        expected = logits.log_softmax(-1).gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        unadapted = base.log_softmax(-1).gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=0)
        assert (unadapted - expected).abs().max() > 1e-2  # the adapter's weights were applied, not the base's alone


def test_activation_checkpointing_trains_the_adapter_as_without_it():
    cfg = TsctlConfig()
    cfg.engine.temperature = 1.0
    cfg.trainer.lr, cfg.trainer.max_grad_norm = 1e-2, 0.0
    adapters = []
    for checkpointing in (False, True):
        policy = adapted_model()
        if checkpointing:
            enable_activation_checkpointing(policy)
        optimizer, scheduler = make_optimizer(cfg, policy)
        rows = batch()
        update(update_context(cfg, policy, optimizer, scheduler), rows, logprobs(policy, rows))
        adapters.append(adapter_state(policy))
    plain, checkpointed = adapters
    assert any(not torch.equal(v, adapter_state(adapted_model())[k]) for k, v in plain.items())  # it trained
    for key, value in plain.items():
        torch.testing.assert_close(checkpointed[key], value, atol=1e-6, rtol=0)
