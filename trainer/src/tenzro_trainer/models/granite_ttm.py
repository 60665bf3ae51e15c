"""Granite TinyTimeMixer adapter: ``tsfm_public.models.tinytimemixer.TinyTimeMixerForPrediction``
(PyPI package ``granite-tsfm``, extra ``[granite]``) built from ``TinyTimeMixerConfig`` with random
initialization — nothing is downloaded. Trained with the package's MSE loss (its own std scaling)."""

from __future__ import annotations

import torch

from .base import ForecastModel, MissingExtra

TINY = {"context_len": 64, "horizon": 16, "patch_len": 8, "d_model": 16, "num_layers": 2, "decoder_num_layers": 1}


class GraniteTTM(ForecastModel):
    def __init__(self, md: dict) -> None:
        super().__init__()
        try:
            from tsfm_public.models.tinytimemixer import TinyTimeMixerConfig, TinyTimeMixerForPrediction
        except ImportError as e:  # pragma: no cover - depends on the extra
            raise MissingExtra("granite-ttm", "granite") from e
        cfg = {**TINY, **md}
        self.context_len, self.horizon = int(cfg["context_len"]), int(cfg["horizon"])
        p = int(cfg["patch_len"])
        c = TinyTimeMixerConfig(
            context_length=self.context_len,
            prediction_length=self.horizon,
            patch_length=p,
            patch_stride=p,
            num_input_channels=1,
            d_model=int(cfg["d_model"]),
            num_layers=int(cfg["num_layers"]),
            decoder_num_layers=int(cfg["decoder_num_layers"]),
            decoder_d_model=max(8, int(cfg["d_model"]) // 2),
            dropout=0.0,
            head_dropout=0.0,
            scaling="std",
            loss="mse",
        )
        self.net = TinyTimeMixerForPrediction(c)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(past_values=x.unsqueeze(-1), future_values=y.unsqueeze(-1)).loss

    def forecast(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(past_values=x.unsqueeze(-1)).prediction_outputs[..., 0]
