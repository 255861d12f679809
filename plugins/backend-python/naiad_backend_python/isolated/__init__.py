"""Isolated execution: each model instance in a supervised worker process."""
