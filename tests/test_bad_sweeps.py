"""The catalogue of bad inputs (see ``tests/catalogue.py``): sweeps that would run something else than asked.

- A sweep point is skipped (or resumed) only when what it ran is what this command would run; otherwise the
  sweep is refused with each changed key, and a completed point's files are never rewritten.
- ``tsctl ablate`` without ``name=`` says which folder it starts and how to add the points to an existing sweep.
- A ratio whose seeded count is another ratio's is refused; a run records its seeded count.

Refusals of the config alone (points that compose to the same run, settings a command would ignore) are in
``tests/test_config_refusals.py``.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

from catalogue import passes, refused, snapshot
from conftest import micro_args, tsctl
from tsctl.io.run_identity import CONFIG_DIGEST, config_digest, config_values

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    """The session's model cache with the micro model warmed up (so no command here prints its warm-up)."""
    tsctl("warmup", *micro_args(tmp_path_factory.mktemp("warm"), model_cache))
    return model_cache


def one_step(runs: Path, cache: Path) -> list[str]:
    """Micro overrides of one training step into ``runs``."""
    return [*micro_args(runs, cache), "trainer.steps=1", "trainer.save_every=1"]


def ran(saved: Path, text: str, digest: bool = True) -> None:
    """Make ``saved`` (a run's config.yaml) the config ``text`` the run ran, its manifest's digest that of ``text`` (as a
    run of that config records it), or none (``digest`` off: a run from before the digest was recorded)."""
    saved.write_text(text)
    manifest = json.loads((saved.parent / "manifest.json").read_text())
    manifest.pop(CONFIG_DIGEST)
    (saved.parent / "manifest.json").write_text(json.dumps(manifest | ({CONFIG_DIGEST: config_digest(config_values(text))} if digest else {})))


def points_state(sweep: Path) -> dict:
    """Every file of every point folder of ``sweep`` (its report left out)."""
    return {k: v for k, v in snapshot(sweep).items() if "/report" not in k and k != str(sweep) and not k.endswith("multirun.yaml")}


def test_a_rerun_with_a_changed_key_is_refused_and_its_points_are_never_rewritten(tmp_path, warm):
    runs = tmp_path / "runs"
    args = [*one_step(runs, warm), "ratio=0,25", "name=ext"]
    tsctl("ablate", *args)
    sweep = runs / "default" / "ext"
    points = points_state(sweep)
    line = refused([runs], "ablate", *args, "trainer.lr=1e-3", words=(
        f"sweep {sweep} holds point(s) that ran another config than this command would run (ratio=0, ratio=25: trainer.lr 5e-05 -> 0.001)",
        f"rerun with the values they ran with (see {sweep / 'ratio=0' / 'config.yaml'})", "or choose another name=...",
    ))
    assert "overrides.yaml" not in line
    again = passes("ablate", *args, words=("point ratio=0: completed, skipped", "point ratio=25: completed, skipped"))  # the saved values
    assert "starting" not in again and points_state(sweep) == points  # not one byte of a completed point rewritten
    overrides = yaml.safe_load((sweep / "ratio=0" / ".hydra" / "overrides.yaml").read_text())
    assert "ratio=0" in overrides and not any(o.startswith("trainer.lr") for o in overrides)  # what the point ran, as the report labels it
    passes("ablate", *[a for a in args if a != "name=ext"], "trainer.lr=1e-3", "name=ext-lr", words=("point ratio=25: starting",))  # another name
    assert json.loads((runs / "default" / "ext-lr" / "ratio=0" / "manifest.json").read_text())["status"] == "completed"


def test_without_a_name_a_sweep_says_which_folder_it_starts_and_how_to_extend_one(tmp_path, warm):
    runs = tmp_path / "runs"
    base = one_step(runs, warm)
    first = passes("ablate", *base, "seed=0,1")
    [old] = re.findall(r"into a new folder (\S+) \(named by a hash of the points\); to add them to an existing sweep instead, rerun with "
                       r"name=<that sweep's folder>\n", first)
    extended = passes("ablate", *base, "seed=0,1,2", f"name={Path(old).name}")
    assert extended.count("completed, skipped") == 2 and "point seed=2: starting" in extended
    line = tsctl("ablate", *base, "seed=0,1,2,3", check=False, TSCTL_KILL_AT="step-sampled:1").stderr  # killed once it has said where
    assert f"a new folder {runs / 'default'}" in line and f"e.g. name={Path(old).name}" in line

    saved = Path(old) / "seed=0" / "config.yaml"  # a point that ran another learning rate (as under an older default)
    ran(saved, saved.read_text().replace("lr: 5.0e-05", "lr: 0.0001"))
    line = refused([runs], "ablate", *base, "seed=0,1", words=(
        "seed=0: trainer.lr 0.0001 -> 5e-05", "set the changed keys on the command line (trainer.lr=5e-05), which names a new sweep folder",
    ))
    fixed = passes("ablate", *base, "seed=0,1", "trainer.lr=5e-05")
    assert "into a new folder" in fixed and "point seed=0: starting" in fixed


def test_a_ratio_that_seeds_another_ratios_count_is_refused_and_the_run_records_its_count(tmp_path, warm):
    runs = tmp_path / "runs"
    args = [*one_step(runs, warm), "name=r"]
    refused([tmp_path], "train", *args, "ratio=30", words=(
        "'ratio'", "ratio=30 seeds round(4 x 30 / 100) = 1 of the trainer.n=4 samples of each group, which is ratio=25, not 30",
        "use a ratio that is exact at trainer.n=4: ratio=25 or ratio=50, or trainer.n=10 where ratio=30 is exact",
    ))
    passes("train", *args, "ratio=50", words=("run complete",))
    run = runs / "default" / "r"
    assert yaml.safe_load((run / "config.yaml").read_text())["seeded_per_group"] == 2
    assert json.loads((run / "manifest.json").read_text())["seeded_per_group"] == 2
    assert "\nseeded_per_group: 3\n" in passes("train", *micro_args(runs, warm), "ratio=30", "trainer.n=10", "trainer.mini_batches=4", "--cfg", "job")


def test_a_setting_of_an_engine_the_points_do_not_run_is_no_change(tmp_path, warm):
    # runs saved before vLLM's dtype and enable_sleep_mode defaulted to null (and moved into the engine.vllm block)
    # hold vLLM's old defaults at their old place, engine.dtype and engine.enable_sleep_mode; under engine=hf neither is read, so their sweep
    # is skipped and a run resumes as before, while a key hf reads is a change
    runs = tmp_path / "runs"
    args = [*one_step(runs, warm), "seed=0,1", "name=old"]
    tsctl("ablate", *args)
    for point in ("seed=0", "seed=1"):
        saved = runs / "default" / "old" / point / "config.yaml"
        config = yaml.safe_load(saved.read_text())
        config["engine"] |= {"dtype": "bfloat16", "enable_sleep_mode": True}
        ran(saved, yaml.safe_dump(config), digest=False)
    again = passes("ablate", *args, words=("point seed=0: completed, skipped", "point seed=1: completed, skipped"))
    assert "starting" not in again
    refused([runs], "ablate", *args, "engine.temperature=0.7", words=("engine.temperature 0.6 -> 0.7",))
