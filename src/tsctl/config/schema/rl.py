"""The ``engine``, ``algo`` and ``seeds`` groups: how rollouts are sampled, the objective, Thinking Seeds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class EngineConfig:
    """Rollout backend and sampling parameters."""

    name: str = "hf"
    """``hf`` (transformers; CPU or one GPU) or ``vllm`` (vLLM: CUDA GPUs, or vLLM's CPU build; its own settings are
    ``engine.vllm.*``, :mod:`tsctl.engines.vllm_settings`). An engine's own settings are a block beside it,
    ``engine.<name>.*``."""
    temperature: float = 0.6
    """Sampling temperature (0 = greedy). 0.6 suits the built-in model: at 1.0 its samples solve half as
    often as its greedy answers and RL there lowered greedy accuracy; large models usually train at 1.0."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]."""
    max_new_tokens: int = 48
    """Longest response, in tokens; longer responses are truncated."""
    batch_size: int = 256
    """Sequences decoded together: ``hf`` chunks prompts x n to this; ``vllm`` takes it as ``max_num_seqs``, capped by
    the most requests one ``generate`` call of the command sends (on the CPU its KV cache holds that many sequences of
    ``engine.vllm.max_model_len`` tokens; a cache beyond the free memory is refused before anything starts, naming what
    fits)."""


@dataclass
class AlgoConfig:
    """Policy-gradient objective: DAPO/GRPO with token-level clipped importance ratios."""

    aggregation: str = "dapo"
    """How every per-token term of the objective (the policy loss, the KL, the entropy bonus) becomes one number
    (``algo/aggregations.py``, one aggregation for all of them): ``dapo`` (token-mean over the mini-batch) or ``grpo``
    (each sequence's token-mean, then the mean over sequences). Once ``algo.loss``; the per-token loss itself is
    ``policy_loss``."""
    policy_loss: str = "vanilla"
    """The per-token objective (``algo/losses.py``'s ``POLICY_LOSSES``, one module of ``algo/`` each):
    ``vanilla`` (PPO clip with clip-higher and the dual clips; every token its own ratio), ``gspo``
    (``algo/gspo.py``: one ratio per sequence, the geometric mean over its suffix and plain tokens,
    clipped as a whole; seed-prefix tokens keep their own ratio and ``prefix_clip_c``) or ``cispo``
    (``algo/cispo.py``: the importance weight truncated at ``1 + algo.cispo.eps_high`` under a stop-gradient, every
    token keeping its gradient; it reads none of the clip keys), ``clip_cov`` (``algo/clip_cov.py``: ``vanilla`` with
    the gradient dropped on a random ``algo.clip_cov.clip_ratio`` share of the tokens whose covariance of log-prob and
    advantage lies in ``[algo.clip_cov.cov_lb, algo.clip_cov.cov_ub]``), ``kl_cov`` (``algo/kl_cov.py``: ``vanilla``
    plus ``algo.kl_cov.kl_coef * |log pi_theta - log pi_old|`` on the top ``algo.kl_cov.k_ratio`` share by that
    covariance) or ``forking_tokens`` (``algo/forking_tokens.py``: ``vanilla`` on the top
    ``algo.forking_tokens.top_share`` of tokens by entropy only). A policy loss's own settings are ``algo.<name>.*``."""
    adv_estimator: str = "grpo"
    """The advantage estimator (``algo/advantages.py``'s ``ADVANTAGES``): ``grpo`` (group mean, and std with
    ``norm_adv_by_std``), ``rloo`` (``algo/rloo.py``: leave-one-out group mean, no scaling) or
    ``reinforce_pp_baseline`` (``algo/reinforce_pp.py``: group mean, then whitened over the batch's tokens) or
    ``passk`` (``algo/passk_advantage.py``: Pass@k Training's analytic advantage of sets of ``algo.passk.k`` samples,
    rewards 0 or 1). All take their group statistics over the samples ``seeds.adv_group`` selects. An estimator's own
    settings are ``algo.<name>.*``."""
    clip_low: float = 0.2
    """Lower clip range: ratios below 1 - clip_low are clipped (read by ``vanilla`` and ``gspo``)."""
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
    """Coefficient of a KL penalty (the divergence ``kl_type``) to the frozen initial model, aggregated as the policy
    term (``aggregation``); seed-prefix tokens are left out of it; 0 disables (DAPO default)."""
    kl_type: str = "k3"
    """The divergence of the ``kl_coef`` term (``algo/divergences.py``'s ``DIVERGENCES``), each from the rollout's own
    tokens and the reference's log-probs, ``r = pi_ref / pi_theta``: ``k3`` (``r - 1 - log r`` differentiated as it
    stands, capped at 10: the k3 estimate of the reverse KL, whose gradient on-policy is the forward KL's), ``reverse``
    (the same value with the reverse ``KL(pi_theta || pi_ref)``'s own gradient, mode-seeking), ``forward``
    (``KL(pi_ref || pi_theta)``, mass-covering: ``r log r - (r - 1)``, its gradient's ratio capped at 10) or ``js``
    (Jensen-Shannon, mass-covering and bounded). ``forward`` and ``js`` are DPH-RL's (arXiv 2509.07430). Needs
    ``kl_coef > 0``."""
    ref_placement: str = "policy"
    """Where the KL reference model (a second full copy, loaded when ``kl_coef > 0``) lives: ``policy``
    (on the policy's device), ``cpu`` (kept and run on the CPU: no GPU memory, slow forwards) or
    ``offload`` (kept on the CPU, moved to the policy's device for its one forward per step)."""
    entropy_coef: float = 0.0
    """Coefficient of an entropy bonus, aggregated as the policy term (``aggregation``); 0 disables."""
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
    rollout_correction: str = "none"
    """Correct for the rollout engine sampling with other numerics than the trainer (vLLM's bf16 kernels):
    each suffix and plain token's clipped policy-gradient term is weighted by its ratio
    ``r = pi_old / pi_engine`` (pi_old as the trainer computes it over the engine's log-prob of the token),
    bounded by ``rollout_correction_cap`` (c): ``none`` (no weight), ``tis`` (``min(r, c)``), ``mis``
    (``r`` inside ``[1/c, c]``, else 0: the token's term is dropped but it still counts in the token-mean's
    denominator) or ``seq_mis`` (``algo/seq_mis.py``: the sequence's ratio, the product of its suffix and plain tokens'
    ratios, inside ``[1/c, c]``, else 0 for the whole sequence). Not the KL or entropy terms; seed-prefix tokens keep weight 1; with pi_old taken from the
    engine itself (``trainer.old_logprobs``) every weight is exactly 1. See ``algo/rollout_correction.py``."""
    stale_mask: str = "none"
    """Mask the stale tokens of a Thinking Seeds run (the seed-prefix tokens, their ratio against pi_b) whose ratio
    is extreme, before the policy loss (any ``policy_loss``): ``none`` or ``m2po`` (``algo/m2po.py``, M2PO, arXiv
    2510.01161: the prefix tokens of largest ``(log pi_theta - log pi_b)^2`` are masked until the mean over the rest
    is at most ``algo.m2po.threshold``, 0.04). A masked token's policy term is zeroed and still counts in the
    normaliser; not the KL or entropy terms. Needs ``ratio > 0`` and ``seeds.train_prefix`` (and, with
    ``seeds.source=traces``, ``seeds.trace_logprobs=cap``); logs ``m2po/masked``."""
    rollout_correction_cap: float = 2.0
    """The bound ``c`` (>= 1) of ``rollout_correction``: ``tis`` caps the weight at it, ``mis`` masks the
    tokens whose ratio is above it or below its inverse."""


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
    target_pass: float = 0.5
    """``target_pass`` (the seed controller): the pass rate it steers each prompt's seeded samples toward."""
    controller_band: float = 0.2
    """``target_pass``: a prompt whose estimated pass rate is below ``target_pass - band`` gets prefixes of right
    behaviour responses only, one above ``target_pass + band`` of wrong ones only (when it has such responses)."""
    controller_prior: float = 4.0
    """``target_pass``: pseudo-samples that shrink a prompt's pass rate toward the task's, and each measured lift
    (a prefix bin's effect on success) toward 0."""
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
    bounded by the clip range and ``algo.prefix_clip_c``; ``shaping`` is LUFFY's policy shaping (Yan et al.,
    arXiv 2504.14945; ``algo/luffy_shaping.py``): pi_b := 1 and the unclipped weight
    ``pi_theta / (pi_theta + shaping_gamma)``, which amplifies the gradient of the trace tokens the policy finds
    unlikely; logs ``shaped``."""
    shaping_gamma: float = 0.1
    """``trace_logprobs=shaping``: LUFFY's ``gamma`` in ``f(pi) = pi / (pi + gamma)`` (> 0; the paper's 0.1)."""
