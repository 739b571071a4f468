"""The one registry helper: registration order, lookups that name the valid entries, no name twice."""

import pytest

from tsctl.algo.losses import AGGREGATIONS
from tsctl.config.registry import Registry
from tsctl.engines.factory import ENGINES
from tsctl.seeds.selectors import SELECTORS
from tsctl.seeds.sources import SOURCES
from tsctl.seeds.truncation import STRATEGIES
from tsctl.tasks.registry import TASKS


def test_register_get_and_names_in_registration_order():
    shapes: Registry[int] = Registry("shape")
    shapes.register("square")(4)
    shapes.register("triangle")(3)
    assert shapes.get("triangle") == 3 and shapes.get("square") == 4 and shapes.names() == ("square", "triangle")


def test_an_unknown_name_is_one_line_listing_the_valid_ones():
    shapes: Registry[int] = Registry("shape")
    shapes.register("square")(4)
    shapes.register("triangle")(3)
    with pytest.raises(ValueError) as err:
        shapes.get("circle")
    assert str(err.value) == "unknown shape 'circle'; valid: square, triangle"


def test_a_name_registers_once():
    shapes: Registry[int] = Registry("shape")
    shapes.register("square")(4)
    with pytest.raises(ValueError, match="shape 'square' is already registered"):
        shapes.register("square")(5)
    assert shapes.get("square") == 4


@pytest.mark.parametrize(
    "registry, names",
    [
        (AGGREGATIONS, ("dapo", "grpo")),
        (STRATEGIES, ("fixed", "uniform", "boundary", "entropy", "schedule")),
        (TASKS, ("countdown", "arithmetic", "file")),
        (ENGINES, ("hf", "vllm")),
        (SELECTORS, ("latest", "oldest", "uniform", "max_entropy", "bandit")),
        (SOURCES, ("self", "model", "traces")),
    ],
)
def test_every_named_config_value_has_one_registry(registry, names):
    assert registry.names() == names
