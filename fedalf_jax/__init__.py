"""fedalf_jax: a JAX simulator of fair, private federated learning (FedALF, LDP-FedALF and baselines)."""

__version__ = "0.1.0"
