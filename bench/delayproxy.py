"""A TCP proxy that delays every byte by a fixed time in each direction (a delay line: bandwidth is kept,
latency is added), for links where the kernel has no netem. Used by bench/overlap.py inside the trainers'
network namespace:

    python bench/delayproxy.py --listen 127.0.0.1:PORT --to HOST:PORT --delay-ms 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time


async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, delay: float) -> None:
    q: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def reader() -> None:
        while True:
            b = await r.read(1 << 16)
            await q.put((time.monotonic() + delay, b))
            if not b:
                return

    async def writer() -> None:
        while True:
            due, b = await q.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not b:
                if w.can_write_eof():
                    w.write_eof()
                return
            w.write(b)
            await w.drain()

    with contextlib.suppress(ConnectionError, OSError):
        await asyncio.gather(reader(), writer())


async def main(listen: str, to: str, delay: float) -> None:
    th, tp = to.rsplit(":", 1)

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(th, int(tp))
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw, delay), pipe(ur, cw, delay))
        for w in (cw, uw):
            w.close()

    lh, lp = listen.rsplit(":", 1)
    srv = await asyncio.start_server(handle, lh, int(lp))
    async with srv:
        await srv.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--delay-ms", type=float, default=10.0, help="one-way delay (RTT = 2x)")
    a = ap.parse_args()
    asyncio.run(main(a.listen, a.to, a.delay_ms / 1000))
