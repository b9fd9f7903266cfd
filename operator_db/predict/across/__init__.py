"""Predicting a GPU from other GPUs' results and its spec sheet (``opdb predict across``)."""
