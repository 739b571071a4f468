"""The Thinking Seeds knobs read in one place (``config/knobs.py``): ``refresh=0`` is one window of the whole run
wherever a window is used, ``ratio`` decides a run's name and its seeded count, and a ratio that seeds no sample is
refused once, in one line, before anything is built or written."""

from pathlib import Path

from typer.testing import CliRunner

from tsctl.cli import app
from tsctl.config.knobs import refreshes, seeded_count, uses_seeds, window_length
from tsctl.config.schema import TsctlConfig
from tsctl.io.runs import run_name
from tsctl.runconfig import compose_config
from tsctl.seeds.base import arm_of, window


def knobs(ratio: float, refresh: int, steps: int) -> TsctlConfig:
    cfg = TsctlConfig()
    cfg.ratio, cfg.refresh, cfg.trainer.steps = ratio, refresh, steps
    return cfg


def test_refresh_zero_is_one_window_of_the_whole_run():
    once = knobs(25, 0, 30)
    assert (window_length(once), refreshes(once)) == (30, False)
    assert {window(step, window_length(once), 30) for step in (0, 17, 29)} == {(0, 30)}
    assert arm_of(0, 29, window_length(once)) == 0  # the initial model serves every step as the window's own weights
    every10 = knobs(25, 10, 25)
    assert (window_length(every10), refreshes(every10)) == (10, True)
    assert [window(step, 10, 25) for step in (0, 9, 10, 24)] == [(0, 10), (0, 10), (10, 20), (20, 25)]
    assert arm_of(0, 24, 10) == 2 and arm_of(20, 24, 10) == 0
    assert window_length(knobs(25, 50, 25)) == 25  # a window longer than the run is the run


def test_ratio_decides_seeds_count_and_name():
    plain, seeded = knobs(0, 10, 5), knobs(25, 10, 5)
    assert (uses_seeds(plain), seeded_count(plain), run_name(plain)) == (False, 0, "ratio0-seed0")
    assert (uses_seeds(seeded), seeded_count(seeded), run_name(seeded)) == (True, 2, "ratio25-uniform-refresh10-seed0")
    composed = compose_config(["ratio=50", "trainer.n=4", "trainer.mini_batches=2"])
    assert composed.cfg.seeded_per_group == composed.node.seeded_per_group == 2  # recorded, as the run's config saves it


def test_a_ratio_that_seeds_no_sample_is_refused_once_before_anything_is_built(tmp_path: Path):
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["train", "ratio=5", f"runs_dir={runs}"])
    assert result.exit_code == 2 and result.output.splitlines() == [
        "error: config error at 'ratio': ratio=5 seeds round(8 x 5 / 100) = 0 of the trainer.n=8 samples of each group, so no sample is seeded; "
        "use a ratio that is exact at trainer.n=8: ratio=0 (plain DAPO) or ratio=12.5, or trainer.n=20 where ratio=5 is exact"
    ]
    assert not runs.exists()  # no model cache, no run folder
