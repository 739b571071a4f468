"""The commands, one module each: ``warmup``, ``train``, ``seed``, ``rollout``, ``eval`` and ``ablate``; every command's
config comes from :mod:`tsctl.runconfig` and ``tsctl report`` is :mod:`tsctl.analysis.report`, both below the
commands. A stage imports another only where its command runs the other's: ``ablate`` trains, a command that starts
from ``model.path`` warms the built-in model up first.
"""
