"""Structured configs: every knob of tsctl, documented where it is declared.

Hydra composes the YAML groups under ``conf/`` onto these dataclasses (registered in the
ConfigStore by :mod:`tsctl.config.store`), so an unknown key or a value of the wrong type is
rejected by OmegaConf; value ranges and names are checked by :func:`tsctl.config.validate.validate`.

The three sweep knobs of Thinking Seeds are top-level keys: ``ratio``, ``truncation``, ``refresh``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class TinyModelConfig:
    """Architecture of the built-in tiny Llama-style model (used when ``model.path=builtin``)."""

    hidden_size: int = 160
    """Width of the residual stream."""
    num_layers: int = 4
    """Number of transformer blocks."""
    num_heads: int = 4
    """Attention heads (head_dim = hidden_size / num_heads)."""
    intermediate_size: int = 480
    """Width of the SwiGLU MLP."""
    max_position_embeddings: int = 256
    """Longest prompt + response the model can see, in tokens."""


@dataclass
class WarmupConfig:
    """Supervised warm-up of the built-in model on the task's worked solutions (``tsctl warmup``)."""

    examples: int = 40000
    """Training examples drawn from the task's train split (cycled if the split is smaller)."""
    batch_size: int = 64
    """Sequences per optimiser step."""
    lr: float = 3e-3
    """Peak learning rate (linear warm-up over 5% of steps, cosine decay to 10%)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    eval_problems: int = 1000
    """Held-out problems scored greedily after warm-up."""
    seed: int = 0
    """Seed of initialisation and data order (the warmed-up model is shared by all RL seeds)."""


@dataclass
class ModelConfig:
    """Which causal LM to train, and how to load it."""

    path: str = "builtin"
    """``builtin`` (the tiny model tsctl builds and warms up itself), a local HF folder, or a hub id."""
    dtype: str = "float32"
    """Parameter (master-weight) dtype: ``float32`` or ``bfloat16``. AdamW steps these parameters, so
    ``tsctl train`` needs ``float32`` (bf16 parameters lose updates below half a bf16 rounding step);
    ``bfloat16`` halves the memory of inference-only commands (``eval``, ``seed``, ``rollout``)."""
    compute_dtype: str = "auto"
    """Dtype the forwards compute in, through ``torch.autocast``: ``auto`` (bfloat16 on CUDA, float32
    elsewhere), ``float32`` or ``bfloat16``. Applies to the training forwards, pi_old and reference
    recomputes, and the ``hf`` engine; float32 enters no autocast at all."""
    device: str = "auto"
    """``auto`` (cuda when available), ``cpu`` or ``cuda``."""
    cache_dir: Optional[str] = None
    """Folder of the built-in model cache; null = ``<runs_dir>/_models`` (share one across runs_dirs to build once)."""
    use_chat_template: bool = True
    """Wrap prompts in the tokenizer's chat template when it has one."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Architecture of the built-in model."""
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    """How the built-in model is warmed up before RL."""


@dataclass
class CountdownConfig:
    """Countdown: combine the given numbers with + - * to reach the target."""

    min_numbers: int = 3
    """Fewest numbers offered."""
    max_numbers: int = 4
    """Most numbers offered."""
    max_number: int = 10
    """Numbers are drawn from 1..max_number."""
    max_target: int = 100
    """Targets above this (or equal to a given number) are rejected while generating."""


@dataclass
class ArithmeticConfig:
    """Arithmetic chains: evaluate a sum/difference of several multi-digit numbers step by step."""

    min_terms: int = 3
    """Fewest terms in the expression."""
    max_terms: int = 5
    """Most terms in the expression."""
    max_digits: int = 1
    """Each term has 1..max_digits digits (2 is much harder for the built-in model: ~4% after warm-up)."""


@dataclass
class FileTaskConfig:
    """Bring-your-own task: a JSONL or Parquet file with one problem per row."""

    train_path: Optional[str] = None
    """File with the training problems (questions for RL, solutions for warm-up)."""
    heldout_path: Optional[str] = None
    """File with held-out problems; when absent, ``heldout_fraction`` of train_path is held out."""
    heldout_fraction: float = 0.1
    """Share of train_path held out when heldout_path is not given."""
    question_field: str = "question"
    """Field holding the question text."""
    solution_field: Optional[str] = "solution"
    """Field holding a worked solution (needed by warm-up only); null when there is none."""
    answer_field: str = "answer"
    """Field holding the gold final answer."""
    answer_rule: str = "field"
    """How the gold answer is read from answer_field: ``field`` (as is), ``boxed`` (last \\boxed{}),
    ``after_hashes`` (after the last ``####``) or ``list_first`` (first item of a list like ``['2']``)."""
    on_bad_row: str = "error"
    """A malformed row: ``error`` (stop, naming file, line and field) or ``skip`` (count and report)."""
    grader: str = "math_verify"
    """How answers are compared: ``exact``, ``numeric`` or ``math_verify``."""
    answer_pattern: str = "Answer:"
    """The final answer is the text after the last occurrence of this marker (or the last \\boxed{})."""


@dataclass
class TaskConfig:
    """The verifiable task: prompts for RL, worked solutions for warm-up, a verifier for rewards."""

    name: str = "countdown"
    """``countdown`` (default: early tokens carry real choices), ``arithmetic`` or ``file``."""
    heldout_size: int = 1000
    """Held-out problems of a synthetic task (never overlapping the train split)."""
    train_size: int = 50000
    """Training problems of a synthetic task."""
    data_seed: int = 1234
    """Seed of the synthetic generators; train and held-out splits are disjoint for every seed."""
    countdown: CountdownConfig = field(default_factory=CountdownConfig)
    """Parameters of the countdown generator."""
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    """Parameters of the arithmetic-chain generator."""
    file: FileTaskConfig = field(default_factory=FileTaskConfig)
    """Parameters of a file-backed task (``task.name=file``)."""


@dataclass
class EngineConfig:
    """Rollout backend and sampling parameters."""

    name: str = "hf"
    """``hf`` (transformers; CPU or one GPU) or ``vllm`` (GPU)."""
    temperature: float = 0.6
    """Sampling temperature (0 = greedy). 0.6 suits the built-in model: at 1.0 its samples solve half as
    often as its greedy answers and RL there lowered greedy accuracy; large models usually train at 1.0."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]."""
    max_new_tokens: int = 48
    """Longest response, in tokens; longer responses are truncated."""
    batch_size: int = 256
    """Sequences decoded together: ``hf`` chunks prompts x n to this; ``vllm`` takes it as ``max_num_seqs``."""
    gpu_memory_utilization: float = 0.5
    """vllm only: share of GPU memory vLLM may take while awake (weights + KV cache; the trainer needs the rest)."""
    tensor_parallel_size: int = 1
    """vllm only: GPUs the engine's model is split over (weights reach them by CUDA IPC, not through the host)."""
    dtype: str = "bfloat16"
    """vllm only: dtype of vLLM's weights and compute (``bfloat16``, ``float16`` or ``float32``), whatever
    the trainer's; the trainer's weights are cast to it at every sync."""
    max_model_len: Optional[int] = None
    """vllm only: longest prompt + prefix + response, in tokens (sizes vLLM's KV cache); null = the
    model's ``max_position_embeddings``. A request that does not fit is refused, never cut short."""
    enable_sleep_mode: bool = True
    """vllm only: discard vLLM's weights and KV cache during the update (sleep level 2) and bring them
    back after the weight sync, so vLLM and the trainer share one GPU."""


@dataclass
class AlgoConfig:
    """Policy-gradient objective: DAPO/GRPO with token-level clipped importance ratios."""

    loss: str = "dapo"
    """Policy loss in the registry: ``dapo`` (token-mean, clip-higher) or ``grpo`` (sequence-mean)."""
    clip_low: float = 0.2
    """Lower clip range: ratios below 1 - clip_low are clipped."""
    clip_high: float = 0.28
    """Upper clip range (DAPO clip-higher): ratios above 1 + clip_high are clipped."""
    clip_c: Optional[float] = None
    """Dual-clip constant (> 1) bounding the loss for negative advantages; null disables."""
    prefix_clip_c: Optional[float] = 3.0
    """Dual-clip constant (> 1) of seed-prefix tokens (the tighter of this and ``clip_c`` applies there):
    their ratio is taken against a behaviour policy up to ``refresh`` steps stale, so with a negative
    advantage and pi_theta >> pi_b the unclipped ``-A r`` would be unbounded; it is capped at ``-A c``
    (zero gradient beyond ``r = c``; 3 as verl's dual clip). Null leaves prefix tokens to ``clip_c``.
    No effect at ratio 0 (no prefix tokens)."""
    norm_adv_by_std: bool = True
    """Divide advantages by the group std (GRPO); false gives Dr. GRPO."""
    adv_eps: float = 1e-6
    """Added to the group std before dividing."""
    kl_coef: float = 0.0
    """Coefficient of a k3 KL penalty to the frozen initial model; 0 disables (DAPO default)."""
    ref_placement: str = "policy"
    """Where the KL reference model (a second full copy, loaded when ``kl_coef > 0``) lives: ``policy``
    (on the policy's device), ``cpu`` (kept and run on the CPU: no GPU memory, slow forwards) or
    ``offload`` (kept on the CPU, moved to the policy's device for its one forward per step)."""
    entropy_coef: float = 0.0
    """Coefficient of an entropy bonus; 0 disables."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop groups whose rewards are all equal and draw more prompts."""
    max_resample_rounds: int = 3
    """Extra generation rounds dynamic sampling may spend to refill the batch."""
    overlong: str = "none"
    """Truncated responses: ``none``, ``mask`` (drop them from the loss) or ``penalty`` (DAPO soft penalty)."""
    overlong_buffer: int = 8
    """DAPO soft penalty: tokens before max_new_tokens where the linear length penalty starts."""
    overlong_penalty: float = 1.0
    """DAPO soft penalty: largest penalty subtracted from the reward."""


@dataclass
class SeedsConfig:
    """Thinking Seeds: behaviour-policy prefixes (the top-level ``ratio``, ``truncation``, ``refresh`` choose the ablation)."""

    fraction: float = 0.5
    """``fixed``: the prefix is this fraction of the behaviour response."""
    lo: float = 0.2
    """``uniform``/``boundary``: lower end of the drawn fraction."""
    hi: float = 0.8
    """``uniform``/``boundary``: upper end of the drawn fraction."""
    entropy_window: float = 0.5
    """``entropy``: search the first this-fraction of the response for the highest-entropy token."""
    schedule: str = "linear"
    """``schedule``: how the prefix fraction shrinks over training, ``linear`` or ``cosine``."""
    schedule_start: float = 0.8
    """``schedule``: prefix fraction at step 0."""
    schedule_end: float = 0.1
    """``schedule``: prefix fraction at the last step."""
    exclude_answer: bool = True
    """Never put the final-answer line in a prefix when the task can tell where it starts."""
    train_prefix: bool = True
    """Keep prefix tokens in the loss; false is the ablation that trains only on the suffix."""
    adv_group: str = "all"
    """Group statistics for advantages over ``all`` n samples or over ``plain`` samples only."""
    selector: str = "latest"
    """Which behaviour snapshot writes each prompt's seeds when a refresh window opens (see
    ``seeds/selectors.py``): ``latest`` (the current weights, the paper's choice; the default),
    ``oldest``, ``uniform`` (one drawn per prompt), ``max_entropy`` (the snapshot whose probe
    responses have the highest per-token surprisal) or ``bandit`` (UCB or Thompson sampling over
    snapshot ages, rewarded by the advantage their seeded samples earned). All but ``latest`` need
    ``pool_size >= 2`` and ``refresh > 0``."""
    pool_size: int = 1
    """Behaviour snapshots kept (K): one is saved under ``seeds/pool/`` when each refresh window
    opens and all but the newest K are deleted. ``latest`` uses only the current weights and saves none."""
    bandit: str = "thompson"
    """``selector=bandit``: ``thompson`` (a posterior draw per prompt) or ``ucb`` (UCB1, one arm per window)."""
    bandit_c: float = 1.0
    """``selector=bandit``: exploration scale, UCB's bonus ``c * sqrt(2 ln N / n)`` or Thompson's prior std."""
    probe_prompts: int = 16
    """``selector=max_entropy``: train prompts (a fixed set per run seed) each snapshot answers when it joins the pool."""
    probe_samples: int = 4
    """``selector=max_entropy``: responses per probe prompt (the same sampling seed for every snapshot)."""
    source: str = "self"
    """Who writes the seeds: ``self`` (the run's own snapshots), ``model`` (the causal LM at
    ``source_path``, with the policy's tokenizer; pi_b is its teacher-forced log-probs) or ``traces``
    (the responses in the JSONL/Parquet file ``source_path``, pi_b unknown: see ``trace_logprobs``)."""
    source_path: Optional[str] = None
    """``source=model``: an HF model folder or hub id; ``source=traces``: a file whose rows hold a
    ``response`` and a ``prompt_id`` or ``question``."""
    trace_logprobs: str = "exclude"
    """``source=traces``, the ratio of prefix tokens whose pi_b is unknown: ``exclude`` drops them
    from the loss; ``cap`` takes pi_b as pi_old's log-prob (the ratio starts at 1 each step),
    bounded by the clip range and ``algo.prefix_clip_c``."""


@dataclass
class TrainerConfig:
    """The RL loop."""

    steps: int = 400
    """Optimiser steps of the outer loop (one batch of rollouts each)."""
    batch_size: int = 32
    """Prompts per step."""
    n: int = 8
    """Responses per prompt (the GRPO group size)."""
    mini_batches: int = 4
    """Optimiser steps per batch (the batch is split into this many mini-batches)."""
    micro_batch_size: int = 0
    """Sequences per forward/backward (gradient accumulation); 0 = the whole mini-batch."""
    micro_batch_tokens: int = 0
    """Padded tokens (rows x longest row) per forward/backward; 0 = no limit. Rows are packed longest
    first, greedily up to the budget (a longer row runs alone); with ``micro_batch_size`` too, both
    limits hold. The gradient is the same however the mini-batch is split."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward instead of keeping them (HF gradient
    checkpointing, non-reentrant): much less activation memory for about one more forward. The training
    forward then runs whole rows instead of sharing prompts (the cache it needs is off); no-grad
    recomputes still share them."""
    logits_chunk_mib: float = 512.0
    """Size of one chunk of float32 logits: the LM head runs on that many response positions at a time
    (MiB / (4 bytes x vocabulary)), and backward recomputes each chunk's logits instead of keeping them,
    so no full ``[B, T, V]`` logits tensor ever exists. The peak is a few times this (softmax, gradient)."""
    epochs: int = 1
    """Passes over the batch per step."""
    lr: float = 5e-5
    """Peak learning rate of AdamW (2e-4 made the built-in model's held-out accuracy fall)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 5
    """Linear learning-rate warm-up, in optimiser steps."""
    schedule: str = "constant"
    """After warm-up: ``constant`` or ``cosine``."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm."""
    nonfinite: str = "stop"
    """A mini-batch with a NaN/Inf loss or gradient norm: ``stop`` the run there (status ``failed``
    with the step and the tensor; no checkpoint of the bad weights, the last good one kept) or
    ``skip`` it (no optimiser step, gradients zeroed; counted in the step's ``nonfinite_skips``).
    NaN/Inf parameters after an optimiser step always stop the run."""
    max_nonfinite_skips: int = 10
    """``nonfinite=skip``: most mini-batches a run may skip; the next non-finite one stops it."""
    old_logprobs: str = "auto"
    """Source of pi_old's log-probs (and pi_b's in new seeds): ``engine`` takes the ones the rollout
    engine computed while sampling (no extra forward; needs ``engine=hf`` and ``engine.top_p=1``),
    ``recompute`` runs a no-grad forward of the batch, ``auto`` is ``engine`` with the ``hf`` engine
    at top_p 1 in float32 (where the two agree to ~1e-5) and ``recompute`` otherwise."""
    share_prompts: bool = True
    """Run each distinct prompt of a (micro-)batch through the policy once in the training forwards,
    its keys and values shared by the rows that continue it (the same log-probs and gradients, up to
    float rounding, as running every row whole; the prompt tokens' work falls by the rows per prompt).
    Applies to models with ``eager`` or ``sdpa`` attention and prompts of two tokens or more."""
    save_rollouts: bool = False
    """Also write each step's samples as a rollout shard ``rollouts/step-N.parquet``."""
    save_every: int = 25
    """Steps between checkpoints (>= 1; the last step is always saved). With ``ratio > 0`` the first
    step of every seed window (each multiple of ``refresh``) is saved too: its seeds can be written
    again from it if the shard is lost."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept on disk (0 keeps all). The checkpoint that opened the current seed
    window is also kept until the window closes."""
    eval_every: int = 25
    """Steps between held-out evaluations (and at start and end); 0 disables."""
    eval_problems: int = 1000
    """Held-out problems for greedy accuracy."""
    eval_samples_problems: int = 256
    """Held-out problems for sampled pass@1 (``eval_samples`` responses each, at the rollout temperature)."""
    eval_samples: int = 4
    """Sampled responses per problem for held-out pass@1."""
    position_bins: list[int] = field(default_factory=lambda: [0, 4, 8, 16, 32, 64])
    """Left edges of the absolute-position bins for position-resolved metrics (last bin is open)."""


@dataclass
class EvalConfig:
    """``tsctl eval``: which checkpoints, which benchmarks, how many samples."""

    checkpoint: Optional[str] = None
    """A model folder, a run folder, or null for ``model.path``."""
    step: str = "last"
    """With a run folder: ``last``, ``all`` or a step number."""
    benchmarks: list[str] = field(default_factory=lambda: ["heldout"])
    """Benchmarks by name (``conf/benchmark/<name>.yaml``); ``heldout`` is the task's held-out split."""
    k: int = 8
    """Samples per problem for sampled pass@1 and pass@k."""
    pass_k: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    """k values of the unbiased pass@k estimator (each <= k)."""
    limit: Optional[int] = None
    """Score only the first ``limit`` problems of each benchmark."""
    on_bad_row: str = "error"
    """A malformed benchmark row: ``error`` (stop, naming file, line and field) or ``skip`` (count and report)."""
    overwrite: bool = False
    """Replace results already written for the same checkpoint and benchmark; false refuses to."""


@dataclass
class ShardsConfig:
    """Inputs and outputs of the stand-alone stages ``tsctl seed`` and ``tsctl rollout``."""

    checkpoint: Optional[str] = None
    """The model the stage runs: pi_b for ``seed``, the current policy for ``rollout``. A model
    folder, a run folder (with ``shards.step``), or null for ``model.path``."""
    step: str = "last"
    """With a run folder: ``last`` or a step number."""
    data_step: int = 0
    """Use the prompts that ``tsctl train`` draws at this step (same seed and batch size)."""
    steps: int = 1
    """Number of consecutive training steps whose prompts are used."""
    out_dir: Optional[str] = None
    """Folder of ``seeds.parquet`` and ``rollouts.parquet``; null = ``<runs_dir>/<experiment>/shards``."""
    overwrite: bool = False
    """Replace shards that already exist (otherwise the stage refuses)."""


@dataclass
class LoggerConfig:
    """Where metrics go besides ``metrics.jsonl`` (always written).

    The default is ``console``: it needs no account, no network and no extra package, and every
    metric is in ``metrics.jsonl`` anyway. ``logger=wandb`` adds one wandb run per training run
    (config and metrics; under ``tsctl ablate`` also the final evaluation and the run's plots),
    offline by default so that it works with no network and no account; upload later with
    ``wandb sync <run>/wandb/offline-run-*`` or log live with ``logger.wandb_mode=online``.
    """

    name: str = "console"
    """``console`` (rich progress) or ``wandb`` (also logs to Weights & Biases)."""
    wandb_project: str = "tsctl"
    """wandb project."""
    wandb_mode: str = "offline"
    """wandb mode: ``offline`` (default; sync later with ``wandb sync``), ``online`` or ``disabled``."""


@dataclass
class ReportConfig:
    """``tsctl report`` (and the report ``tsctl ablate`` writes at the end): how points are compared."""

    baseline: Optional[str] = None
    """The point every other point is compared with, as ``key=value`` (``report.baseline=ratio=0``;
    several keys separated by spaces); null = the first value of the first swept key."""
    level: float = 0.95
    """Confidence level of every interval in the report."""


@dataclass
class TsctlConfig:
    """Root config of every tsctl command."""

    ratio: float = 0.0
    """Share (%) of each group's samples that continue a behaviour-policy prefix; 0 = plain DAPO."""
    truncation: str = "uniform"
    """Truncation strategy for seeds: fixed, uniform, boundary, entropy or schedule."""
    refresh: int = 10
    """Steps between behaviour-policy refreshes (T); 0 = never refresh (keep the initial model)."""
    seed: int = 0
    """Seed of sampling, initialisation and data order."""
    experiment: str = "default"
    """Run folder is ``<runs_dir>/<experiment>/<name>``; a relative path without ``..``."""
    name: Optional[str] = None
    """Run name, one folder name (no ``/``, not ``..``); null derives one from the overrides (``ratio25-refresh10-seed0``)."""
    runs_dir: str = "runs"
    """Root folder of run outputs and the model cache."""
    resume: bool = False
    """Continue an existing run from its newest complete checkpoint (with the config it was started
    with; ``runs_dir``, ``experiment`` and ``name`` may differ, for a moved folder). An error when there is no such run."""
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    seeds: SeedsConfig = field(default_factory=SeedsConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    shards: ShardsConfig = field(default_factory=ShardsConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
