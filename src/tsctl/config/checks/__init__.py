"""Range checks of the config, one module per schema module (:mod:`tsctl.config.schema`): ``model``, ``task``,
``rl`` (engine, algo, seeds), ``trainer`` and ``outputs`` (eval, report, logger). Each module's ``check(cfg)``
checks the keys of its sections, and any rule that ties one of them to another section's key; the
checks of one task's own settings live in that task's module (its registered ``check``)."""
