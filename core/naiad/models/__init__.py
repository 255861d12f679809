"""Loaded models: their lifecycle, instances and request signatures."""
