"""Parts of ``tsctl eval`` (the stage itself is :mod:`tsctl.stages.eval`).

- :mod:`~tsctl.evaluation.targets`: which checkpoints to score and where their results go;
- :mod:`~tsctl.evaluation.suites`: the benchmarks to score them on, loaded before any model;
- :mod:`~tsctl.evaluation.scores`: sampling, grading and the metrics of one checkpoint on one benchmark;
- :mod:`~tsctl.evaluation.table`: the rich table of results.
"""
