"""The errors every floor raises, at the ground of the package (it imports nothing of it).

:class:`ConfigError` is a user's mistake told in one line (the CLI prints it, exit 2): ``sim/`` raises it
for an algorithm that breaks its contract, ``config/`` for an option, ``reporting/`` and ``bench/`` for
their arguments. ``fedalf_jax.ConfigError`` and ``fedalf_jax.experiment.config.ConfigError`` are this class.
"""


class ConfigError(ValueError):
    """A configuration value is wrong; the message names it and the fix."""
