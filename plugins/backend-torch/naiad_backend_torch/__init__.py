"""naiad's PyTorch backend: TorchScript (``model.pt``) and ``torch.export`` (``model.pt2``).

The entry point is :mod:`naiad_backend_torch.plugin`; importing this package imports no torch.
"""
