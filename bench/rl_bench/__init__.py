"""The parts of ``bench/rl_step.py``: settings, the compared sides, timing and FLOPs, the report."""
