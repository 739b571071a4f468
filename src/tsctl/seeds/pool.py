"""The behaviour pool: the last ``seeds.pool_size`` snapshots of the policy, on disk, one per refresh window.

When a refresh window opens at step ``w`` the current weights are saved as ``seeds/pool/step-<w>/``
(an HF ``save_pretrained`` folder, or with ``model.lora`` the adapter's folder of a few MB (:mod:`tsctl.io.adapters`),
with the tokenizer, plus ``snapshot.json``: the step and, for a
selector declaring ``probes`` such as ``max_entropy``, the snapshot's probe surprisal), then all but the newest ``pool_size``
snapshots are deleted. A snapshot is written into a temp folder renamed when complete, so a killed
process never leaves one that :meth:`BehaviourPool.snapshots` would list.

Resume: snapshots are a pure function of the training trajectory, which a resumed run repeats
exactly, so the folders a killed run left are kept and reused (:meth:`BehaviourPool.add` does not
rewrite an existing one), as its seed shards are. The arms of a window are the snapshots taken at
or before its first step (:meth:`BehaviourPool.arms`), so one the killed run wrote later is not an
arm early.

Only runs whose selector can pick an older snapshot write a pool (it declares ``pool``;
:data:`tsctl.seeds.selectors.SELECTORS`); ``latest`` samples from the live weights and writes nothing here.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tsctl.config.rng import Stream, step_seed
from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine, Request, SamplingParams
from tsctl.io import atomic
from tsctl.io.adapters import holds_weights, save_weights
from tsctl.io.checkpoints import step_of
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import Problem

SNAPSHOT_FILE = "snapshot.json"


@dataclass(frozen=True)
class Snapshot:
    """One behaviour snapshot: the policy's weights at the start of the refresh window at ``step``.

    Attributes:
        step: the training step whose starting weights it holds.
        path: its HF model folder, or its adapter folder.
        surprisal: mean per-token surprisal of its probe responses (None when not measured).
    """

    step: int
    path: Path
    surprisal: float | None = None


class BehaviourPool:
    """Snapshots under ``folder``, newest ``size`` kept."""

    def __init__(self, folder: Path, size: int) -> None:
        if size < 1:
            raise ValueError(f"a behaviour pool holds at least one snapshot, got size={size}")
        self.folder, self.size = folder, size

    def path(self, step: int) -> Path:
        return self.folder / f"step-{step:06d}"

    def snapshots(self) -> list[Snapshot]:
        """Complete snapshots on disk, newest first."""
        found = []
        for path in self.folder.glob("step-*") if self.folder.is_dir() else []:
            step = step_of(path)
            if step is not None and (path / SNAPSHOT_FILE).is_file() and holds_weights(path):
                meta = json.loads((path / SNAPSHOT_FILE).read_text())
                found.append(Snapshot(step, path, meta.get("surprisal")))
        return sorted(found, key=lambda s: -s.step)

    def add(self, step: int, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, surprisal: float | None = None) -> None:
        """Save ``model`` as the snapshot of ``step`` (unless it is already there), then prune to ``size``."""
        final = self.path(step)
        if not (final / SNAPSHOT_FILE).is_file():
            with atomic.staged_dir(final) as tmp:
                save_weights(model, tmp)
                tokenizer.save_pretrained(tmp)
                atomic.write_json(tmp / SNAPSHOT_FILE, {"step": step, "surprisal": surprisal})
        self.prune()

    def prune(self) -> None:
        """Delete all but the newest ``size`` snapshots (and temp folders of interrupted writes)."""
        for snapshot in self.snapshots()[self.size :]:
            shutil.rmtree(snapshot.path)
        for tmp in self.folder.glob(".step-*.tmp") if self.folder.is_dir() else []:
            shutil.rmtree(tmp, ignore_errors=True)

    def arms(self, first: int) -> list[Snapshot]:
        """The arms of the window opening at ``first``: the newest ``size`` snapshots taken at or before it."""
        return [s for s in self.snapshots() if s.step <= first][: self.size]


def probe_problems(problems: Sequence[Problem], count: int, seed: int) -> list[Problem]:
    """The fixed probe set: ``count`` train problems drawn once per run seed (all when fewer)."""
    rng = np.random.default_rng([seed, int(Stream.PROBE)])
    picked = rng.choice(len(problems), size=min(count, len(problems)), replace=False)
    return [problems[int(i)] for i in picked]


def probe_surprisal(engine: Engine, formatter: PromptFormatter, probes: Sequence[Problem], cfg: TsctlConfig) -> float:
    """Mean surprisal ``-log pi(o_t)`` per generated token of ``seeds.probe_samples`` responses per probe prompt.

    Its expectation is the policy's per-token entropy along its own responses (at the rollout
    temperature): how diverse they are. Every snapshot is probed with the same sampling seed, so
    the comparison between snapshots is not blurred by different random draws.
    """
    e = cfg.engine
    requests = [Request(prompt_ids=formatter.prompt_ids(p.question)) for p in probes for _ in range(cfg.seeds.probe_samples)]
    params = SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=step_seed(cfg.seed, 0, Stream.PROBE))
    logprobs = [lp for c in engine.generate(requests, params) for lp in c.logprobs]
    return float(-np.mean(logprobs)) if logprobs else 0.0
