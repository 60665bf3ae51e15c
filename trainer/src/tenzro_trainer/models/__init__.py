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
from .timesfm import DEMO, PRESETS, REFERENCE_200M, TINY, TimesFMClass, TimesFMConfig

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


def build(family: str, metadata: dict | None = None, seed: int = 0, param_count: int = 0) -> ForecastModel:
    """The model a spec's architecture names. ``param_count`` (the spec's, 0 when not checked) picks a
    preset when the metadata names only the task's shape (TimesFMConfig.from_metadata), and the model
    built must then hold exactly that many parameters (ValueError otherwise, naming both counts)."""
    md = dict(metadata or {})
    fam = family.lower()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if fam in ("timesfm", "timesfm-class"):
            m: ForecastModel = TimesFMClass(TimesFMConfig.from_metadata(md, param_count))
        elif fam in ("chronos-bolt", "chronos_bolt", "chronos"):
            from .chronos_bolt import ChronosBolt

            m = ChronosBolt(md)
        elif fam in ("granite-ttm", "granite_ttm", "ttm", "granite"):
            from .granite_ttm import GraniteTTM

            m = GraniteTTM(md)
        else:
            raise ValueError(f"model family {family!r} unknown (have {', '.join(FAMILIES)})")
    n = sum(p.numel() for p in m.parameters())
    if param_count and n != param_count:
        raise ValueError(
            f"architecture: param_count {param_count:,} but family {family} with metadata {md} builds "
            f"{n:,} parameters (name the architecture in metadata, or use a preset's exact count)"
        )
    return m


__all__ = [
    "DEMO",
    "PRESETS",
    "FAMILIES",
    "REFERENCE_200M",
    "TINY",
    "ForecastModel",
    "MissingExtra",
    "TimesFMConfig",
    "build",
    "tiny_metadata",
]
