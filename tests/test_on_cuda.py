"""The command line on a CUDA GPU, end to end: ``python -m pytest -m gpu`` (skipped where torch sees no GPU).

The CPU suite checks the device logic with a simulated device (tests/simulated_device.py) and fakes;
these tests run the real thing on the micro model: ``tsctl train`` with ``model.device=cuda`` (bf16
autocast over float32 master weights, pi_old recomputed and its gap to the engine logged, the KL
reference offloaded, gradient checkpointing, token-budget micro-batches, a chunked LM head), a SIGKILL
and a resume, ``tsctl eval`` of a checkpoint, and a two-job ``tsctl ablate`` sharing one GPU through
the GPU slots of :mod:`tsctl.distributed.job_pinning`.
"""

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import kill, metrics, micro_args, reference_run, stable_metrics, tsctl

pytestmark = [pytest.mark.slow, pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SETTINGS = [
    "model.device=cuda", "ratio=25", "refresh=2", "trainer.steps=4", "trainer.save_every=2", "trainer.keep_checkpoints=1",
    "algo.kl_coef=0.01", "algo.ref_placement=offload", "trainer.gradient_checkpointing=true",
    "trainer.micro_batch_tokens=256", "trainer.logits_chunk_mib=0.01",
]
"""Every memory option at once, on a run short enough for seconds: two seed windows, checkpoints at 2 and 4."""


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> tuple[Path, list[str]]:
    """An uninterrupted CUDA run with SETTINGS, and the overrides that place more runs beside it."""
    return reference_run(tmp_path_factory.mktemp("cuda") / "runs", model_cache, SETTINGS)


def test_a_run_on_cuda_steps_float32_weights_with_bf16_compute(cuda_run, model_cache):
    run, _ = cuda_run
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["arithmetic"]["device"] == torch.cuda.get_device_name(0)
    steps = [r for r in metrics(run) if r["step"] >= 1]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    for record in steps:
        for key in ("pg_loss", "grad_norm", "entropy", "kl_k3", "logprob_gap/abs_mean", "logprob_gap/ratio_mean"):
            assert math.isfinite(record[key]), (record["step"], key, record[key])
        # bf16 compute: the engine's sampling forward and the trainer's recompute differ by bf16 rounding, no more
        assert record["logprob_gap/abs_mean"] < 0.05 and abs(record["logprob_gap/ratio_mean"] - 1) < 0.05, record
    base = load_file(Path(manifest["base_model"]["path"]) / "model.safetensors")  # the folder of this run's config
    after = load_file(run / "checkpoints" / "step-4" / "model.safetensors")
    assert {t.dtype for t in after.values()} == {torch.float32}  # master weights stay fp32 on disk
    assert [k for k in base if torch.equal(base[k], after[k])] == []  # every tensor moved


def test_a_killed_cuda_run_resumes_to_the_same_result(cuda_run):
    ref, args = cuda_run
    kill([*args, "name=killed"], ("step-logged", 3))  # step 3 logged; checkpoint step-2 is the last
    tsctl("train", *args, "name=killed", "resume=true")
    run = ref.parent / "killed"
    expected, got = stable_metrics(ref), stable_metrics(run)
    assert [r["step"] for r in got] == [r["step"] for r in expected]
    differing = [(e["step"], k, e[k], g.get(k)) for e, g in zip(expected, got) for k in e if e[k] != g.get(k)]
    assert differing == [], differing[:12]
    final = Path("checkpoints") / "step-4" / "model.safetensors"
    assert (run / final).read_bytes() == (ref / final).read_bytes()


def test_eval_of_a_cuda_checkpoint(cuda_run):
    run, args = cuda_run
    tsctl("eval", *args, f"eval.checkpoint={run}", "eval.k=4", "eval.pass_k=[1,2,4]", "eval.limit=8")
    result = json.loads((run / "eval" / "step-4" / "heldout.json").read_text())
    assert result["problems"] == 8 and result["step"] == 4
    assert 0 <= result["pass@1"] <= result["pass@2"] <= result["pass@4"] <= 1
    assert result["entropy"] > 0 and 0 < result["mean_length"] <= 24


def test_two_sweep_jobs_share_the_one_gpu(tmp_path, model_cache):
    done = tsctl("ablate", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "trainer.steps=1", "name=par",
                 "model.device=cuda", *micro_args(tmp_path, model_cache), process=True)  # joblib's workers, as in test_job_pinning
    for point in ("seed=0", "seed=1"):
        folder = tmp_path / "default" / "par" / point
        assert (folder / "final_eval.json").is_file(), done.stderr[-3000:]
        assert json.loads((folder / "manifest.json").read_text())["arithmetic"]["device"] == torch.cuda.get_device_name(0)
