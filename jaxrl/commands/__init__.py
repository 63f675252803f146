"""The command handlers of ``jaxrl``: one module per command (or family of commands).

Each handler takes the parsed ``argparse.Namespace`` of :mod:`jaxrl.cli` (the parser, which
reaches these modules lazily) and returns an exit code; the work itself is the library's
(:mod:`jaxrl.run`, :mod:`jaxrl.serve`, :mod:`jaxrl.core`).

* :mod:`jaxrl.commands.listing`: ``jaxrl list``.
* :mod:`jaxrl.commands.check_env`: ``jaxrl check-env``.
* :mod:`jaxrl.commands.train`: ``jaxrl train``.
* :mod:`jaxrl.commands.eval`: ``jaxrl eval`` (``-n``/``-r`` sampled, ``--remote``).
* :mod:`jaxrl.commands.render`: ``jaxrl render``.
* :mod:`jaxrl.commands.config`: ``jaxrl config``.
* :mod:`jaxrl.commands.export_hf`: ``jaxrl export-hf``.
* :mod:`jaxrl.commands.compare`: ``jaxrl compare``.
* :mod:`jaxrl.commands.serve`: ``jaxrl serve``.
"""
