"""The one exception type for a user's configuration mistake."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value is unknown, of the wrong type or out of range.

    Attributes:
        key: dotted config key (``trainer.batch_size``).
        problem: what is wrong and what is allowed.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config error at '{key}': {problem}")
        self.key = key
        self.problem = problem


class EnvSettingError(ValueError):
    """An environment variable that tsctl or a library it calls reads holds a value that is refused.

    Attributes:
        name: the variable (``WANDB_MODE``).
        problem: what is wrong and what to do.
    """

    def __init__(self, name: str, value: str, problem: str) -> None:
        super().__init__(f"the environment sets {name}={value!r}: {problem}")
        self.name = name
        self.problem = problem
