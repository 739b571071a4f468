"""The non-finite guard: a NaN or Inf loss, gradient or parameter stops the run (or skips a mini-batch).

Two checks per mini-batch, each one fused reduction and one host sync:

- before the optimiser step, the mini-batch's summed loss and the global gradient norm (the one
  gradient clipping uses; a NaN or Inf in any gradient makes it non-finite);
- after the optimiser step, the largest absolute parameter value (one inf-norm over every
  parameter: NaN when any parameter is NaN, Inf when any is Inf, never an overflow of finite values).

Only once a check fails is each tensor looked at, to name the first bad one.

Under ``torchrun`` the loss checked is the sum over the ranks and both norms are global (DTensor
norms), so every rank takes the same decision; naming the bad tensor looks at this rank's shards.

``trainer.nonfinite=stop`` (default) raises :class:`NonFiniteError` at the first bad mini-batch, so
the loop saves no checkpoint with these weights and the run's last good checkpoint stays.
``trainer.nonfinite=skip`` drops a mini-batch whose loss or gradient is non-finite (no optimiser
step and no learning-rate scheduler step, its gradients zeroed, its metrics left out, counted in the
step's ``nonfinite_skips``) and stops at the first one past ``trainer.max_nonfinite_skips`` skips
in the run. Non-finite parameters always stop the run: the step is applied by then, and undoing it
would need a copy of the weights.
"""

from __future__ import annotations

from typing import Iterable

import torch

from tsctl.distributed.fsdp import full_tensor, local_tensor


class NonFiniteError(RuntimeError):
    """A non-finite loss, gradient or parameter stopped the run.

    Attributes:
        step: the training step (1-based, as in ``metrics.jsonl``).
        kind: ``loss``, ``gradient`` or ``parameter``.
        tensor: the first non-finite tensor (``loss`` or a parameter name).
    """

    def __init__(self, step: int, kind: str, tensor: str, message: str) -> None:
        super().__init__(message)
        self.step, self.kind, self.tensor = step, kind, tensor

    def manifest_fields(self) -> dict[str, object]:
        """What the run's manifest records about the failure."""
        return {"failed_step": self.step, "nonfinite": self.kind, "nonfinite_tensor": self.tensor}


class NonFiniteGuard:
    """Checks every mini-batch of a run; counts the mini-batches it skipped.

    Args:
        mode: ``stop`` or ``skip`` (``trainer.nonfinite``).
        max_skips: most mini-batches a run may skip (``trainer.max_nonfinite_skips``).
        skips: mini-batches skipped so far (restored from a checkpoint on resume).
    """

    def __init__(self, mode: str = "stop", max_skips: int = 0, skips: int = 0) -> None:
        self.mode, self.max_skips, self.skips = mode, max_skips, skips
        self.step = 0
        self.skipped_this_step = 0

    def begin_step(self, step: int) -> None:
        """Start training step ``step`` (1-based, for messages and the step's skip count)."""
        self.step, self.skipped_this_step = step, 0

    def admit(self, model: torch.nn.Module, loss: torch.Tensor, grad_norm: torch.Tensor, mini_batch: int) -> bool:
        """True when the mini-batch's optimiser step may run; False to skip it; raises to stop the run.

        Args:
            loss: 0-d sum of the mini-batch's micro-batch losses.
            grad_norm: 0-d global gradient norm of the mini-batch.
            mini_batch: 1-based index of the mini-batch within the step (for messages).
        """
        if bool(torch.isfinite(torch.stack([loss.detach().float(), grad_norm.detach().float()])).all()):
            return True
        if not bool(torch.isfinite(loss)):
            kind, tensor, value = "loss", "loss", float(loss)
        else:
            kind, value = "gradient", float(grad_norm)
            tensor = _first_nonfinite((name, p.grad) for name, p in model.named_parameters() if p.grad is not None)
        where = f"step {self.step}, mini-batch {mini_batch}"
        if self.mode == "skip" and self.skips < self.max_skips:
            self.skips += 1
            self.skipped_this_step += 1
            return False
        what = f"gradient at {where}: {tensor} (global grad norm {value})" if kind == "gradient" else f"loss ({value}) at {where}"
        limit = f", after {self.skips} skipped (trainer.max_nonfinite_skips={self.max_skips})" if self.mode == "skip" else ""
        raise NonFiniteError(
            self.step, kind, tensor,
            f"non-finite {what}{limit}; the run stopped before the optimiser step, so no checkpoint "
            f"holds these weights (earlier ones are kept). Start a new run with a lower trainer.lr"
            + ("" if self.mode == "skip" else ", or skip such mini-batches with trainer.nonfinite=skip"),
        )

    def check_parameters(self, model: torch.nn.Module, mini_batch: int) -> None:
        """Raise :class:`NonFiniteError` when any parameter is non-finite after the optimiser step."""
        params = [p.detach() for p in model.parameters()]
        if bool(torch.isfinite(full_tensor(torch.nn.utils.get_total_norm(params, norm_type=float("inf"))))):
            return
        tensor = _first_nonfinite((name, p.detach()) for name, p in model.named_parameters())
        raise NonFiniteError(
            self.step, "parameter", tensor,
            f"non-finite parameter at step {self.step}, mini-batch {mini_batch}: {tensor} after the optimiser step; "
            "the run stopped without saving these weights (earlier checkpoints are kept). Start a new run "
            "with a lower trainer.lr (and trainer.max_grad_norm > 0)",
        )


def _first_nonfinite(tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """Name of the first tensor with a NaN or Inf (only called once a fused check has failed)."""
    for name, tensor in tensors:
        if not bool(torch.isfinite(local_tensor(tensor)).all()):  # under FSDP: this rank's shard
            return name
    return "unknown"
