"""Timed steps for the training benchmarks' PyTorch peers, alone or interleaved with qkv's.

timed_steps(step, steps, serve, warmup=None):
  warmup: what runs once before the timed steps (default: step itself).
  serve False: one warm-up step, then `steps` timed steps in a row.
  serve True (--serve): one warm-up step, then the script prints {"ready": true} and times one step
  for each line "step" it reads on stdin, answering {"seconds": s, "loss": l} after each, until it
  reads "done" (or end of input). A step's value goes into the answer as "loss" when it is a number.
  The C++ benchmark (bench_common.h, PeerProcess) alternates its own
  steps with these, so a drift in the shared machine's speed reaches both sides alike.
Returns (times, values): the steps' seconds and what each step returned.
"""

import json
import sys
import time


def _timed(step):
    t0 = time.perf_counter()
    loss = step()
    return time.perf_counter() - t0, loss


def timed_steps(step, steps, serve, warmup=None):
    (warmup or step)()  # warm-up
    times, losses = [], []
    if not serve:
        for _ in range(steps):
            t, loss = _timed(step)
            times.append(t)
            losses.append(loss)
        return times, losses
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "done":
            break
        if command != "step":
            raise SystemExit(f"step_protocol: unknown command {command!r} (expected step or done)")
        t, loss = _timed(step)
        times.append(t)
        losses.append(loss)
        answer = {"seconds": t}
        if isinstance(loss, (int, float)):
            answer["loss"] = loss
        print(json.dumps(answer), flush=True)
    if not times:
        raise SystemExit("step_protocol: no step was asked for")
    return times, losses
