"""Structured logs: one JSON object per line on stderr (or key=value text)."""

from __future__ import annotations

import json
import logging
import sys
import time


class _JSON(logging.Formatter):
    def format(self, r: logging.LogRecord) -> str:
        d = {"ts": round(time.time(), 3), "level": r.levelname.lower(), "msg": r.getMessage()}
        d.update(getattr(r, "fields", {}))
        if r.exc_info:
            d["exc"] = self.formatException(r.exc_info)
        return json.dumps(d, default=str)


class _Text(logging.Formatter):
    def format(self, r: logging.LogRecord) -> str:
        kv = " ".join(f"{k}={v}" for k, v in getattr(r, "fields", {}).items())
        return f"{time.strftime('%H:%M:%S')} {r.levelname[0]} {r.getMessage()} {kv}".rstrip()


def setup(fmt: str = "json", level: int = logging.INFO) -> None:
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(_JSON() if fmt == "json" else _Text())
    root = logging.getLogger("tenzro_trainer")
    root.handlers[:] = [h]
    root.setLevel(level)
    root.propagate = False


class Log:
    def __init__(self, name: str, **ctx: object) -> None:
        self._l = logging.getLogger(name)
        self._ctx = ctx

    def _emit(self, lvl: int, msg: str, kw: dict) -> None:
        self._l.log(lvl, msg, extra={"fields": {**self._ctx, **kw}})

    def info(self, msg: str, **kw: object) -> None:
        self._emit(logging.INFO, msg, kw)

    def warning(self, msg: str, **kw: object) -> None:
        self._emit(logging.WARNING, msg, kw)

    def error(self, msg: str, **kw: object) -> None:
        self._emit(logging.ERROR, msg, kw)

    def debug(self, msg: str, **kw: object) -> None:
        self._emit(logging.DEBUG, msg, kw)
