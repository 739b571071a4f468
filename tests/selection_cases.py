"""What the tests of the token-selecting policy losses (``clip_cov``, ``kl_cov``, ``forking_tokens``) share: the
hand-computed 2x3 batch and its policy term, the one-line refusal of a setting, and a micro train's records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from loss_terms import policy_term
from tsctl.algo.aggregations import loss_norms
from tsctl.config.errors import ConfigError
from tsctl.runconfig import compose_config

CLIP = {"clip_low": 0.2, "clip_high": 0.28}


def hand_batch(old_shift: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """2x3, every token a loss token; row 0 A = +1 with log pi (-1, -2, -3), row 1 A = -1 with log pi (-1, -2, -6).
    pi_old = pi_theta (every ratio 1) unless ``old_shift`` [B, T] moves log pi_old.

    Returns:
        ``logprobs`` [2, 3] (with grad), ``old`` [2, 3], ``advantages`` [2], ``mask`` [2, 3] bool.
    """
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -2.0, -6.0]], requires_grad=True)
    old = logprobs.detach().clone() if old_shift is None else logprobs.detach() + old_shift
    return logprobs, old, torch.tensor([1.0, -1.0]), torch.ones(2, 3, dtype=torch.bool)


def hand_term(policy_loss: str, *, old_shift: torch.Tensor | None = None, prefix: torch.Tensor | None = None, **arguments):
    """The token-mean (``dapo``) policy term of ``policy_loss`` on :func:`hand_batch`, with PPO's clip 0.2 / 0.28 and
    ``arguments`` (its ``settings``, ``generator``, ``entropy``), after ``backward``.

    Returns:
        the 0-d loss, the entry's ``[2, 3]`` per-token metrics and the ``[2, 3]`` gradient of the loss in ``logprobs``.
    """
    logprobs, old, adv, mask = hand_batch(old_shift)
    token_norm, seq_norm = loss_norms(mask)
    loss, metrics = policy_term("dapo", logprobs, old, adv, mask, policy_loss=policy_loss, prefix=prefix,
                                token_norm=token_norm, seq_norm=seq_norm, **arguments, **CLIP)
    loss.backward()
    return loss, metrics, logprobs.grad


def assert_refused(overrides: list[str], key: str, words: str) -> None:
    """Composing ``overrides`` is refused in one line naming ``key`` and saying ``words``."""
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, idle=True)
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value)


def micro_train(micro: list[str], tmp_path: Path, name: str, ratio: int, *overrides: str) -> tuple[list[dict], str]:
    """Train the micro run ``name`` at ``ratio`` with ``overrides`` (no evaluation); it must log 3 steps, each with a
    finite ``pg_loss``.

    Returns:
        its metric records, one a step, and the text of the config.yaml it saved.
    """
    from tsctl.stages.train import train

    train(compose_config([*micro, f"name={name}", f"ratio={ratio}", *overrides, "trainer.eval_every=0"], idle=True))
    run = tmp_path / "runs" / "default" / name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and all(math.isfinite(r["pg_loss"]) for r in records)
    return records, (run / "config.yaml").read_text()
