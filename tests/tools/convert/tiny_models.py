"""The models naiad convert's tests convert, built in the test with random weights (fixed
seeds, nothing downloaded). The command loads them as ``tiny_models.py:NAME`` entry points.
"""

from __future__ import annotations

import torch

SEED = 0


class MLP(torch.nn.Module):
    """[batch, 16] -> [batch, 4]: one output, served by name OUTPUT__0."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(SEED)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CNN(torch.nn.Module):
    """[batch, 3, 8, 8] -> logits [batch, 5] and features [batch, 8]: two outputs."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(SEED)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.relu(self.conv(image)).mean(dim=(2, 3))
        return self.head(features), features


def make_cnn() -> torch.nn.Module:
    """A factory, the third way an entry point may name a model."""
    return CNN()


class Branchy(torch.nn.Module):
    """Its control flow depends on the values: tracing records one branch (and answers
    wrong for rows that take the other), torch.export refuses the data-dependent branch,
    scripting keeps both."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(SEED)
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if bool(y.sum() > 0):
            return y * 2
        return -y


class NoOnnx(torch.nn.Module):
    """Uses an op no ONNX exporter can handle (linalg_eigvals): the ONNX export fails, the
    TorchScript and torch.export ones do not."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(SEED)
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return torch.linalg.eigvals(y.reshape(-1, 2, 2)).real.reshape(y.shape[0], -1)
