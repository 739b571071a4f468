# GPU image: vLLM (with the CUDA torch and the transformers it pins) + tsctl, versions as in
# pyproject.toml (its `gpu` extra: vllm==0.33.0).
#   docker build -t tsctl .                      # the image
#   docker build --target test -t tsctl-test .   # the same image, then the test suite run inside it (CPU)
#   docker run --gpus all --ipc=host -v "$PWD/runs:/work/runs" -v "$PWD/data:/work/data:ro" \
#       -v hf-cache:/home/tsctl/.cache/huggingface \
#       tsctl train +preset=qwen2.5-math-1.5b task.file.train_path=data/dapo_math.jsonl
# The container runs as user tsctl (uid 10001): make ./runs writable by it (chown 10001 runs) or
# add --user "$(id -u)". Models downloaded from the hub stay in the hf-cache volume.
ARG VLLM_VERSION=0.33.0

FROM vllm/vllm-openai:v${VLLM_VERSION} AS app
ARG VLLM_VERSION
ENV PYTHONDONTWRITEBYTECODE=1 \
    UV_NO_CACHE=1 \
    HF_HOME=/home/tsctl/.cache/huggingface
WORKDIR /opt/tsctl
# Dependencies first, read from pyproject.toml alone, so a code change does not reinstall them.
COPY pyproject.toml ./
RUN python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; extras = p['optional-dependencies']; print('\n'.join(p['dependencies'] + extras['gpu'] + extras['dev']))" > requirements.txt \
    && uv pip install --system -r requirements.txt "vllm==${VLLM_VERSION}"
COPY README.md ./
COPY conf ./conf
COPY src ./src
RUN uv pip install --system --no-deps . \
    && useradd --create-home --uid 10001 tsctl \
    && mkdir -p /work/runs "${HF_HOME}" \
    && chown -R tsctl:tsctl /work "${HF_HOME}"
USER 10001:10001
WORKDIR /work
VOLUME ["/home/tsctl/.cache/huggingface", "/work/runs"]

# The test suite inside the image: its torch, transformers and vLLM, on the CPU (no GPU at build time).
FROM app AS test
COPY --chown=10001:10001 tests /opt/tsctl/tests
WORKDIR /opt/tsctl
RUN OMP_NUM_THREADS=1 python3 -m pytest -x -q -p no:cacheprovider tests

FROM app AS runtime
ENTRYPOINT ["tsctl"]
CMD ["--help"]
