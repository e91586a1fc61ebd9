#!/usr/bin/env python3
"""Load generator for `qkv serve`: closed loop, N concurrent clients each sending one request after
another, printing requests/s, tokens/s and p50/p95/p99 latency, for the same server with batching
across requests on (the default) and off (--max-batch-tokens 1), in one run.

    bench/bench_serve.py [--qkv build/qkv] [--clients 32] [--requests 256] [--route translations|completions]
                         [--checkpoint DIR] [--threads 2]

Without --checkpoint it trains a small model of the route's family for a few steps on generated
text (SentencePiece included), so the bench needs nothing but the qkv binary; the weights are
nearly random, so a translation runs to its length limit, the same work in both modes. Quote the
CPU (lscpu) with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

WORDS = ("the light was good and God divided the waters from the earth heaven day night said let there be made "
         "called morning evening firmament seas grass herb seed fruit tree kind stars signs seasons years").split()


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + " ." for _ in range(n)]


def train_model(qkv: str, route: str, work: str, threads: int) -> str:
    text = sentences(2000, 1)
    size = ["--d-model", "256", "--heads", "4", "--layers", "3", "--d-ff", "1024", "--threads", str(threads)]
    # (a SentencePiece vocabulary as large as the generated text allows)
    common = ["--spm-vocab", "360" if route == "translations" else "300", "--steps", "150", "--log-every", "150", "--lr", "2e-3", "--valid-every", "0", "--warmup", "5"]
    if route == "translations":
        with open(os.path.join(work, "src.txt"), "w") as f:
            f.write("\n".join(s.upper() for s in text) + "\n")
        with open(os.path.join(work, "tgt.txt"), "w") as f:
            f.write("\n".join(text) + "\n")
        args = ["train", "--src", f"{work}/src.txt", "--tgt", f"{work}/tgt.txt", "--max-seq-length", "64",
                "--max-batch-tokens", "2000"]
    else:
        with open(os.path.join(work, "text.txt"), "w") as f:
            f.write("\n".join(text) + "\n")
        args = ["train", "--arch", "decoder-only", "--text", f"{work}/text.txt", "--block-size", "128", "--batch-size", "8"]
    out = os.path.join(work, "run")
    subprocess.run([qkv, *args, "--output-dir", out, *common, *size], check=True, capture_output=True)
    return os.path.join(out, "last")


class Server:
    def __init__(self, qkv: str, checkpoint: str, threads: int, extra: list[str]):
        self.port_file = tempfile.mktemp(prefix="qkv-bench-port-")
        self.proc = subprocess.Popen([qkv, "serve", "--model", f"m={checkpoint}", "--port", "0", "--port-file",
                                      self.port_file, "--threads", str(threads), "--max-queue", "4096", *extra],
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not (os.path.exists(self.port_file) and open(self.port_file).read().strip()):
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("qkv serve did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{int(open(self.port_file).read())}"
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        os.unlink(self.port_file)


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def closed_loop(server: Server, route: str, texts: list[str], clients: int, requests: int):
    """clients threads, each sending requests one after another until `requests` are answered."""
    lock = threading.Lock()
    next_index = [0]
    latencies, tokens = [], [0]

    def client():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= requests:
                return
            body = {"model": "m", "input": texts[i % len(texts)], "truncate": True} if route == "translations" else \
                {"model": "m", "prompt": texts[i % len(texts)], "max_tokens": 32, "temperature": 0}
            start = time.perf_counter()
            answer = post(f"{server.url}/v1/{route}", body)
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                tokens[0] += answer["usage"]["completion_tokens"]

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100)
    return {"requests_per_s": requests / wall, "tokens_per_s": tokens[0] / wall, "p50": q[49], "p95": q[94],
            "p99": q[98], "wall": wall}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qkv", default="build/qkv")
    p.add_argument("--checkpoint")
    p.add_argument("--route", choices=["translations", "completions"], default="translations")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as work:
        checkpoint = a.checkpoint or train_model(a.qkv, a.route, work, a.threads)
        texts = sentences(a.requests, 7)
        texts = [t.upper() for t in texts] if a.route == "translations" else [" ".join(t.split()[:4]) for t in texts]
        print(f"qkv serve, {a.route}: {a.clients} clients in a closed loop, {a.requests} requests of one "
              f"{'sentence' if a.route == 'translations' else 'prompt'} each, {a.threads} threads, checkpoint "
              f"{checkpoint}")
        results = {}
        for name, extra in (("batched", []), ("one at a time", ["--max-batch-tokens", "1"])):
            server = Server(a.qkv, checkpoint, a.threads, extra)
            try:
                closed_loop(server, a.route, texts[: min(8, len(texts))], min(4, a.clients), min(8, a.requests))  # warm-up
                r = results[name] = closed_loop(server, a.route, texts, a.clients, a.requests)
            finally:
                server.stop()
            print(f"{name:14s} {r['requests_per_s']:8.2f} requests/s  {r['tokens_per_s']:9.1f} tokens/s  "
                  f"latency p50 {r['p50']:.3f} s  p95 {r['p95']:.3f} s  p99 {r['p99']:.3f} s")
        ratio = results["batched"]["requests_per_s"] / results["one at a time"]["requests_per_s"]
        print(f"ratio          batching across requests gives {ratio:.2f}x the requests/s; p99 latency "
              f"{results['batched']['p99'] / results['one at a time']['p99']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
