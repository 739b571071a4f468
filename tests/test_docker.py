"""The Docker images: one app definition on the GPU and CPU bases, the host pip settings a build is given, and
(marked ``docker``, run only by ``python -m pytest -m docker``) scripts/docker_check.sh building the CPU image and
running a micro job in it."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
if not (ROOT / "Dockerfile").is_file():  # inside the image: its build context leaves these files out
    pytest.skip("the Dockerfile and scripts/ are not in this tree", allow_module_level=True)
tomllib = pytest.importorskip("tomllib")
DOCKERFILE = (ROOT / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def load_settings() -> ModuleType:
    """``scripts/docker_pip_settings.py`` as a module."""
    spec = importlib.util.spec_from_file_location("docker_pip_settings", ROOT / "scripts" / "docker_pip_settings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stage(name: str) -> str:
    """The Dockerfile's lines from ``FROM ... AS name`` to the next ``FROM``."""
    start = re.search(rf"^FROM \S+ AS {name}$", DOCKERFILE, re.M)
    assert start, f"no stage {name}"
    end = DOCKERFILE.find("\nFROM ", start.end())
    return DOCKERFILE[start.start() : end if end != -1 else None]


def test_the_gpu_and_cpu_images_share_every_step_after_their_base():
    froms = re.findall(r"^FROM (\S+) AS (\S+)$", DOCKERFILE, re.M)
    assert froms == [
        ("vllm/vllm-openai:v${VLLM_VERSION}", "gpu-base"), ("${BASE}", "cpu-base"), ("${DEVICE}-base", "requirements"),
        ("${DEVICE}-base", "app"), ("app", "test"), ("app", "runtime"),
    ]
    assert re.search(r"^ARG DEVICE=gpu$", DOCKERFILE, re.M) and re.search(r"^ARG BASE=python:3.11-slim$", DOCKERFILE, re.M)
    for base, extras in (("gpu-base", "gpu dev"), ("cpu-base", "cpu dev")):
        assert f'TSCTL_EXTRAS="{extras}"' in stage(base)
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in stage("cpu-base")
    assert "--extra-index-url ${TORCH_INDEX}" in stage("cpu-base") and "TORCH_INDEX" not in stage("app")
    assert 'ENTRYPOINT ["tsctl"]' in stage("runtime") and 'CMD ["--help"]' in stage("runtime")


def test_the_requirements_step_lists_the_dependencies_and_the_extras_of_each_base(tmp_path, monkeypatch):
    code = re.search(r'RUN python3 -c "(.*)" > /tmp/requirements.txt', stage("requirements")).group(1)
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    extras = PYPROJECT["optional-dependencies"]
    for names in ("cpu dev", "gpu dev"):
        monkeypatch.setenv("TSCTL_EXTRAS", names)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code.replace("/tmp/pyproject.toml", str(tmp_path / "pyproject.toml")), {})
        listed = out.getvalue().splitlines()
        assert listed == PYPROJECT["dependencies"] + [r for e in names.split() for r in extras[e]]
    assert "torch==2.13.0" in extras["cpu"]


def test_the_install_needs_only_the_requirements_and_the_image_runs_as_a_user_with_volumes():
    app = stage("app")
    order = [app.index(s) for s in ("COPY --from=requirements", "-r requirements.txt", "COPY pyproject.toml", "COPY src", "--no-deps .")]
    assert order == sorted(order)  # a source or pytest-settings change reinstalls nothing
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CERT", "PIP_CONSTRAINT", "PIP_TRUSTED_HOST"):
        assert re.search(rf"^ARG {name}$", app, re.M) and f"{name}=" not in app  # build arguments, never ENV
    assert "USER 10001:10001" in app and 'VOLUME ["/home/tsctl/.cache/huggingface", "/work/runs"]' in app


def test_the_host_pip_settings_take_pips_precedence_and_join_lists():
    settings = load_settings()
    listed = "\n".join([
        ":env:.find-links='/opt/wheels'",
        "global.find-links='/elsewhere'",
        "global.extra-index-url='file:///opt/pypi/simple\\nhttps://example.org/simple'",
        "install.cert='/etc/a.crt'",
        "global.cert='/etc/b.crt'",
        "global.timeout='60'",
    ])
    assert settings.parse_config_list(listed) == {
        "find-links": "/opt/wheels",
        "extra-index-url": "file:///opt/pypi/simple https://example.org/simple",
        "cert": "/etc/a.crt",
    }


def test_the_local_paths_move_under_the_mount_root_and_are_mounted_once(tmp_path):
    settings = load_settings()
    (tmp_path / "pypi" / "simple").mkdir(parents=True)
    (tmp_path / "wheels" / "more").mkdir(parents=True)
    (tmp_path / "ca.crt").write_text("")
    config = {
        "extra-index-url": f"file://{tmp_path}/pypi/simple https://example.org/simple",
        "find-links": f"{tmp_path}/wheels {tmp_path}/wheels/more {tmp_path}/missing https://example.org/links",
        "cert": f"{tmp_path}/ca.crt",
        "trusted-host": "example.org",
    }
    root = Path("/dev/shm/pip-host")
    inside = root / tmp_path.relative_to("/")
    rewritten, mounts = settings.moved(config, root)
    assert rewritten == {
        "extra-index-url": f"file://{inside}/pypi/simple https://example.org/simple",
        "find-links": f"{inside}/wheels {inside}/wheels/more {inside}/missing https://example.org/links",
        "cert": f"{inside}/ca.crt",
        "trusted-host": "example.org",
    }
    # a file:// index with the folder beside it (its links go ../../files/...), a folder inside another one once
    assert mounts == [(tmp_path / "ca.crt", inside / "ca.crt"), (tmp_path / "pypi", inside / "pypi"), (tmp_path / "wheels", inside / "wheels")]
    kept, dropped = settings.remote_only(config)
    assert kept == {"extra-index-url": "https://example.org/simple", "find-links": "https://example.org/links", "trusted-host": "example.org"}
    assert [d for d, _ in dropped] == [f"file://{tmp_path}/pypi/simple", f"{tmp_path}/wheels", f"{tmp_path}/wheels/more", f"{tmp_path}/missing", f"{tmp_path}/ca.crt"]


@pytest.mark.parametrize("args, message", [
    (["--runs", "{runs}"], "error: --runs {runs} is not empty: give a new or empty folder"),
    (["--engine", "nerdctl"], "error: --engine nerdctl is not one this script knows: use docker or podman"),
    (["--base"], "error: --base needs a value: see {script} --help"),
    (["--rebuild"], "error: unknown option --rebuild: see {script} --help"),
])
def test_the_check_refuses_a_bad_command_line_in_one_line_and_touches_nothing(tmp_path, args, message):
    runs = tmp_path / "runs"
    (runs / "default").mkdir(parents=True)
    (runs / "default" / "kept.txt").write_text("mine")
    script = ROOT / "scripts" / "docker_check.sh"
    done = subprocess.run([str(script), *(a.format(runs=runs) for a in args)], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message.format(runs=runs, script=script) + "\n")
    assert [p.name for p in runs.rglob("*")] == ["default", "kept.txt"] and (runs / "default" / "kept.txt").read_text() == "mine"


def working_engine() -> str | None:
    """docker or podman, the first whose ``info`` answers; None when neither does."""
    for engine in ("docker", "podman"):
        if shutil.which(engine) and subprocess.run([engine, "info"], capture_output=True, check=False).returncode == 0:
            return engine
    return None


@pytest.mark.docker
@pytest.mark.slow
def test_the_cpu_image_builds_and_runs_a_micro_job(request, tmp_path):
    """Minutes on the first build (the dependencies), then the cached layers. TSCTL_DOCKER_BASE names the CPU
    stage's base (default python:3.11-slim) and TSCTL_TORCH_INDEX its torch index ('' for the host pip's)."""
    if "docker" not in request.config.getoption("markexpr"):
        pytest.skip("builds an image: run it with python -m pytest -m docker")
    engine = working_engine()
    if engine is None:
        pytest.skip("neither docker nor podman answers `info`")
    args = ["--engine", engine, "--runs", str(tmp_path / "runs")]
    if os.environ.get("TSCTL_DOCKER_BASE"):
        args += ["--base", os.environ["TSCTL_DOCKER_BASE"]]
    if "TSCTL_TORCH_INDEX" in os.environ:
        args += ["--torch-index", os.environ["TSCTL_TORCH_INDEX"]]
    done = subprocess.run([str(ROOT / "scripts" / "docker_check.sh"), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = re.search(r"^ok: image tsctl-cpu \((\w+)\) (\d+) MB, built in (\d+) s; runs as uid (\d+);", done.stdout, re.M)
    assert summary and summary.group(1) == engine and summary.group(4) != "0"
    run = tmp_path / "runs" / "default" / "ratio0-seed0"
    assert (run / "manifest.json").is_file() and any((run / "plots").iterdir())
    assert (run / "metrics.jsonl").read_text().count("\n") >= 2
