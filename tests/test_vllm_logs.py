"""vLLM's output and a clean exit: its records all in a log file, on the console only those a user needs (the known
harmless ones left out, each with its reason written in the log), its start-up stderr and warnings kept in the file, a
start-up refusal in one line, and no process group of vLLM's torn down under it at exit."""

from __future__ import annotations

import logging
import os
import warnings

import pytest
import torch.distributed as dist

from tsctl.config.errors import ConfigError
from tsctl.distributed import world
from tsctl.engines import vllm_logs

LAYERWISE = "vllm.model_executor.model_loader.reload.layerwise"


@pytest.fixture
def vllm_logger():
    """The ``vllm`` logger and ``VLLM_CONFIGURE_LOGGING`` as a fresh process has them, restored afterwards (an engine
    sets the variable when unset, which ``monkeypatch.delenv`` of an absent one would not undo)."""
    configured = os.environ.pop(vllm_logs.CONFIGURE, None)
    logger = logging.getLogger("vllm")
    before = (list(logger.handlers), logger.level, logger.propagate)
    # an engine an earlier test of this process built left its handlers: a fresh process has none (they are put back)
    logger.handlers[:] = [h for h in logger.handlers if h not in vllm_logs.ours(logger)]
    yield logger
    for handler in vllm_logs.ours(logger):
        logger.removeHandler(handler)
        handler.close()
    logger.handlers[:], logger.level, logger.propagate = before
    os.environ.pop(vllm_logs.CONFIGURE, None)
    if configured is not None:
        os.environ[vllm_logs.CONFIGURE] = configured


def test_known_harmless_warnings_stay_in_the_log_with_their_reason_and_others_reach_the_console(vllm_logger, tmp_path, capsys):
    path = vllm_logs.open_log(tmp_path / "_logs", tied_head=True)
    assert path.parent == tmp_path / "_logs" and path.name.startswith("vllm-") and path.name.endswith(f"-{os.getpid()}.log")
    layerwise = logging.getLogger(LAYERWISE)
    layerwise.warning("RotaryEmbedding: Failed to load weights")
    layerwise.warning("%s: Failed to load weights", "ParallelLMHead")
    logging.getLogger("vllm.config.model").info("Using max model len 409")
    logging.getLogger("vllm.v1.core").warning("Sequence group 3 is preempted")
    assert capsys.readouterr().err == "vLLM WARNING: Sequence group 3 is preempted\n"
    log = path.read_text()
    assert "tsctl shows no vLLM warning holding 'RotaryEmbedding: Failed to load weights' on the console: its cos/sin table is computed" in log
    assert "'ParallelLMHead: Failed to load weights' on the console: a tied LM head has no weight of its own" in log
    for line in ("RotaryEmbedding: Failed to load weights", "ParallelLMHead: Failed to load weights", "Using max model len 409", "Sequence group 3 is preempted"):
        assert f"] {line}" in log


def test_an_untied_heads_failed_load_is_shown(vllm_logger, tmp_path, capsys):
    path = vllm_logs.open_log(tmp_path, tied_head=False)
    logging.getLogger(LAYERWISE).warning("ParallelLMHead: Failed to load weights")
    assert capsys.readouterr().err == "vLLM WARNING: ParallelLMHead: Failed to load weights\n"
    assert "ParallelLMHead" not in path.read_text().splitlines()[0]  # not among the reasons


def test_while_vllm_starts_stderr_and_python_warnings_go_to_the_log_but_its_console_records_do_not(vllm_logger, tmp_path, capfd):
    path = vllm_logs.open_log(tmp_path, tied_head=False)
    with vllm_logs.starting(path):
        os.write(2, b"[W1206 utils.cpp:68] Warning: NUMA binding\n")
        warnings.warn("`torch.distributed.reduce_op` is deprecated", FutureWarning)
        logging.getLogger("vllm.worker").warning("a warning a user needs")
        logging.getLogger("vllm.worker").warning("libtcmalloc is not found in LD_PRELOAD.")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "vLLM WARNING: a warning a user needs\nafter\n"
    log = path.read_text()
    assert "[W1206 utils.cpp:68] Warning: NUMA binding\n" in log and "FutureWarning: `torch.distributed.reduce_op` is deprecated" in log
    assert "] libtcmalloc is not found in LD_PRELOAD." in log


def test_a_second_engine_s_log_replaces_the_first_s_handlers(vllm_logger, tmp_path, capsys):
    vllm_logs.open_log(tmp_path / "first", tied_head=False)
    second = vllm_logs.open_log(tmp_path / "second", tied_head=False)
    logging.getLogger("vllm.worker").warning("once")
    assert capsys.readouterr().err == "vLLM WARNING: once\n" and len(vllm_logs.ours(vllm_logger)) == 2
    assert "] once" in second.read_text()


def test_a_user_who_configures_vllms_logging_keeps_it(vllm_logger, tmp_path, monkeypatch):
    monkeypatch.setenv(vllm_logs.CONFIGURE, "1")
    handlers = list(vllm_logger.handlers)
    vllm_logs.open_log(tmp_path, tied_head=False)
    assert vllm_logger.handlers == handlers


def test_a_start_up_refusal_is_one_line_naming_the_log_that_holds_all_of_it(tmp_path):
    path = tmp_path / "vllm.log"
    path.write_text("")
    try:
        raise ValueError("To serve at least one request with the models's max seq len (8192),\n(2.81 GiB KV cache is needed)")
    except ValueError as err:
        refusal = vllm_logs.refusal(err, path)
    assert isinstance(refusal, ConfigError) and "\n" not in str(refusal)
    assert str(refusal) == (
        "config error at 'engine': vLLM could not start this model: To serve at least one request with the models's max seq len (8192), "
        f"(2.81 GiB KV cache is needed) (the whole message is in {path}); engine=hf runs any transformers model"
    )
    assert "Traceback" in path.read_text() and "raise ValueError" in path.read_text()


def test_leaving_touches_no_process_group_this_process_did_not_join(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)  # as one vLLM engine makes its own
    try:
        world.stop()
        assert dist.is_initialized()  # vLLM leaves it at its own shutdown; destroying it first fails that shutdown
    finally:
        dist.destroy_process_group()
