# GPU reproduction image: CUDA PyTorch + vLLM + tsctl.
#   docker build -t tsctl .
#   docker run --gpus all -v $PWD/runs:/app/runs tsctl train model.path=Qwen/Qwen2.5-Math-1.5B engine=vllm
FROM vllm/vllm-openai:v0.11.0
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
COPY conf ./conf
# The image's CUDA torch satisfies the package; install tsctl without re-resolving torch.
RUN pip install --no-deps -e . && pip install typer rich hydra-core==1.3.8 hydra-joblib-launcher==1.2.0 math-verify==0.9.0 pyarrow matplotlib wandb
ENTRYPOINT ["tsctl"]
