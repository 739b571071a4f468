"""One step's samples: prompt, optional behaviour-policy prefix, on-policy continuation, reward."""

from __future__ import annotations

from dataclasses import dataclass, field

# Token sources, per response token (stored as int8 in batches; named by tsctl.algo.position_metrics.SOURCE_NAMES).
PLAIN, PREFIX, SUFFIX = 0, 1, 2


@dataclass
class Sample:
    """A response to one prompt: ``prefix_ids`` (written by pi_b, may be empty) + ``generated_ids``.

    Attributes:
        group: index of the prompt within the step (the GRPO group).
        prompt_id: the problem's id.
        prompt_ids: prompt token ids, shape [P].
        prefix_ids: behaviour-policy prefix token ids, shape [S] (empty for a plain sample, and for a
            seeded one whose seed was cut at 0).
        prefix_logprobs: pi_b log-probs of ``prefix_ids`` from a teacher-forced fp32 forward, shape [S].
        behaviour_step: training step of the pi_b checkpoint (-1 for a plain sample).
        behaviour_checkpoint: the pi_b checkpoint ("" for a plain sample).
        generated_ids: tokens the rollout policy pi_old generated, shape [G].
        generated_logprobs: the sampler's log-probs of ``generated_ids``, shape [G].
        finished: the response ended with EOS (False: cut at the length limit).
        reward: the verifier's score of the whole response, in [0, 1].
        entropies: the rollout policy's entropy at each response token (prefix, then
            continuation), shape [S + G], as the engine reported it; empty when it reports none.
        seed_reward, seed_fraction, seed_predicted: its seed's behaviour response's grade, prefix fraction and the
            seed controller's predicted success (:class:`tsctl.seeds.base.Seed`); None where unknown and for a plain sample.
        seeded: the sample was assigned a seed (even one cut at 0, with an empty prefix); it counts
            as seeded in advantage statistics (``seeds.adv_group``) and metrics, and its generated
            tokens are SUFFIX. A sample built with a non-empty prefix is always seeded.
        answer_found: the response states a final answer the task's grader can read, right or wrong
            (:func:`tsctl.tasks.grading.answer_found`).
    """

    group: int
    prompt_id: str
    prompt_ids: list[int]
    generated_ids: list[int]
    generated_logprobs: list[float]
    finished: bool
    prefix_ids: list[int] = field(default_factory=list)
    prefix_logprobs: list[float] = field(default_factory=list)
    behaviour_step: int = -1
    behaviour_checkpoint: str = ""
    reward: float = 0.0
    entropies: list[float] = field(default_factory=list)
    seeded: bool = False
    answer_found: bool = False
    seed_reward: float | None = None
    seed_fraction: float | None = None
    seed_predicted: float | None = None

    def __post_init__(self) -> None:
        self.seeded = self.seeded or bool(self.prefix_ids)

    @property
    def response_ids(self) -> list[int]:
        """The whole response: prefix then continuation."""
        return self.prefix_ids + self.generated_ids

    def sources(self) -> list[int]:
        """Per response token: PREFIX, SUFFIX (after a prefix) or PLAIN."""
        rest = SUFFIX if self.seeded else PLAIN
        return [PREFIX] * len(self.prefix_ids) + [rest] * len(self.generated_ids)
