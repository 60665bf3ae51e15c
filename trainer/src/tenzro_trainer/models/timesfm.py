"""A TimesFM-class decoder-only patch transformer (Das et al., 2024), written here.

The context is cut into non-overlapping input patches of ``patch_len`` points; a residual MLP embeds
each patch; a stack of causal pre-LayerNorm transformer layers runs over the patch tokens; a residual
MLP head turns every token into a forecast of the next ``horizon`` points (TimesFM's longer output
patch). Training is decoder-only: every position is supervised with the points that follow its patch,
so one window yields context_len / patch_len training targets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .base import ForecastModel


@dataclass(frozen=True)
class TimesFMConfig:
    context_len: int = 64
    horizon: int = 16
    patch_len: int = 8
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 64
    embed_hidden: int = 0  # hidden width of the input patch MLP (0: d_ff)
    head_hidden: int = 0  # hidden width of the output MLP (0: d_ff)

    @classmethod
    def from_metadata(cls, md: dict, param_count: int = 0) -> TimesFMConfig:
        """The config a spec's metadata names. When the metadata names only the task's shape (context_len,
        horizon and nothing of the architecture) and ``param_count`` is a preset's exact count for that
        shape, the preset is used: the seed's spec ({context_len: 2048, horizon: 128}, 200,000,000) builds
        REFERENCE_200M. Fields the metadata names always win."""
        names = {f.name for f in fields(cls)}
        given = {k: int(v) for k, v in md.items() if k in names}
        base = cls()
        if param_count and not set(given) - {"context_len", "horizon"}:
            for pre in PRESETS:
                if pre.param_count() == param_count and all(getattr(pre, k) == v for k, v in given.items()):
                    base = pre
                    break
        cfg = replace(base, **given)
        if cfg.context_len % cfg.patch_len:
            raise ValueError(f"context_len {cfg.context_len} is not a multiple of patch_len {cfg.patch_len}")
        if cfg.d_model % cfg.n_heads:
            raise ValueError(f"d_model {cfg.d_model} is not a multiple of n_heads {cfg.n_heads}")
        return cfg

    def metadata(self) -> dict:
        d = asdict(self)
        for k in ("embed_hidden", "head_hidden"):
            if d[k] == 0:
                del d[k]
        return d

    def param_count(self) -> int:
        """The element count of the model this config builds (without building it)."""
        p, d, ff, h = self.patch_len, self.d_model, self.d_ff, self.horizon
        e, o = self.embed_hidden or ff, self.head_hidden or ff
        embed = p * e + e + e * d + d + p * d + d
        layer = 4 * d * d + 2 * d * ff + ff + 9 * d
        head = d * o + o + o * h + h + d * h + h
        return embed + (self.context_len // p) * d + self.n_layers * layer + 2 * d + head


TINY = TimesFMConfig()
DEMO = TimesFMConfig(context_len=64, horizon=16, patch_len=8, d_model=64, n_layers=2, n_heads=4, d_ff=128)
# Exactly 200,000,000 parameters: the seed spec's size (context 2048, horizon 128, param_count 200000000).
# d_model 1280, 10 layers, 16 heads; the three MLP widths are chosen so the count is the spec's exactly
# (a spec's param_count must equal its initial weights' element count, and param_count picks the preset).
REFERENCE_200M = TimesFMConfig(
    context_len=2048, horizon=128, patch_len=32, d_model=1280, n_layers=10, n_heads=16, d_ff=4736,
    embed_hidden=4615, head_hidden=4761,
)  # fmt: skip
PRESETS = (TINY, DEMO, REFERENCE_200M)


class ResidualBlock(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(d_in, d_hidden)
        self.out = nn.Linear(d_hidden, d_out)
        self.skip = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.silu(self.hidden(x))) + self.skip(x)


class DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, d_ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, d_ff)
        self.ff2 = nn.Linear(d_ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class TimesFMClass(ForecastModel):
    def __init__(self, cfg: TimesFMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.context_len = cfg.context_len
        self.horizon = cfg.horizon
        n = cfg.context_len // cfg.patch_len
        self.embed = ResidualBlock(cfg.patch_len, cfg.embed_hidden or cfg.d_ff, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(n, cfg.d_model) * 0.02)
        self.layers = nn.ModuleList(DecoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = ResidualBlock(cfg.d_model, cfg.head_hidden or cfg.d_ff, cfg.horizon)
        self._ckpt = False

    def set_gradient_checkpointing(self, on: bool) -> None:
        self._ckpt = on

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C] → per-patch forecasts [B, C/P, horizon]."""
        b = x.shape[0]
        h = self.embed(x.view(b, -1, self.cfg.patch_len)) + self.pos
        for layer in self.layers:
            h = checkpoint(layer, h, use_reentrant=False) if self._ckpt and self.training else layer(h)
        return self.head(self.ln_f(h))

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = self(x)  # [B, N, H]
        full = torch.cat([x, y], dim=1)
        p, hz = self.cfg.patch_len, self.horizon
        n = out.shape[1]
        # target of position j: the horizon points after patch j, i.e. full[(j+1)p : (j+1)p + hz]
        tgt = full.unfold(1, hz, p)[:, 1 : n + 1]  # [B, N, H]
        return F.mse_loss(out.float(), tgt.float())

    def forecast(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)[:, -1]
