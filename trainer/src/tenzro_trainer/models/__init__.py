"""The Phase-1 timeseries catalog. ``build(family, metadata, seed)`` makes a model with a deterministic
random initialization from the spec's ``architecture.family`` and ``architecture.metadata``.

| family | class | extra |
|---|---|---|
| ``timesfm`` | TimesFM-class decoder-only patch transformer, written here | — |
| ``chronos-bolt`` | ``chronos.chronos_bolt.ChronosBoltModelForForecasting`` | ``[chronos]`` |
| ``granite-ttm`` | ``tsfm_public.models.tinytimemixer.TinyTimeMixerForPrediction`` | ``[granite]`` |
"""

from __future__ import annotations

import torch

from .base import ForecastModel, MissingExtra
from .timesfm import DEMO, REFERENCE_200M, TINY, TimesFMClass, TimesFMConfig

FAMILIES = ("timesfm", "chronos-bolt", "granite-ttm")


def tiny_metadata(family: str) -> dict:
    if family == "timesfm":
        return TINY.metadata()
    if family == "chronos-bolt":
        from .chronos_bolt import TINY as T

        return dict(T)
    if family == "granite-ttm":
        from .granite_ttm import TINY as T

        return dict(T)
    raise ValueError(f"model family {family!r} unknown (have {', '.join(FAMILIES)})")


def build(family: str, metadata: dict | None = None, seed: int = 0) -> ForecastModel:
    md = dict(metadata or {})
    fam = family.lower()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if fam in ("timesfm", "timesfm-class"):
            return TimesFMClass(TimesFMConfig.from_metadata(md))
        if fam in ("chronos-bolt", "chronos_bolt", "chronos"):
            from .chronos_bolt import ChronosBolt

            return ChronosBolt(md)
        if fam in ("granite-ttm", "granite_ttm", "ttm", "granite"):
            from .granite_ttm import GraniteTTM

            return GraniteTTM(md)
    raise ValueError(f"model family {family!r} unknown (have {', '.join(FAMILIES)})")


__all__ = [
    "DEMO",
    "FAMILIES",
    "REFERENCE_200M",
    "TINY",
    "ForecastModel",
    "MissingExtra",
    "TimesFMConfig",
    "build",
    "tiny_metadata",
]
