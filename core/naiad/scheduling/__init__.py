"""Schedulers: how a model's requests reach its instances (built-in plugins of the core)."""
