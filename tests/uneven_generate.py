"""Run by ``torchrun --nproc_per_node=2`` (tests/test_vllm_cli_real.py): one real vLLM engine per rank in the job's
process group; rank 0 calls ``generate`` twice and rank 1 once, as dynamic sampling's refills make ranks do, then
both meet at a barrier. Each rank writes ``rank-N.json`` (its calls and its engine's seed) to the folder given.

Usage: uneven_generate.py MODEL_FOLDER OUT_FOLDER
"""

import json
import sys
from pathlib import Path

from tsctl.distributed import world
from tsctl.engines.base import Request, SamplingParams
from tsctl.engines.vllm import VLLMEngine, engine_seed

SEED = 7


def main(model: str, out: Path) -> None:
    here = world.start(cuda=False)
    engine = VLLMEngine(model, (256, 258), dtype="float32", seed=SEED, max_model_len=256, enable_sleep_mode=False, enforce_eager=True, kv_cache_bytes=64 << 20)
    calls = 2 if here.rank == 0 else 1
    for call in range(calls):
        engine.generate([Request([1, 2, 3 + call])] * 4, SamplingParams(temperature=1.0, max_new_tokens=8))
    world.barrier()
    (out / f"rank-{here.rank}.json").write_text(json.dumps({"calls": calls, "seed": engine_seed(SEED, here.rank)}))
    world.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
