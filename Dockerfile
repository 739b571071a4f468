# tsctl images: one definition of the app (every step after the base) on either of two bases, picked by DEVICE.
#   gpu (default): vLLM's own image (the CUDA torch and the transformers it pins) + tsctl with its `gpu` and `dev`
#                  extras, versions as in pyproject.toml (vllm==0.33.0).
#   cpu:           any Python >= 3.11 image (BASE, python:3.11-slim by default) + tsctl with its `cpu` and `dev` extras,
#                  as README installs it: the CPU build of torch 2.13.0 from TORCH_INDEX ('' for the base's own index).
#   docker build -t tsctl .                                              # the GPU image
#   docker build --build-arg DEVICE=cpu -t tsctl-cpu .                   # the CPU image
#   docker build --target test -t tsctl-test .                           # the image, then the test suite run inside it
#                                                                        # (either DEVICE)
#   docker run --gpus all --ipc=host -v "$PWD/runs:/work/runs" -v "$PWD/data:/work/data:ro" \
#       -v hf-cache:/home/tsctl/.cache/huggingface \
#       tsctl train +preset=qwen2.5-math-1.5b task.file.train_path=data/dapo_math.jsonl
#   docker run -v "$PWD/runs:/work/runs" tsctl-cpu train                # README's main job on the CPU
# The container runs as user tsctl (uid 10001) and writes only to its volumes: make ./runs writable by it
# (chown 10001 runs) or add --user "$(id -u):$(id -g)". Models downloaded from the hub stay in the hf-cache volume.
# scripts/docker_check.sh builds the CPU image with docker or podman and runs a micro job in it (docs/docker.md).
ARG VLLM_VERSION=0.33.0
ARG BASE=python:3.11-slim
ARG DEVICE=gpu

FROM vllm/vllm-openai:v${VLLM_VERSION} AS gpu-base
ARG VLLM_VERSION
# vLLM's image installs into its system Python with uv; its own vllm is pinned so that uv keeps it.
ENV TSCTL_EXTRAS="gpu dev" \
    TSCTL_PIP="uv pip install --system" \
    TSCTL_PINS="vllm==${VLLM_VERSION}" \
    UV_NO_CACHE=1

FROM ${BASE} AS cpu-base
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# A virtual environment: a distribution's Python (Debian's) refuses system-wide pip installs.
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:${PATH} \
    TSCTL_EXTRAS="cpu dev" \
    TSCTL_PIP="pip install --no-cache-dir --disable-pip-version-check${TORCH_INDEX:+ --extra-index-url ${TORCH_INDEX}}" \
    TSCTL_PINS=""

# The dependency list, read from pyproject.toml alone: a change elsewhere in pyproject.toml (its pytest settings)
# leaves requirements.txt, and so the install below, as they were.
FROM ${DEVICE}-base AS requirements
COPY pyproject.toml /tmp/pyproject.toml
RUN python3 -c "import os, tomllib; p = tomllib.load(open('/tmp/pyproject.toml', 'rb'))['project']; extras = p['optional-dependencies']; print('\n'.join(p['dependencies'] + [r for e in os.environ['TSCTL_EXTRAS'].split() for r in extras[e]]))" > /tmp/requirements.txt

FROM ${DEVICE}-base AS app
# The builder's pip settings (a local wheel folder, another index, a CA bundle), for the installs only: build
# arguments are not part of the image's environment. scripts/docker_check.sh passes the host's.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_CERT
ARG PIP_CONSTRAINT
ARG PIP_TRUSTED_HOST
ENV PYTHONDONTWRITEBYTECODE=1 \
    HF_HOME=/home/tsctl/.cache/huggingface \
    MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /opt/tsctl
# Dependencies first, so a code change does not reinstall them.
COPY --from=requirements /tmp/requirements.txt ./
RUN ${TSCTL_PIP} -r requirements.txt ${TSCTL_PINS}
COPY pyproject.toml README.md ./
COPY conf ./conf
COPY src ./src
RUN ${TSCTL_PIP} --no-deps . \
    && useradd --create-home --uid 10001 tsctl \
    && mkdir -p /work/runs "${HF_HOME}" \
    && chown -R tsctl:tsctl /work "${HF_HOME}"
USER 10001:10001
WORKDIR /work
VOLUME ["/home/tsctl/.cache/huggingface", "/work/runs"]

# The test suite inside the image: its torch and transformers (and vLLM on the GPU base), on the CPU.
FROM app AS test
COPY --chown=10001:10001 tests /opt/tsctl/tests
WORKDIR /opt/tsctl
RUN OMP_NUM_THREADS=1 python3 -m pytest -x -q -p no:cacheprovider tests

FROM app AS runtime
ENTRYPOINT ["tsctl"]
CMD ["--help"]
