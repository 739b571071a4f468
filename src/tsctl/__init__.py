"""tsctl: experiments in RL of language models with Thinking Seeds."""

from transformers.utils import logging as _hf_logging

# tsctl draws its own progress bars; the per-file bars of transformers' save/load are noise here.
_hf_logging.disable_progress_bar()
