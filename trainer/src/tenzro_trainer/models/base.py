"""The interface every catalog model implements.

Inputs are windows already normalized by their context's mean and standard deviation
(see tenzro_trainer.data): ``x`` is [B, context_len], ``y`` is [B, horizon], float32.
"""

from __future__ import annotations

import torch
from torch import nn


class MissingExtra(ImportError):
    """A catalog family whose package (a trainer extra) is not installed; the message names the fix."""

    def __init__(self, family: str, extra: str) -> None:
        super().__init__(
            f"model family {family} needs the [{extra}] extra: pip install -e 'trainer[{extra}]' "
            f"(or pip install 'tenzro-trainer[{extra}]')"
        )
        self.family, self.extra = family, extra


class ForecastModel(nn.Module):
    context_len: int
    horizon: int

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The training objective (a scalar)."""
        raise NotImplementedError

    def forecast(self, x: torch.Tensor) -> torch.Tensor:
        """Point forecast [B, horizon] (used for the held-out MSE every model reports)."""
        raise NotImplementedError

    def set_gradient_checkpointing(self, on: bool) -> None:  # noqa: B027 — optional hook
        pass
