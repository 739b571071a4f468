"""The ``trainer`` group: the step loop's sizes, optimiser, memory knobs, evaluation and checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    """Padded tokens (rows x longest row) per forward/backward; 0 = no limit. Rows are taken longest
    first, greedily up to the budget (a longer row runs alone); with ``micro_batch_size`` too, both
    limits hold. With ``pack`` the budget counts real tokens (the rows' lengths), rows in shuffled
    order. The gradient is the same however the mini-batch is split."""
    pack: bool = True
    """Run the training forwards and no-grad recomputes padding-free (:mod:`tsctl.models.packing`): the
    rows of a micro-batch as one sequence of real tokens, positions restarting per row, the LM head only
    at real response tokens, attention confined to each row (row by row on padded blocks under
    ``eager``/``sdpa``; a block-diagonal mask under ``gradient_checkpointing``; FlashAttention's varlen
    path under ``flash_attention_*``, where rows do not share prompts). The same log-probs, gradients
    and metrics up to float rounding; with ``share_prompts`` the rows of a prompt share its context. On
    CPU the update runs about 1.3x faster on DAPO-like lengths (``bench/rl_step.py --packing-only``).
    Other attention implementations, and rows past a sliding window, keep the padded forward."""
    compile: bool = False
    """Compile the update's decoder layers with ``torch.compile`` (:mod:`tsctl.models.compiled`): each layer's
    elementwise work runs fused between its matmuls, in forward and backward; shapes are dynamic, so one graph
    serves every micro-batch. The first update also compiles (seconds to a minute, logged as ``time/compile``,
    the graphs built as ``compile/graphs``); the rollout engine, the recomputes and the evaluation run uncompiled.
    Log-probs and gradients equal the uncompiled ones to float rounding. On the CPU it needs a C++ compiler. Not
    under ``torchrun``."""
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
    checkpoint_on_signal: bool = True
    """On SIGTERM (Slurm's preemption, ``timeout``) or SIGINT (Ctrl-C) the run finishes its current
    step, then stops with status ``interrupted`` and exit code 128 + the signal's number; with this on
    it first saves a checkpoint of that step where the newest is older, so a resume loses nothing. Off,
    the resume starts from the last regular checkpoint (see :mod:`tsctl.trainer.stop_signals`)."""
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
