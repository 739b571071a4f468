"""The policy side of a run: one :class:`Learner`, built once, that the step talks to through five verbs.

What it owns: the policy and its parallel wrapper (:class:`~tsctl.trainer.parallel.Parallel`, or
:class:`~tsctl.trainer.parallel.DataParallel` under ``torchrun``), AdamW and its learning-rate schedule
(:mod:`tsctl.trainer.optim`), the decoder layers compiled for the update (``trainer.compile``), the non-finite guard
(:mod:`tsctl.trainer.nonfinite`), the run's :class:`~tsctl.models.forward.Forward` and
:class:`~tsctl.algo.objective.Objective`, and the frozen KL reference (:mod:`tsctl.trainer.reference`).

Its verbs, in the order a step calls them:

- :meth:`Learner.score`: pi_old's log-probs and entropies, the ratio denominators, the reference's log-probs and the
  loss mask of a collated batch, written as its columns (the engine's log-probs are already there,
  :func:`tsctl.models.batch.collate`); returns the engine-vs-trainer log-prob gap (:mod:`tsctl.trainer.pi_old`);
- :meth:`Learner.update`: the optimiser steps on the scored batch (:mod:`tsctl.trainer.update`), its metrics;
- :meth:`Learner.sync`: the engine gets the updated weights;
- :meth:`Learner.save` and :meth:`Learner.load`: a checkpoint with what a resume needs, in one process or sharded
  over the ranks (:mod:`tsctl.io.checkpoints`, :mod:`tsctl.io.sharded_checkpoints`).

A run builds it from :func:`parallel_policy` (the policy loaded and wrapped), after the engine that samples from the
policy's copy (the engine decides whether pi_old may be its own log-probs) and before the KL reference takes any memory
the engine sized itself by.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from tsctl.algo.objective import Objective
from tsctl.algo.position_metrics import MetricSums
from tsctl.config.errors import ConfigError
from tsctl.config.knobs import uses_seeds
from tsctl.config.schema import TsctlConfig
from tsctl.distributed import world as ranks
from tsctl.engines.base import Engine
from tsctl.engines.own_logprobs import uses_engine_logprobs
from tsctl.io.checkpoints import load_state, rng_state, save_checkpoint
from tsctl.io.sharded_checkpoints import load_training_state, restore_rng, save_sharded_checkpoint
from tsctl.models.batch import RolloutBatch
from tsctl.models.compiled import CompiledLayers
from tsctl.models.forward import Forward
from tsctl.models.precision import compute_dtype, model_device
from tsctl.trainer.denominators import shaping_gamma
from tsctl.trainer.nonfinite import NonFiniteGuard
from tsctl.trainer.optim import load_trainable, make_optimizer
from tsctl.trainer.parallel import DataParallel, Parallel
from tsctl.trainer.pi_old import step_pi_old
from tsctl.trainer.reference import load_reference, reference_logprobs
from tsctl.trainer.update import loss_mask, policy_update


def parallel_policy(cfg: TsctlConfig, path: str, base: str, world: ranks.World = ranks.SINGLE) -> tuple[Parallel, PreTrainedTokenizerBase]:
    """The policy to train from ``path`` (the base model ``base`` or a checkpoint to resume,
    :func:`~tsctl.trainer.optim.load_trainable`), wrapped for the ranks of ``world`` (sharded under ``torchrun``),
    and its tokenizer."""
    if world.distributed and cfg.trainer.compile:
        raise ConfigError("trainer.compile", "compiling the update under torchrun (FSDP2) is not supported; run it as one process (tsctl train) or set trainer.compile=false")
    model, tokenizer = load_trainable(cfg, path, base)
    dtype = compute_dtype(cfg, model)
    return (DataParallel(model, world, dtype if dtype != torch.float32 else None) if world.distributed else Parallel(model)), tokenizer


class Learner:
    """The run's policy side (see the module docstring).

    Args:
        cfg: the run's config.
        parallel: the policy in its parallel wrapper (:func:`parallel_policy`); ``parallel.model`` is trained,
            ``parallel.inference`` samples and runs the no-grad forwards.
        tokenizer: saved with every checkpoint (None: a learner that never saves).
        engine: the rollout engine; where its token stats may stand for pi_old's (``trainer.old_logprobs``,
            :func:`~tsctl.engines.own_logprobs.uses_engine_logprobs`) :meth:`score` takes them. None: pi_old is
            always recomputed.
        base: the base model the KL reference loads from (``algo.kl_coef > 0``; with ``model.lora`` the policy with
            its adapter off); None: no reference.

    Attributes:
        model, parallel, tokenizer: as given (``model`` is ``parallel.model``).
        optimizer, scheduler: AdamW over the trainable parameters and its schedule (one step per optimiser step).
        reference: the frozen KL reference, else None.
        guard: the run's non-finite guard (its skip count persists across steps and checkpoints).
        forward: the trainer's forward settings, from ``trainer`` and ``model``.
        objective: the update's loss, from ``algo``.
        compiled: the policy's decoder layers compiled for the update (``trainer.compile``), else None.
        from_engine: whether pi_old is the engine's own log-probs.
    """

    def __init__(
        self, cfg: TsctlConfig, parallel: Parallel, tokenizer: PreTrainedTokenizerBase | None = None,
        engine: Engine | None = None, base: str | None = None,
    ) -> None:
        self.cfg, self.parallel, self.model, self.tokenizer = cfg, parallel, parallel.model, tokenizer
        self.from_engine = engine is not None and uses_engine_logprobs(cfg, engine, parallel.inference)
        self.optimizer, self.scheduler = make_optimizer(cfg, self.model)
        self.reference = load_reference(cfg, base, parallel.inference) if base is not None else None  # LoRA: the unsharded copy, adapter off
        self.guard = NonFiniteGuard(cfg.trainer.nonfinite, cfg.trainer.max_nonfinite_skips)
        self.forward = Forward.of(cfg)
        self.objective = Objective(cfg.algo, seeded=uses_seeds(cfg), shaping_gamma=shaping_gamma(cfg))
        self.compiled = CompiledLayers(self.model) if cfg.trainer.compile else None

    @property
    def device(self) -> torch.device:
        """Where the step's batch lives: the device of the policy's sampling copy."""
        return model_device(self.parallel.inference)

    def score(self, batch: RolloutBatch) -> dict[str, float]:
        """Write the columns the update reads into ``batch`` (collated on :attr:`device`): pi_old's log-probs and
        entropies (``old_logprobs``, ``old_entropy``), the ratio denominators, the reference's log-probs
        (``ref_logprobs``, with a reference) and the ``loss_mask``, each [B, T]. No-grad forwards over the ranks'
        rows. Returns the ``logprob_gap/*`` metrics of a recomputed pi_old (empty when it is the engine's)."""
        old = step_pi_old(self.cfg, batch, self.parallel, self.forward, self.from_engine)
        batch.old_logprobs, batch.old_entropy, batch.denominators = old.logprobs, old.entropy, old.denominators
        if self.reference is not None:
            placement = self.cfg.algo.ref_placement
            batch.ref_logprobs = self.parallel.map_rows(lambda rows: (reference_logprobs(self.reference, rows, self.forward, placement),), batch)[0]
        batch.loss_mask = loss_mask(batch, self.cfg)
        return old.gap

    def update(self, batch: RolloutBatch, step: int) -> MetricSums:
        """The optimiser steps of step ``step`` (from 0) on the scored ``batch`` (:func:`~tsctl.trainer.update.policy_update`);
        its metrics. A non-finite loss, gradient or parameter raises :class:`~tsctl.trainer.nonfinite.NonFiniteError`
        (or skips the mini-batch, ``trainer.nonfinite=skip``)."""
        self.guard.begin_step(step + 1)
        return policy_update(self, batch, step)

    def sync(self, engine: Engine) -> None:
        """Give ``engine`` the weights of the update just made (gathered from the shards under ``torchrun``)."""
        self.parallel.sync_engine(engine)

    def save(self, folder: Path, step: int) -> Path:
        """Write checkpoint ``folder/step-<step>``: the weights (an adapter alone with ``model.lora``), the tokenizer, the
        optimiser, the schedule, the RNG states and the non-finite skips. Under ``torchrun`` every rank calls it (the
        shards of :mod:`tsctl.io.sharded_checkpoints`). Returns the checkpoint's folder."""
        state = {"scheduler": self.scheduler.state_dict(), "rng": rng_state(), "nonfinite_skips": self.guard.skips}
        if self.parallel.world.distributed:
            return save_sharded_checkpoint(folder, step, self.model, self.optimizer, self.parallel.inference, self.tokenizer, state)
        return save_checkpoint(folder, step, self.model, self.tokenizer, {"optimizer": self.optimizer.state_dict(), **state})

    def load(self, path: Path) -> None:
        """Resume from checkpoint ``path`` (written by any number of ranks), whose weights the policy was loaded from
        (:func:`parallel_policy`): the optimiser (and, from shards, the weights), the schedule, this rank's RNG states
        and the non-finite skips."""
        state = load_state(path)
        load_training_state(path, state, self.model, self.optimizer)
        self.scheduler.load_state_dict(state["scheduler"])
        restore_rng(path, state)
        self.guard.skips = state.get("nonfinite_skips", 0)
