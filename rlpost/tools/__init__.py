"""One module per subcommand of ``rlpost`` (rlpost/cli.py maps ``rlpost <command>`` onto ``<command>.py``,
``-`` as ``_``): train, train_rm, show, list, eval, merge, plot, sweep_summary, diagnose, report, serve,
subspace. Each ``main(args)`` goes through the one launch path, rlpost/app.py. The Hydra apps
(train, train-rm and the tools) have a primary config under ``conf/`` (``conf/config.yaml``,
``conf/eval.yaml`` ...) sharing the ``model``/``data``/``reward``/``hardware`` groups with ``rlpost train``.
"""
