"""Chronos-Bolt adapter: ``chronos.chronos_bolt.ChronosBoltModelForForecasting`` (PyPI package
``chronos-forecasting``, extra ``[chronos]``) built from a T5 config with random initialization —
nothing is downloaded. Trained with the package's own quantile loss; the point forecast is the median.
"""

from __future__ import annotations

import torch

from .base import ForecastModel, MissingExtra

TINY = {
    "context_len": 64, "horizon": 16, "patch_len": 8, "d_model": 32, "d_ff": 64,
    "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2, "d_kv": 16,
}  # fmt: skip
QUANTILES = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


class ChronosBolt(ForecastModel):
    def __init__(self, md: dict) -> None:
        super().__init__()
        try:
            from chronos.chronos_bolt import ChronosBoltModelForForecasting
            from transformers import T5Config
        except ImportError as e:  # pragma: no cover - depends on the extra
            raise MissingExtra("chronos-bolt", "chronos") from e
        cfg = {**TINY, **md}
        self.context_len, self.horizon = int(cfg["context_len"]), int(cfg["horizon"])
        t5 = T5Config(
            d_model=int(cfg["d_model"]),
            d_ff=int(cfg["d_ff"]),
            d_kv=int(cfg["d_kv"]),
            num_layers=int(cfg["num_layers"]),
            num_decoder_layers=int(cfg["num_decoder_layers"]),
            num_heads=int(cfg["num_heads"]),
            dropout_rate=0.0,
            initializer_factor=0.1,
            feed_forward_proj="relu",
            dense_act_fn="relu",
            is_encoder_decoder=True,
            use_cache=False,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
            chronos_config={
                "context_length": self.context_len,
                "prediction_length": self.horizon,
                "input_patch_size": int(cfg["patch_len"]),
                "input_patch_stride": int(cfg["patch_len"]),
                "quantiles": QUANTILES,
                "use_reg_token": True,
            },
        )
        self.net = ChronosBoltModelForForecasting(t5)
        self._median = QUANTILES.index(0.5)

    def set_gradient_checkpointing(self, on: bool) -> None:
        if on:
            self.net.gradient_checkpointing_enable()
        else:
            self.net.gradient_checkpointing_disable()

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(context=x, target=y).loss

    def forecast(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(context=x).quantile_preds[:, self._median]
