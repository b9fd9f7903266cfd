"""Importing public measurement data sets: their rows as results of device kinds, with a source."""
