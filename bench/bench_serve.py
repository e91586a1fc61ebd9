#!/usr/bin/env python3
"""Load generator for `qkv serve`: N concurrent clients in a closed loop (each sends one request after
another), or an open loop at a fixed request rate, printing requests/s, tokens/s, p50/p95/p99
latency and, for streamed completions, time to first token; for the same server with batching
across requests on (the default; completions: continuous batching) and off (--max-batch-tokens 1),
in one run, and for translations CTranslate2 behind a FastAPI server (bench/ct2_server.py) on the
same weights as a peer.

    bench/bench_serve.py [--qkv build/qkv] [--clients 32] [--requests 1024] [--route translations|completions]
                         [--checkpoint DIR] [--threads 2] [--max-tokens 32] [--stream] [--stop-at-eos] [--rate R]
                         [--no-ct2] [--venv build/bench-venv] [--compute-type float32] [--shape small|tiny]

Without --checkpoint it trains a small model of the route's family for a few steps on generated
text (SentencePiece included), so the bench needs nothing but the qkv binary: by default one of the
Bible recipe's shape (--shape small: d 256, 4 + 4 layers, 8,000 pieces), or a smaller one for a quick
look (--shape tiny); the weights are nearly random, so a translation runs to its length limit, the
same work in every mode. Completions are sampled (a seed per request) with `ignore_eos`, each one
max_tokens long as in vLLM's serving benchmark (--stop-at-eos lets them end at EOS), and the same
requests go to each server. The CTranslate2 peer needs the bench venv (bench/setup_peers.sh: ctranslate2,
sentencepiece, fastapi, uvicorn); --no-ct2 leaves it out. Quote the CPU (lscpu) with the figures.
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
from serve_process import ServeProcess  # noqa: E402 (the tests' server process)

WORDS = ("the light was good and God divided the waters from the earth heaven day night said let there be made "
         "called morning evening firmament seas grass herb seed fruit tree kind stars signs seasons years").split()
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def vocabulary(shape: str) -> list[str]:
    """The words of the generated text: a few dozen (tiny), or about 9,000 made of syllables (small),
    so that SentencePiece can make a vocabulary of 8,000 pieces, as a real corpus's."""
    if shape == "tiny":
        return WORDS
    rng = random.Random(11)
    words = sorted({"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(12000)})
    rng.shuffle(words)
    return words


def sentences(n: int, seed: int, shape: str = "tiny") -> list[str]:
    rng, words = random.Random(seed), vocabulary(shape)
    # Zipf-like word frequencies, as text has.
    weights = [1.0 / (r + 1) for r in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(4, 12))) + " ." for _ in range(n)]


# Model shapes: tiny (quick), small (the Bible recipe's: d 256, 4 heads, 4 + 4 layers, d_ff 1024,
# 8,000 pieces a side).
SHAPES = {"tiny": (["--d-model", "256", "--heads", "4", "--layers", "3", "--d-ff", "1024"], 2000, {"translations": 360, "completions": 300}),
          "small": (["--d-model", "256", "--heads", "4", "--layers", "4", "--d-ff", "1024"], 20000, {"translations": 8000, "completions": 8000})}


def train_model(qkv: str, route: str, work: str, threads: int, shape: str = "tiny") -> str:
    size, lines, vocab = SHAPES[shape]
    text = sentences(lines, 1, shape)
    size = [*size, "--threads", str(threads)]
    steps = "150" if shape == "tiny" else "30"  # (the small shape's steps are slow, and change little)
    common = ["--spm-vocab", str(vocab[route]), "--steps", steps, "--log-every", steps, "--lr", "2e-3", "--valid-every", "0",
              "--warmup", "5"]
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


class Server(ServeProcess):
    """A server on a free port that writes the port to a file: `qkv serve`, or (ct2) bench/ct2_server.py;
    its output dropped."""

    def __init__(self, command: list[str], what: str):
        try:
            super().__init__(command, log=subprocess.DEVNULL, timeout=120, what=what)
        except RuntimeError as e:
            raise SystemExit(str(e))

    @staticmethod
    def qkv(qkv: str, checkpoint: str, threads: int, extra: list[str]) -> "Server":
        return Server([qkv, "serve", "--model", f"m={checkpoint}", "--port", "0", "--threads", str(threads),
                       "--max-queue", "4096", *extra], "qkv serve")


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def streamed(url: str, body: dict) -> float:
    """Sends a streamed completion; returns the seconds to its first piece of text."""
    start = time.perf_counter()
    req = urllib.request.Request(url, data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    first = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {") and first is None and json.loads(line[6:])["choices"][0]["text"]:
                first = time.perf_counter() - start
    return first if first is not None else time.perf_counter() - start


IGNORE_EOS = [True]  # completions: every request generates max_tokens (--stop-at-eos: they end at EOS)


def request_body(route: str, text: str, i: int, max_tokens: int) -> dict:
    if route == "translations":
        return {"model": "m", "input": text, "truncate": True, "beam_size": 4}
    return {"model": "m", "prompt": text, "max_tokens": max_tokens, "seed": i, "top_k": 20, "ignore_eos": IGNORE_EOS[0]}


class Load:
    """Latencies, time to first token and tokens of the requests answered."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latencies, self.first_token, self.tokens = [], [], 0

    def one(self, server: Server, route: str, body: dict, stream: bool):
        start = time.perf_counter()
        if stream:
            first, tokens = streamed(f"{server.url}/v1/{route}", body), 0  # (no usage in a stream)
        else:
            first, tokens = None, post(f"{server.url}/v1/{route}", body)["usage"]["completion_tokens"]
        elapsed = time.perf_counter() - start
        with self.lock:
            self.latencies.append(elapsed)
            self.tokens += tokens
            if first is not None:
                self.first_token.append(first)

    def summary(self, requests: int, wall: float) -> dict:
        q = statistics.quantiles(self.latencies, n=100)
        r = {"requests_per_s": requests / wall, "tokens_per_s": self.tokens / wall, "p50": q[49], "p95": q[94],
             "p99": q[98], "wall": wall}
        if len(self.first_token) >= 2:
            f = statistics.quantiles(self.first_token, n=100)
            r.update(ttft_p50=f[49], ttft_p95=f[94], ttft_p99=f[98])
        return r


def closed_loop(server: Server, route: str, texts: list[str], clients: int, requests: int, max_tokens: int,
                stream: bool = False):
    """clients threads, each sending requests one after another until `requests` are answered."""
    load, lock, next_index = Load(), threading.Lock(), [0]

    def client():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= requests:
                return
            load.one(server, route, request_body(route, texts[i % len(texts)], i, max_tokens), stream)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return load.summary(requests, time.perf_counter() - start)


def open_loop(server: Server, route: str, texts: list[str], rate: float, requests: int, max_tokens: int,
              stream: bool = False):
    """One request every 1/rate seconds (Poisson arrivals, fixed seed), whatever the answers' pace."""
    load, rng, threads = Load(), random.Random(3), []
    start = time.perf_counter()
    due = start
    for i in range(requests):
        due += rng.expovariate(rate)
        time.sleep(max(0.0, due - time.perf_counter()))
        body = request_body(route, texts[i % len(texts)], i, max_tokens)
        t = threading.Thread(target=load.one, args=(server, route, body, stream))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return load.summary(requests, time.perf_counter() - start)


def ct2_server(venv: str, checkpoint: str, threads: int, compute_type: str, work: str) -> Server:
    """CTranslate2 behind FastAPI on the checkpoint's conversion (bench/ct2_convert.py, once)."""
    here = os.path.dirname(os.path.abspath(__file__))
    python = os.path.join(venv, "bin", "python")
    model = os.path.join(work, "ct2-model")
    if not os.path.isdir(model):
        subprocess.run([python, os.path.join(here, "ct2_convert.py"), "--checkpoint", checkpoint, "--out", model,
                        "--force"], check=True, capture_output=True)
    return Server([python, os.path.join(here, "ct2_server.py"), "--checkpoint", checkpoint, "--model", model,
                   "--threads", str(threads), "--compute-type", compute_type], "CTranslate2 behind FastAPI")


def batch_counts(server: Server) -> tuple[float, float] | None:
    """qkv serve's /metrics: batches run and inputs in them so far (None for a server without them)."""
    try:
        with urllib.request.urlopen(server.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    totals = {"qkv_batches_total": 0.0, "qkv_batch_inputs_total": 0.0}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals["qkv_batches_total"], totals["qkv_batch_inputs_total"]


def print_result(name: str, r: dict):
    tokens = f"{r['tokens_per_s']:9.1f} tokens/s  " if r["tokens_per_s"] else ""
    line = (f"{name:22s} {r['requests_per_s']:8.2f} requests/s  {tokens}"
            f"latency p50 {r['p50']:.3f} s  p95 {r['p95']:.3f} s  p99 {r['p99']:.3f} s")
    if "ttft_p50" in r:
        line += f"  first token p50 {r['ttft_p50']:.3f} s  p95 {r['ttft_p95']:.3f} s  p99 {r['ttft_p99']:.3f} s"
    if r.get("batches"):
        line += f"  {r['batch_inputs'] / r['batches']:.1f} inputs a batch ({r['batches']:.0f} batches)"
    print(line, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qkv", default="build/qkv")
    p.add_argument("--checkpoint")
    p.add_argument("--route", choices=["translations", "completions"], default="translations")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--requests", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=32, help="completions: max_tokens of each request")
    p.add_argument("--stream", action="store_true", help="completions: streamed, timing the first token too")
    p.add_argument("--stop-at-eos", action="store_true",
                   help="completions end at EOS (default: ignore_eos, every one max_tokens long, as vLLM's benchmarks)")
    p.add_argument("--rate", type=float, help="an open loop at this many requests/s instead of --clients")
    p.add_argument("--no-ct2", action="store_true", help="translations: without the CTranslate2 peer")
    p.add_argument("--venv", default="build/bench-venv", help="the peers' venv (bench/setup_peers.sh)")
    p.add_argument("--compute-type", default="float32", help="of qkv serve and the CTranslate2 peer")
    p.add_argument("--shape", choices=sorted(SHAPES), default="small",
                   help="without --checkpoint: the model trained (small: the Bible recipe's shape, 8,000 pieces)")
    a = p.parse_args()
    if a.stream and a.route != "completions":
        p.error("--stream is for --route completions")
    IGNORE_EOS[0] = not a.stop_at_eos
    with tempfile.TemporaryDirectory() as work:
        checkpoint = a.checkpoint or train_model(a.qkv, a.route, work, a.threads, a.shape)
        texts = sentences(a.requests, 7, a.shape)
        texts = [t.upper() for t in texts] if a.route == "translations" else [" ".join(t.split()[:4]) for t in texts]
        loop = f"an open loop at {a.rate} requests/s" if a.rate else f"{a.clients} clients in a closed loop"
        print(f"qkv serve, {a.route}{' (streamed)' if a.stream else ''}: {loop}, {a.requests} requests of one "
              f"{'sentence' if a.route == 'translations' else f'prompt, max_tokens {a.max_tokens}'} each, "
              f"{a.threads} threads, {a.compute_type}, checkpoint {checkpoint}", flush=True)
        qkv_extra = ["--compute-type", a.compute_type]
        servers = [("batched" if a.route == "translations" else "continuous batching",
                    lambda: Server.qkv(a.qkv, checkpoint, a.threads, qkv_extra)),
                   ("one at a time", lambda: Server.qkv(a.qkv, checkpoint, a.threads, [*qkv_extra, "--max-batch-tokens", "1"]))]
        if a.route == "translations" and not a.no_ct2:
            servers.append(("ct2 behind FastAPI", lambda: ct2_server(a.venv, checkpoint, a.threads, a.compute_type, work)))
        results = {}
        for name, start in servers:
            server = start()
            try:
                closed_loop(server, a.route, texts[: min(8, len(texts))], min(4, a.clients), min(8, a.requests),
                            a.max_tokens, a.stream)  # warm-up
                before = batch_counts(server)
                r = results[name] = (open_loop(server, a.route, texts, a.rate, a.requests, a.max_tokens, a.stream)
                                     if a.rate else
                                     closed_loop(server, a.route, texts, a.clients, a.requests, a.max_tokens, a.stream))
                after = batch_counts(server)
                if before and after:
                    r["batches"], r["batch_inputs"] = after[0] - before[0], after[1] - before[1]
            finally:
                server.stop()
            print_result(name, r)
        first, names = servers[0][0], [n for n, _ in servers]
        for other in names[1:]:
            tokens = (f"{results[first]['tokens_per_s'] / results[other]['tokens_per_s']:.2f}x the tokens/s, "
                      if results[other]["tokens_per_s"] else "")
            print(f"ratio {first} / {other}: {results[first]['requests_per_s'] / results[other]['requests_per_s']:.2f}x "
                  f"the requests/s, {tokens}p99 latency {results[first]['p99'] / results[other]['p99']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
