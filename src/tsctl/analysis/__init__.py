"""The statistics of finished runs: intervals over seeds, paired and crossed comparisons, Holm families, power, the
wording of verdicts, tables and figures, where a sweep's gain came from, and the method's claims.

A library below the commands: ``tsctl report`` (:mod:`tsctl.analysis.report`), ``tsctl ablate`` and
``scripts/results.py`` all read runs through it, and none of it runs a command.
"""
