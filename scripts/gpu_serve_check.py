#!/usr/bin/env python3
"""`qkv serve --device cuda` against the CLI on the same GPU (scripts/gpu_check.sh runs it).

Trains a small language model and a small translation model on the GPU (sentences made here), then
sends a flood of concurrent requests to one server on the GPU: greedy completions (continuous batching:
sequences join a running batch on the GPU, their key/value rows copied in place) and translations
(batched across requests, beam 4). Every answer must equal what `qkv generate` / `qkv translate
--device cuda` give for that input alone or in one batch; the CPU's answers are reported beside them.
Then the same completions under `--max-memory` a little above what the loaded model holds on the
device: each answer must still be the CLI's (the running batch preempted and prefilled again) or a 503
out_of_memory, and the server must stay healthy.
Usage: gpu_serve_check.py QKV_BINARY OUT_DIR [DEVICE] (default cuda; cpu tries the script on a machine
without a GPU). Exit 0 when the server's answers are the CLI's on the same device."""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))
from serve_process import ServeProcess  # noqa: E402 (the tests' server process)
from toy_text import sentences, write_lines  # noqa: E402 (the tests' made-up sentences)


def qkv(binary: str, *args: str) -> list[str]:
    r = subprocess.run([binary, *args, "--quiet"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"qkv {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r.stdout.split("\n")


class Server(ServeProcess):
    """`qkv serve` writing to OUT/serve.log (started anew by each server); a failure ends the check."""

    def __init__(self, binary: str, out: Path, *args: str):
        self.log = open(out / "serve.log", "w")
        try:
            super().__init__([binary, "serve", *args, "--port", "0"], log=self.log)
        except RuntimeError as e:
            raise SystemExit(f"{e} (see serve.log)")

    def stop(self) -> int:
        try:
            return super().stop()
        except RuntimeError as e:
            raise SystemExit(str(e))
        finally:
            self.log.close()


def compare(name: str, served: list[str], gpu: list[str], cpu: list[str]) -> bool:
    same_gpu = sum(a == b for a, b in zip(served, gpu))
    same_cpu = sum(a == b for a, b in zip(served, cpu))
    print(f"{name}: {len(served)} answers; equal to the CLI's on that device: {same_gpu}; to the CPU's: {same_cpu}")
    for i, (a, b) in enumerate(zip(served, gpu)):
        if a != b:
            print(f"  line {i}: served {a!r}, the CLI {b!r}")
            break
    return same_gpu == len(served) == len(gpu)


def metric_value(text: str, line_start: str) -> float:
    return next((float(l.split()[-1]) for l in text.splitlines() if l.startswith(line_start)), 0.0)


def memory_limit_check(binary: str, out: Path, lm: str, prompts: list[str], expected: list[str], device: str) -> bool:
    """Completions under --max-memory: the CLI's text, or 503 out_of_memory; preemptions counted."""
    roomy = Server(binary, out, "--model", f"lm={lm}", "--device", device)
    label = device if device == "cpu" or ":" in device else device + ":0"  # Device::name()
    held = int(metric_value(roomy.get("/metrics")[1], f'qkv_memory_bytes{{device="{label}"}}'))
    roomy.stop()
    ok, preemptions = held > 0, 0.0
    for margin in (64 << 10, 256 << 10, 1 << 20):
        server = Server(binary, out, "--model", f"lm={lm}", "--device", device, "--max-concurrent-sequences", "16",
                        "--max-memory", str(held + margin))
        try:
            def complete(p: str) -> tuple[int, dict]:
                return server.post("/v1/completions", {"model": "lm", "prompt": p, "max_tokens": 20, "temperature": 0})

            with ThreadPoolExecutor(32) as pool:
                answers = list(pool.map(complete, prompts))
            metrics = server.get("/metrics")[1]
            health = server.get("/health")[0]
        except BaseException:
            server.kill()
            raise
        code = server.stop()
        equal = sum(st == 200 and r["choices"][0]["text"] == e for (st, r), e in zip(answers, expected))
        refused = sum(st == 503 and r.get("error", {}).get("code") == "out_of_memory" for st, r in answers)
        preempted = metric_value(metrics, 'qkv_preemptions_total{model="lm"}')
        preemptions += preempted
        print(f"  --max-memory {held} + {margin >> 10} KiB: {equal} answers equal to the CLI's, {refused} refused "
              f"(503 out_of_memory), {len(answers) - equal - refused} other; {preempted:.0f} preemptions; /health {health}; "
              f"exit {code}")
        ok &= equal + refused == len(answers) and health == 200 and code == 0
    print(f"completions under --max-memory on {device}: {'ok' if ok else 'FAILED'} "
          f"({preemptions:.0f} preemptions in all; held {held} bytes before any request)")
    return ok


def main() -> int:
    binary, out = sys.argv[1], Path(sys.argv[2])
    device = sys.argv[3] if len(sys.argv) > 3 else "cuda"
    out.mkdir(parents=True, exist_ok=True)
    small = ["--d-model", "32", "--heads", "2", "--layers", "2", "--d-ff", "64", "--spm-vocab", "300",
             "--log-every", "100", "--valid-every", "0", "--lr", "3e-3", "--warmup", "5", "--device", device]
    text = write_lines(out / "text.txt", sentences(400, 1))
    qkv(binary, "train", "--arch", "decoder-only", "--text", str(text), "--output-dir", str(out / "lm"),
        "--block-size", "32", "--batch-size", "8", "--steps", "80", *small)
    src = sentences(300, 2)
    write_lines(out / "train.src", src)
    write_lines(out / "train.tgt", [" ".join(reversed(s.split())) for s in src])
    qkv(binary, "train", "--src", str(out / "train.src"), "--tgt", str(out / "train.tgt"), "--output-dir",
        str(out / "mt"), "--max-seq-length", "96", "--max-batch-tokens", "400", "--steps", "80", *small)
    lm, mt = str(out / "lm" / "last"), str(out / "mt" / "last")

    prompts = [" ".join(s.split()[:1 + i % 4]) for i, s in enumerate(sentences(48, 3))]
    inputs = sentences(48, 4)
    write_lines(out / "prompts.txt", prompts)
    write_lines(out / "inputs.txt", inputs)
    completions = {d: qkv(binary, "generate", "--checkpoint", lm, "--input", str(out / "prompts.txt"),
                          "--max-new-tokens", "20", "--device", d)[:len(prompts)] for d in (device, "cpu")}
    translations = {d: qkv(binary, "translate", "--checkpoint", mt, "--input", str(out / "inputs.txt"),
                           "--beam-size", "4", "--device", d)[:len(inputs)] for d in (device, "cpu")}

    server = Server(binary, out, "--model", f"lm={lm}", "--model", f"mt={mt}", "--device", device,
                    "--max-concurrent-sequences", "8")

    def answer(path: str, body: dict, read) -> str:
        status, r = server.post(path, body)
        try:
            return read(r) if status == 200 else f"<HTTP {status}: {r}>"
        except (KeyError, IndexError, TypeError):
            return f"<HTTP 200, an unexpected body: {r}>"

    def complete(p: str) -> str:
        return answer("/v1/completions", {"model": "lm", "prompt": p, "max_tokens": 20, "temperature": 0},
                      lambda r: r["choices"][0]["text"])

    def translate(s: str) -> str:
        return answer("/v1/translations", {"model": "mt", "input": s, "beam_size": 4, "truncate": True},
                      lambda r: r["data"][0]["translation"])

    # 16 clients at once: completions join the running batch (8 sequences at most) as others finish.
    try:
        with ThreadPoolExecutor(16) as pool:
            served_completions = list(pool.map(complete, prompts))
            served_translations = list(pool.map(translate, inputs))
        status, _ = server.get("/metrics")
    except BaseException:
        server.kill()
        raise
    ok = compare(f"completions (greedy, 16 clients, continuous batching on {device})", served_completions,
                 completions[device], completions["cpu"])
    ok &= compare(f"translations (beam 4, 16 clients, batched on {device})", served_translations,
                  translations[device], translations["cpu"])
    ok &= status == 200
    code = server.stop()
    print(f"qkv serve --device {device}: /metrics {status}; exit {code} after SIGTERM")
    ok &= memory_limit_check(binary, out, lm, prompts, completions[device], device)
    return 0 if ok and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
