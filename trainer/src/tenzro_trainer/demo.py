"""``python -m tenzro_trainer.demo``: the body of ``make demo`` (scripts/demo.sh starts the node)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .experiment import Experiment, follow, plot, start, trainer_stats, verify_receipt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tenzro_trainer.demo")
    p.add_argument("--rpc", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--bins", default="")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--png", default="")
    p.add_argument(
        "--codec", default="",
        help='compress outer gradients: a codec name (int8-block, int4-block, topk, sign1) or the spec\'s '
             'compression object as JSON, e.g. \'{"codec":"int4-block","block":64}\' (scripts/demo.sh: DEMO_CODEC)',
    )  # fmt: skip
    p.add_argument("--dataset", choices=("ipfs", "statsmodels"), default="ipfs",
                   help="ipfs: publish the corpus with `tenzro dataset add` and post its ipfs:// ref")  # fmt: skip
    p.add_argument("--scoring", choices=("on", "off"), default="on",
                   help="on: every submission is scored by the built-in TimesFMScore evaluator and paid by its score "
                        "(docs/protocol/scoring.md; scripts/demo.sh: DEMO_SCORING)")  # fmt: skip
    a = p.parse_args(argv)
    compression = None
    if a.codec and a.codec != "none":
        compression = json.loads(a.codec) if a.codec.lstrip().startswith("{") else {"codec": a.codec}
    e = Experiment(
        rpc=a.rpc,
        workdir=Path(a.workdir),
        rounds=a.rounds,
        bins=Path(a.bins) if a.bins else None,
        replay=True,
        dataset=a.dataset,
        compression=compression,
        scoring=a.scoring == "on",
    )
    t0 = time.monotonic()
    c, task, procs, keys = start(e)
    rows = follow(e, c, task, procs)
    run = c.get_run(task)
    ok, msg = verify_receipt(e, c, task) if run["status"] == "sealed" else (False, f"run is {run['status']}")
    png = Path(a.png or e.workdir / "loss.png")
    plot(rows, png, f"make demo: tiny TimesFM-class, M={e.m} K={e.k} F={e.f} H={e.h}")
    stats = trainer_stats(e)
    print()
    print("| trainer | accepted | missed rounds | reward | mean inner s/round | mean submit s/round |")
    print("|---|---|---|---|---|---|")
    for i, k in enumerate(keys):
        m = (run.get("trainer_metrics") or {}).get(k.did, {})
        mine = [s for s in stats if s["trainer"] == i]
        inner = sum(s["inner_s"] for s in mine) / max(1, len(mine))
        sub = sum(s["submit_s"] for s in mine) / max(1, len(mine))
        print(f"| {i} {k.did[-10:]} | {m.get('accepted', 0)} | {m.get('missed_rounds', 0)} | "
              f"{m.get('current_reward', '0')} | {inner:.3f} | {sub:.3f} |")  # fmt: skip
    first, last = rows[0].eval_loss if rows else float("nan"), rows[-1].eval_loss if rows else float("nan")
    if stats:
        sent = sum(s.get("bytes", 0) for s in stats) / len(stats)
        raw = sum(s.get("raw_bytes", 0) for s in stats) / len(stats)
        codec = json.dumps(compression) if compression else "none"
        print(f"\nbytes per trainer per round: {sent:,.0f} (the same values as f32: {raw:,.0f}; codec {codec})")
    print()
    print(f"task {task}: {run['status']} after {e.rounds} rounds in {time.monotonic() - t0:.0f}s")
    print(f"held-out MSE {first:.4f} -> {last:.4f}  ({(1 - last / first) * 100:.1f}% lower)")
    print(f"receipt: {'VALID' if ok else 'INVALID'}")
    for line in msg.splitlines():
        print(f"  {line}")
    print(f"loss curve: {png}")
    return 0 if ok and last < first else 1


if __name__ == "__main__":
    sys.exit(main())
