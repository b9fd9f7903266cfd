"""operator-db: per-operator time and energy measurement database for PyTorch models."""

__version__ = "0.1.0"
