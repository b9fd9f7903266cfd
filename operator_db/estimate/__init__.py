"""Estimates from the measurements: device peaks and the roofline (more to come)."""
