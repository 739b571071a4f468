"""End-to-end LoRA runs (``model.lora``) on micro sizes, against the real peft: checkpoints hold the adapter and load
merged with the trained adapter's log-probs, ``tsctl eval`` and ``tsctl seed`` read them, resume is exact, and a
pool of adapter snapshots writes seeds whose pi_b is each snapshot's own."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from conftest import MICRO_TASK, kill, stable_metrics, tsctl
from tsctl.io.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from tsctl.models.batch import collate
from tsctl.models.forward import Forward
from tsctl.models.loading import load_model
from tsctl.models.lora import add_adapter, load_adapter_weights
from tsctl.models.samples import Sample
from tsctl.config.schema import TsctlConfig
from tsctl.runconfig import compose_config

pytestmark = pytest.mark.slow

LORA = ["model.lora.rank=4", "trainer.lr=3e-3"]
"""A rank-4 adapter on every projection, at a learning rate that moves it visibly in a few steps."""
CFG = compose_config(["model=micro", "trainer=micro", *MICRO_TASK, "engine.max_new_tokens=24", "model.lora.rank=4"]).cfg


def base_of(run: Path) -> str:
    return json.loads((run / "manifest.json").read_text())["base_model"]["path"]


def adapted(base: str, adapter: Path, cfg: TsctlConfig = CFG) -> torch.nn.Module:
    """The trainer's form of a saved adapter (``cfg.model.lora``): the base model with the adapter injected (not merged)."""
    model = load_model(base, device="cpu")[0].eval()
    add_adapter(model, cfg.model.lora, base, seed=0)
    load_adapter_weights(model, adapter)
    return model


def teacher_forced(model: torch.nn.Module, prompts: list[list[int]], responses: list[list[int]], cfg: TsctlConfig = CFG) -> torch.Tensor:
    """Log-probs [B, T] of ``responses`` after ``prompts`` under ``model`` with the forward settings of the run ``cfg``."""
    samples = [Sample(group=i, prompt_id=str(i), prompt_ids=p, generated_ids=r, generated_logprobs=[0.0] * len(r), finished=True)
               for i, (p, r) in enumerate(zip(prompts, responses))]
    return Forward.of(cfg).recompute(model, collate(samples, torch.zeros(len(samples)), 0, "cpu"), entropy=False)[0]


def padded(rows: list[list[float]], width: int) -> torch.Tensor:
    return torch.tensor([row + [0.0] * (width - len(row)) for row in rows])


def test_lora_checkpoints_hold_the_adapter_and_load_merged_with_its_log_probs_in_eval_and_seed(micro, tmp_path):
    tsctl("train", *micro, *LORA, "name=l", "algo.kl_coef=0.05", "trainer.pack=true", "trainer.save_rollouts=true")
    run = tmp_path / "runs" / "default" / "l"
    checkpoint = run / "checkpoints" / "step-3"
    assert sorted(p.name for p in checkpoint.iterdir()) == sorted([ADAPTER_CONFIG, ADAPTER_WEIGHTS, "tokenizer.json", "tokenizer_config.json", "trainer_state.pt"])
    assert json.loads((checkpoint / ADAPTER_CONFIG).read_text())["base_model_name_or_path"] == base_of(run)
    rollouts = pq.read_table(run / "rollouts" / "step-000002.parquet").to_pydict()
    prompts, responses = rollouts["prompt_ids"], rollouts["response_ids"]
    trained = teacher_forced(adapted(base_of(run), checkpoint), prompts, responses)
    merged = teacher_forced(load_model(checkpoint, device="cpu")[0].eval(), prompts, responses)
    base = teacher_forced(load_model(base_of(run), device="cpu")[0].eval(), prompts, responses)
    torch.testing.assert_close(merged, trained, rtol=1e-5, atol=1e-5)  # float32 rounding of W + BA against W x + B(A x)
    assert (trained - base).abs().max() > 1e-2  # the adapter trained: the check above compares two different models

    tsctl("eval", *micro, f"eval.checkpoint={run}", "eval.step=all")
    scored = {p.parent.name: json.loads(p.read_text()) for p in (run / "eval").glob("step-*/heldout.json")}
    assert sorted(scored) == ["step-2", "step-3"] and all(r["problems"] == 100 for r in scored.values())

    tsctl("seed", *micro, "ratio=50", f"shards.checkpoint={run}")
    seeds = pq.read_table(tmp_path / "runs" / "default" / "shards" / "seeds.parquet").to_pydict()
    width = max(map(len, seeds["response_ids"]))
    pi_b = teacher_forced(adapted(base_of(run), checkpoint), seeds["prompt_ids"], seeds["response_ids"])
    assert (padded(seeds["logprobs"], width) - pi_b).abs().max() < 1e-4  # the engine's own log-probs, as the trainer's


def test_lora_sigkill_then_resume_gives_the_same_metrics_and_adapter(micro, tmp_path):
    args = [*micro, *LORA, "trainer.steps=6", "trainer.save_every=2", "trainer.eval_every=3", "algo.kl_coef=0.05"]
    tsctl("train", *args, "name=full")
    run = tmp_path / "runs" / "default" / "killed"
    kill([*args, "name=killed"], ("step-logged", 4))  # steps 0..4 logged, step-4's checkpoint not yet written
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]
    tsctl("train", *args, "name=killed", "resume=true")
    full = tmp_path / "runs" / "default" / "full"
    a_records, b_records = stable_metrics(full), stable_metrics(run)
    assert [r["step"] for r in b_records] == list(range(7))
    for a, b in zip(a_records, b_records):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-6), (a["step"], key)
    ours, theirs = (load_file(r / "checkpoints" / "step-6" / ADAPTER_WEIGHTS) for r in (run, full))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_a_pool_of_three_adapter_snapshots_writes_seeds_whose_pi_b_is_each_snapshots(micro, tmp_path):
    args = [*micro, *LORA, "ratio=50", "refresh=1", "seeds.selector=uniform", "seeds.pool_size=3", "trainer.steps=4", "trainer.eval_every=0"]
    tsctl("train", *args, "name=pool")
    run = tmp_path / "runs" / "default" / "pool"
    pool = run / "seeds" / "pool"
    snapshots = {p.name: p for p in sorted(pool.glob("step-*"))}
    assert list(snapshots) == ["step-000001", "step-000002", "step-000003"]
    base_bytes = (Path(base_of(run)) / "model.safetensors").stat().st_size
    for folder in snapshots.values():
        assert not (folder / "model.safetensors").exists() and (folder / ADAPTER_WEIGHTS).stat().st_size < base_bytes / 5
    checked = check_pool_seeds(run, CFG)
    assert len({step for _, step in checked}) >= 2  # older snapshots wrote seeds too, not only the live weights


def check_pool_seeds(run: Path, cfg: TsctlConfig, gap: float = 1e-4) -> set[tuple[int, int]]:
    """Check that the seeds of windows 2 and 3 of the pool run ``run`` (``refresh=1``, ``seeds.pool_size=3``, 4 steps: the
    windows whose every arm's snapshot is still in the pool) have as pi_b the log-probs of the snapshot that wrote them,
    within ``gap``, and not another's; the (window, snapshot step) pairs checked."""
    snapshots = {int(p.name.split("-")[1]): p for p in sorted((run / "seeds" / "pool").glob("step-*"))}
    models = {step: adapted(base_of(run), folder, cfg) for step, folder in snapshots.items()}
    checked = set()
    for window in (2, 3):
        shard = pq.read_table(run / "seeds" / f"step-{window:06d}.parquet").to_pydict()
        for step, model in models.items():
            rows = [i for i, c in enumerate(shard["checkpoint"]) if c == f"step-{step}"]
            if not rows:
                continue
            checked.add((window, step))
            responses = [shard["response_ids"][i] for i in rows]
            prompts = [shard["prompt_ids"][i] for i in rows]
            stored = padded([shard["logprobs"][i] for i in rows], max(map(len, responses)))
            assert (stored - teacher_forced(model, prompts, responses, cfg)).abs().max() < gap, (window, step)
            other = models[min(models, key=lambda s: (s == step, abs(s - step)))]  # another snapshot gives other numbers
            assert (stored - teacher_forced(other, prompts, responses, cfg)).abs().max() > 1e-3, (window, step)
    return checked
