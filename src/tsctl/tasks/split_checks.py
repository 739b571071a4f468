"""Splits that would change a run's numbers without a word: refused, or counted in a note.

- An empty held-out split, where held-out problems are scored: refused (accuracy 0 and pass@1 NaN would be
  logged). One smaller than the evaluation asks for (``trainer.eval_problems``) is noted with its size: its
  accuracy moves in steps of 1/size.
- A held-out prompt that is also a train prompt (the same question text): refused unless
  ``task.heldout_overlap=allow``, then counted; held-out accuracy would partly measure prompts trained on
  (a file of 300 copies of one row would score 1.000).
- A prompt repeated within a split: counted (it weighs more in training, or in the held-out score).

The built-in generators give distinct, disjoint splits, so these speak of data files.
"""

from __future__ import annotations

from collections.abc import Sequence

from tsctl.config.schema import TsctlConfig
from tsctl.io.progress import console
from tsctl.tasks.base import Problem, Task
from tsctl.tasks.records import DataError

def check_splits(train: Sequence[Problem], heldout: Sequence[Problem], *, scored: int, overlap: str) -> list[str]:
    """Check a task's ``train`` and ``heldout`` splits; return the notes to print (empty when there is nothing to say).

    Args:
        train: the train split's problems.
        heldout: the held-out split's problems.
        scored: held-out problems the command scores (0: none, the held-out split is not read).
        overlap: ``task.heldout_overlap``: ``error`` or ``allow``.

    Raises:
        DataError: an empty held-out split that is scored, or held-out prompts among the train prompts with
            ``overlap=error``.
    """
    notes = []
    if scored and not heldout:
        raise DataError(
            "the held-out split has no problem, so held-out accuracy would be logged as 0 and pass@1 as NaN; give the task more "
            "problems (a file task holds task.file.heldout_fraction of its rows out, or reads task.file.heldout_path=<file>), "
            "or set trainer.eval_every=0 to train without held-out evaluation"
        )
    if scored and len(heldout) < scored:
        notes.append(f"the held-out split has {len(heldout)} problem(s), fewer than the {scored} trainer.eval_problems asks for: "
                     f"held-out accuracy moves in steps of 1/{len(heldout)}")
    seen = {p.question.strip() for p in train}
    shared = sum(p.question.strip() in seen for p in heldout)
    if shared and overlap != "allow":
        raise DataError(
            f"{shared} of the {len(heldout)} held-out prompts are also train prompts (the same question text), so held-out accuracy "
            "would partly measure prompts trained on; remove them from the held-out data (or give task.file.heldout_path a file "
            "of other problems), or accept it with task.heldout_overlap=allow"
        )
    if shared:
        notes.append(f"{shared} of the {len(heldout)} held-out prompts are also train prompts (task.heldout_overlap=allow)")
    for split, problems in (("train", train), ("held-out", heldout)):
        distinct = len({p.question.strip() for p in problems})
        if distinct < len(problems):
            notes.append(f"the {split} split repeats prompts: {len(problems) - distinct} of its {len(problems)} repeat an earlier one "
                         f"({distinct} distinct)")
    return notes


def check_task(task: Task, cfg: TsctlConfig, scored: int) -> None:
    """:func:`check_splits` of ``task`` under ``cfg.task.heldout_overlap``, its notes printed."""
    for note in check_splits(task.problems("train"), task.problems("heldout"), scored=scored, overlap=cfg.task.heldout_overlap):
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
