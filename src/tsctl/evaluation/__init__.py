"""Evaluation: what "solved" means and every score built on it, and the parts of ``tsctl eval``
(the stage itself is :mod:`tsctl.stages.eval`).

- :mod:`~tsctl.evaluation.scoring`: sample and grade; greedy accuracy, pass@k, the held-out metrics of
  training, a sweep point's final evaluation (every caller's one evaluation module);
- :mod:`~tsctl.evaluation.targets`: which checkpoints to score and where their results go;
- :mod:`~tsctl.evaluation.suites`: the benchmarks to score them on, loaded before any model;
- :mod:`~tsctl.evaluation.benchmark_scores`: sampling, grading and the metrics of one checkpoint on one benchmark;
- :mod:`~tsctl.evaluation.table`: the rich table of results;
- :mod:`~tsctl.evaluation.nan_warnings`: the warnings ``tsctl eval`` and ``tsctl report`` print for NaN/Inf metrics.
"""
