"""Plug-ins and code identity: the registry of users' algorithms, models and data sets (``fj.register_*``, ``module:attribute``), and the digest of the code a user's plug-in runs."""
