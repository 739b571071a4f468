"""The commands, one module each: ``warmup``, ``train``, ``seed``, ``rollout``, ``eval``, ``ablate`` and the
``report`` package, plus :mod:`~tsctl.stages.compose` (every command's config, checked against the
packages' registries). A stage imports another only where its command runs the other's: ``ablate``
trains and reports, a command that starts from ``model.path`` warms the built-in model up first.
"""
