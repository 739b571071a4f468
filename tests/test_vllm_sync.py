"""Weight sync to vLLM and the engine's call order with sleep mode, against the stand-in for CUDA-only vLLM.

Checked: names are the model folder's, tensors are cast to the engine's dtype whatever the trainer
keeps, a tied ``lm_head`` is sent once, buckets bound the extra memory without splitting a layer,
tensor-parallel workers receive only IPC handles (never tensors through the host), and a train step
and an evaluation sleep, load, reset the prefix cache and wake in order. Loads into real vLLM are
checked in tests/test_vllm_engine_real.py.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fakes import vllm as fake_vllm
from fakes.qwen import save_qwen_folder
from tsctl.config.compose import Composed
from tsctl.engines import vllm_weights
from tsctl.engines.factory import build_engine
from tsctl.models.prompts import PromptFormatter
from tsctl.runconfig import compose_config
from tsctl.stages.eval import evaluate
from tsctl.tasks.registry import build_task
from tsctl.trainer.context import StepContext
from tsctl.trainer.learner import Learner
from tsctl.trainer.parallel import Parallel
from tsctl.trainer.rollout import Sampler
from tsctl.trainer.step import train_step

IM_END = 258
TASK = ["task=arithmetic", "task.train_size=200", "task.heldout_size=6", "task.arithmetic.max_terms=3"]

pytestmark = pytest.mark.usefixtures("process_state_put_back")  # an engine sets vLLM's logging and environment for its process


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_qwen_folder(tmp_path_factory.mktemp("qwen"))


def load(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model, PromptFormatter(AutoTokenizer.from_pretrained(folder), True, model.generation_config)


def engine_for(monkeypatch, folder, model, formatter, *overrides: str):
    fake_vllm.install(monkeypatch, fake_vllm.end_after(lambda prompt: len(prompt) % 6, end=IM_END))
    cfg = compose_config(["engine=vllm", *overrides]).cfg
    return build_engine(cfg.engine, model, formatter.end_ids, formatter.pad_id, str(folder), seed=cfg.seed)


def perturbed(model, scale: float = 0.01):
    """Change every weight by a few bf16 steps so a load that is skipped or stale shows."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))
    return model


def test_names_lose_wrapper_segments():
    assert vllm_weights.checkpoint_name("_orig_mod.model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    assert vllm_weights.checkpoint_name("lm_head.weight") == "lm_head.weight"


def test_engine_weights_cast_and_send_tied_storage_once():
    shared = torch.randn(4, 3)
    state = {"model.embed_tokens.weight": shared, "model.norm.weight": torch.ones(3, dtype=torch.float64), "lm_head.weight": shared}
    out = list(vllm_weights.engine_weights(state, torch.bfloat16))
    assert [name for name, _ in out] == ["model.embed_tokens.weight", "model.norm.weight"]
    assert all(t.dtype == torch.bfloat16 for _, t in out) and torch.equal(out[0][1], shared.to(torch.bfloat16))
    with pytest.raises(TypeError, match="floating-point"):
        list(vllm_weights.engine_weights({"step": torch.tensor([3])}, torch.bfloat16))


def test_buckets_hold_at_most_their_size_and_pack_round_trips_exactly():
    weights = [(f"w{i}", torch.randn(n).to(torch.bfloat16)) for i, n in enumerate([10, 20, 5, 40, 3])]
    groups = list(vllm_weights.buckets(weights, bucket_bytes=60))  # bf16: 2 bytes per element
    assert [[name for name, _ in g] for g in groups] == [["w0", "w1"], ["w2"], ["w3"], ["w4"]]  # 40 elements alone exceed it
    flat, specs = vllm_weights.flatten_bucket([(n, t.view(-1, 5) if t.numel() % 5 == 0 else t) for n, t in weights])
    assert flat.shape == (78,) and [s.offset for s in specs] == [0, 10, 30, 35, 75]
    for (name, tensor), (back_name, back) in zip(weights, vllm_weights.unflatten_bucket(flat, specs)):
        assert back_name == name and torch.equal(back.reshape(-1), tensor) and back.data_ptr() >= flat.data_ptr()


def test_buckets_never_split_a_decoder_layer():
    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
             "model.layers.0.mlp.up_proj.weight", "model.layers.1.self_attn.q_proj.weight", "model.layers.10.mlp.up_proj.weight", "model.norm.weight"]
    weights = [(name, torch.zeros(10, dtype=torch.bfloat16)) for name in names]  # 20 bytes each
    groups = [[name for name, _ in g] for g in vllm_weights.buckets(weights, bucket_bytes=50)]
    assert groups == [names[:1], names[1:4], names[4:6], names[6:]]  # layer 0 (60 bytes) goes whole and alone
    assert vllm_weights.layer_of("model.layers.10.mlp.up_proj.weight") == "model.layers.10"
    assert vllm_weights.layer_of("lm_head.weight") == "lm_head.weight"


def test_tensor_parallel_workers_get_ipc_handles_per_bucket_never_tensors(monkeypatch, folder):
    model, formatter = load(folder)
    engine = engine_for(monkeypatch, folder, perturbed(model), formatter, "engine.vllm.tensor_parallel_size=2")
    engine.bucket_bytes = 8 << 10  # several buckets for this tiny model
    shared: dict[int, torch.Tensor] = {}  # CUDA IPC on a CPU machine: the handle names a buffer of this process

    def share(flat):
        shared[id(flat)] = flat
        return pickle.dumps(id(flat))

    monkeypatch.setattr(vllm_weights, "share_ipc", share)
    monkeypatch.setattr(vllm_weights, "open_ipc", lambda handle: shared[pickle.loads(handle)])
    monkeypatch.setattr(torch.cuda, "ipc_collect", lambda: None)
    engine.load_weights(model.state_dict())
    rpcs = [e for e in engine.llm.events if e[0] == "rpc"]
    sizes = [sum(t.numel() * 2 for _, t in b) for b in vllm_weights.buckets(vllm_weights.engine_weights(model.state_dict(), torch.bfloat16), 8 << 10)]
    assert len(rpcs) == len(sizes) > 2 and all(method == "tsctl_load_ipc" for _, method, _ in rpcs)
    assert all(size < 2048 for *_, size in rpcs)  # a handle and names, not the bucket's bytes
    assert max(sizes) > 4 * 2048
    for worker in engine.llm.workers:
        loaded = worker.model_runner.model.loaded
        assert set(loaded) == set(engine.llm.folder.tensors)
        assert all(torch.equal(loaded[n], p.to(torch.bfloat16)) for n, p in model.state_dict().items() if n in loaded)
    assert engine.llm.events[-1] == ("reset_prefix_cache",)
    with pytest.raises(AssertionError, match="through the host"):  # what the fake refuses: tensors in the call
        engine.llm.collective_rpc("tsctl_load_weights", args=([("model.norm.weight", torch.ones(32))],))


def test_a_train_step_sleeps_before_the_update_then_loads_resets_and_wakes(monkeypatch, folder, tmp_path):
    model, formatter = load(folder)
    engine = engine_for(monkeypatch, folder, model, formatter)
    cfg = compose_config(["engine=vllm", "trainer=micro", "engine.max_new_tokens=12", "trainer.lr=1e-3", *TASK]).cfg
    task = build_task(cfg.task)
    problems = list(task.problems("train"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.trainer.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    before = {n: p.detach().clone() for n, p in model.state_dict().items()}
    learner = Learner(cfg, Parallel(model), engine=engine)
    learner.optimizer, learner.scheduler = optimizer, scheduler
    ctx = StepContext(cfg, Sampler(engine, formatter, task, problems=problems), learner)
    for step in range(2):
        record = train_step(step, ctx)
        assert record["samples"] == cfg.trainer.batch_size * cfg.trainer.n
    calls = [e[0] if e[0] not in ("sleep", "wake_up") else e for e in engine.llm.events if e[0] != "rpc"]
    one_step = ["generate", ("sleep", 2), ("wake_up", ("weights",)), "load_weights", "reset_prefix_cache", ("wake_up", ("kv_cache",))]
    assert calls == one_step * 2
    loaded = engine.llm.workers[0].model_runner.model.loaded
    changed = [n for n, p in model.state_dict().items() if n in loaded and not torch.equal(p, before[n])]
    assert changed and all(torch.equal(loaded[n], model.state_dict()[n].to(torch.bfloat16)) for n in changed)


def test_eval_of_every_checkpoint_resets_the_prefix_cache_before_sampling_the_next(monkeypatch, folder, tmp_path):
    run = tmp_path / "runs" / "default" / "r"
    for step, seed in ((1, 1), (2, 2), (3, 3)):
        path = save_qwen_folder(run / "checkpoints" / f"step-{step}", seed=seed)
        torch.save({}, path / "trainer_state.pt")
    fake_vllm.install(monkeypatch, fake_vllm.end_after(lambda prompt: len(prompt) % 4, end=IM_END))
    overrides = ["engine=vllm", f"runs_dir={tmp_path / 'runs'}", f"eval.checkpoint={run}", "eval.step=all", "eval.k=2", "eval.pass_k=[1,2]",
                 "engine.max_new_tokens=8", "model.device=cpu", *TASK]
    cfg = compose_config(overrides)
    results = evaluate(Composed(cfg.node, cfg.cfg))
    assert [r["step"] for r in results] == [1, 2, 3]
    llm = fake_vllm_instances()[0]
    assert llm.kwargs["model"] == str(run / "checkpoints" / "step-1")
    calls = [e[0] for e in llm.events if e[0] != "rpc"]
    assert calls == ["generate", "generate"] + ["load_weights", "reset_prefix_cache", "generate", "generate"] * 2
    third = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "step-3", dtype=torch.float32)
    loaded = llm.workers[0].model_runner.model.loaded
    assert all(torch.equal(loaded[n], p.to(torch.bfloat16)) for n, p in third.state_dict().items() if n in loaded)


def fake_vllm_instances():
    import sys

    return sys.modules["vllm"].LLM.instances
