"""Vidur's fp16 LLM operator profiles as imported results (``opdb import``)."""
