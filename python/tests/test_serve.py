"""`qkv serve`: every family over HTTP gives what the CLI gives, under concurrent clients too; every
error has its status and OpenAI's error body; streaming, overload, API keys, metrics and SIGTERM.
Loopback only; the tiny checkpoints of conftest.py."""
from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import qkv
from conftest import TINY_MODEL, qkv_bin, run_qkv, sentences, write_lines
from serve_process import ServeProcess


class Server(ServeProcess):
    """A `qkv serve` process on a free port of 127.0.0.1, one compute thread (its stderr in proc.stderr)."""

    def __init__(self, tmp_path, *args: str):
        super().__init__([qkv_bin(), "serve", *args, "--port", "0", "--threads", "1"])


@pytest.fixture(scope="module")
def server(translation_checkpoint, lm_checkpoint, encoder_checkpoint, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve"), "--model", f"mt={translation_checkpoint}", "--model",
               f"lm={lm_checkpoint}", "--model", f"enc={encoder_checkpoint}", "--max-body-bytes", "100000")
    yield s
    assert s.stop() == 0


def cli_lines(*args: str, n: int) -> list[str]:
    return run_qkv(*args, "--threads", "1", "--quiet").stdout.split("\n")[:n]


def test_completions_equal_qkv_generate(server, lm_checkpoint, tmp_path):
    prompts = ["the light", "", "God said let there"]
    inp = write_lines(tmp_path / "prompts.txt", prompts)
    greedy = cli_lines("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), "--max-new-tokens", "12", n=3)
    sampled = cli_lines("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), "--max-new-tokens", "12",
                        "--do-sample", "--seed", "5", "--top-k", "10", n=3)
    status, r = server.post("/v1/completions", {"model": "lm", "prompt": prompts, "max_tokens": 12, "temperature": 0})
    assert status == 200 and [c["text"] for c in r["choices"]] == greedy
    assert r["object"] == "text_completion" and r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"] + \
        r["usage"]["completion_tokens"]
    status, r = server.post("/v1/completions", {"model": "lm", "prompt": prompts, "max_tokens": 12, "seed": 5,
                                                "top_k": 10})
    assert status == 200 and [c["text"] for c in r["choices"]] == sampled
    assert all(c["finish_reason"] in ("stop", "length") for c in r["choices"])
    # A stop string cuts the text before it, and says so.
    text = max(sampled, key=len)
    assert len(text) >= 4, "the small model's sampled text is long enough to cut"
    stop = text[2:4]
    status, r = server.post("/v1/completions", {"model": "lm", "prompt": prompts[sampled.index(text)],
                                                "max_tokens": 12, "seed": 5, "top_k": 10, "stop": stop})
    # (one prompt is line 0 of its own request: compare with that prompt's line-0 text)
    alone = cli_lines("generate", "--checkpoint", lm_checkpoint, "--prompt", prompts[sampled.index(text)],
                      "--max-new-tokens", "12", "--do-sample", "--seed", "5", "--top-k", "10", n=1)[0]
    cut = alone.find(stop)
    assert r["choices"][0]["text"] == (alone[:cut] if cut >= 0 else alone)
    assert r["choices"][0]["finish_reason"] == ("stop" if cut >= 0 else r["choices"][0]["finish_reason"])


def test_ignore_eos_gives_every_choice_max_tokens_as_qkv_generate_does(server, lm_checkpoint, tmp_path):
    prompts = ["the light", "", "God said let there"]
    inp = write_lines(tmp_path / "prompts.txt", prompts)
    expected = cli_lines("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), "--max-new-tokens", "12",
                         "--ignore-eos", n=3)
    status, r = server.post("/v1/completions", {"model": "lm", "prompt": prompts, "max_tokens": 12, "temperature": 0,
                                                "ignore_eos": True})
    assert status == 200 and [c["text"] for c in r["choices"]] == expected
    assert r["usage"]["completion_tokens"] == 3 * 12 and all(c["finish_reason"] == "length" for c in r["choices"])


def test_streamed_completion_joins_to_the_whole(server):
    body = {"model": "lm", "prompt": "the light", "max_tokens": 12, "seed": 3}
    _, whole = server.post("/v1/completions", body)
    status, headers, text = server.request("POST", "/v1/completions",
                                           json.dumps({**body, "stream": True}).encode("utf-8"),
                                           {"Content-Type": "application/json"})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [line[len("data: "):] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert len(chunks) >= 2


def test_translations_equal_qkv_translate(server, translation_checkpoint, data_dir, tmp_path):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:12]] + [""]
    inp = write_lines(tmp_path / "in.es", src)
    for beam in (1, 4):
        cli = cli_lines("translate", "--checkpoint", translation_checkpoint, "--input", str(inp), "--beam-size", str(beam),
                        n=len(src))
        status, r = server.post("/v1/translations", {"model": "mt", "input": src, "beam_size": beam, "truncate": True})
        assert status == 200 and [d["translation"] for d in r["data"]] == cli
        assert all(len(d["hypotheses"]) == 1 and d["hypotheses"][0]["translation"] == d["translation"]
                   for d in r["data"][:-1])
        assert r["data"][-1]["hypotheses"] == [] and r["data"][-1]["score"] is None  # the empty input
    status, r = server.post("/v1/translations", {"model": "mt", "input": src[:3], "beam_size": 4, "num_hypotheses": 3})
    assert status == 200 and all(len(d["hypotheses"]) == 3 for d in r["data"])
    assert all(d["hypotheses"][0]["translation"] == d["translation"] for d in r["data"])
    assert all(d["hypotheses"][0]["score"] == d["score"] for d in r["data"])
    assert all("n_best" not in d for d in r["data"])
    # The request's old name n_best still works, and its answer keeps the old key too (one release).
    status, old = server.post("/v1/translations", {"model": "mt", "input": src[:3], "beam_size": 4, "n_best": 3})
    assert status == 200 and all(d["n_best"] == d["hypotheses"] for d in old["data"])
    assert [d["hypotheses"] for d in old["data"]] == [d["hypotheses"] for d in r["data"]]


def score_lines(checkpoint: str, tgt: list[list[int]], src: list[list[int]] | None, tmp_path) -> list[float]:
    """`qkv score --per-line` of id lines."""
    tgt_path = write_lines(tmp_path / "score.tgt", [" ".join(map(str, t)) for t in tgt])
    args = ["score", "--checkpoint", checkpoint, "--tgt", str(tgt_path), "--per-line"]
    if src is not None:
        args += ["--src", str(write_lines(tmp_path / "score.src", [" ".join(map(str, s)) for s in src]))]
    return [float(x) for x in run_qkv(*args, "--threads", "1").stdout.split("\n")[:len(tgt)]]


def tokenize(tokenizer: str, texts: list[str], tmp_path) -> list[list[int]]:
    inp = write_lines(tmp_path / "tokenize.txt", texts)
    out = run_qkv("tokenize", "--tokenizer", tokenizer, "--input", str(inp)).stdout.split("\n")[:len(texts)]
    return [[int(t) for t in line.split()] for line in out]


def test_score_equals_qkv_score(server, translation_checkpoint, lm_checkpoint, tmp_path):
    with open(f"{lm_checkpoint}/config.json") as f:
        lm = json.load(f)
    texts = ["the light was good", "God said let there be light", "x"]
    status, r = server.post("/v1/score", {"model": "lm", "input": texts})
    assert status == 200 and r["object"] == "list" and [d["index"] for d in r["data"]] == [0, 1, 2], r
    ids = [[lm["bos_id"]] + t for t in tokenize(f"{lm_checkpoint}/spm.model", texts, tmp_path)]
    want = score_lines(lm_checkpoint, ids, None, tmp_path)
    assert [d["tokens"] for d in r["data"]] == [len(t) - 1 for t in ids]
    assert np.allclose([d["log_prob"] for d in r["data"]], want, rtol=1e-5, atol=1e-5), (r, want)
    assert r["usage"]["prompt_tokens"] == sum(len(t) - 1 for t in ids)

    with open(f"{translation_checkpoint}/config.json") as f:
        mt = json.load(f)
    sources, targets = ["y la luz", "dijo Dios"], ["and the light", "God said"]
    status, r = server.post("/v1/score", {"model": "mt", "source": sources, "input": targets})
    assert status == 200, r
    src = tokenize(f"{translation_checkpoint}/source.spm.model", sources, tmp_path)
    tgt = [[mt["bos_id"]] + t + [mt["eos_id"]]
           for t in tokenize(f"{translation_checkpoint}/target.spm.model", targets, tmp_path)]
    want = score_lines(translation_checkpoint, tgt, src, tmp_path)
    assert np.allclose([d["log_prob"] for d in r["data"]], want, rtol=1e-5, atol=1e-5), (r, want)
    # One text alone scores as in a batch with others.
    status, alone = server.post("/v1/score", {"model": "mt", "source": sources[1], "input": targets[1]})
    assert status == 200 and np.isclose(alone["data"][0]["log_prob"], want[1], rtol=1e-5, atol=1e-5)

    long = " ".join(["and the light was good"] * 40)
    for body in ({"model": "lm", "input": [long]}, {"model": "mt", "source": ["luz"], "input": [long]}):
        status, e = server.post("/v1/score", body)
        assert status == 413 and e["error"]["param"] == "input" and e["error"]["code"] == "input_too_long", e
    for body, param in (({"model": "mt", "input": targets}, "source"),
                        ({"model": "mt", "input": targets, "source": sources[:1]}, "source"),
                        ({"model": "lm", "input": texts, "source": texts}, "source"),
                        ({"model": "enc", "input": texts}, "model")):
        status, e = server.post("/v1/score", body)
        assert status == 400 and e["error"]["param"] == param, (body, e)


def test_embeddings_equal_qkv_embed(server, encoder_checkpoint, tmp_path):
    texts = sentences(7, 9) + [""]
    inp = write_lines(tmp_path / "sentences.txt", texts)
    run_qkv("embed", "--checkpoint", encoder_checkpoint, "--input", str(inp), "-o", str(tmp_path / "e.npy"),
            "--threads", "1")
    # Past the context: 413 unless the request asks for the cut `qkv embed` makes.
    expect_error(server.post("/v1/embeddings", {"model": "enc", "input": texts}), 413, "input", "input_too_long")
    status, r = server.post("/v1/embeddings", {"model": "enc", "input": texts, "truncate": True})
    assert status == 200 and r["object"] == "list" and [d["index"] for d in r["data"]] == list(range(len(texts)))
    np.testing.assert_allclose(np.array([d["embedding"] for d in r["data"]], dtype=np.float32),
                               np.load(tmp_path / "e.npy"), rtol=0, atol=1e-6)
    status, r = server.post("/v1/embeddings", {"model": "enc", "input": "the light"})
    assert status == 200 and len(r["data"]) == 1
    # base64: the float32 bytes (what OpenAI's Python client asks for by default)
    status, b = server.post("/v1/embeddings", {"model": "enc", "input": "the light", "encoding_format": "base64"})
    import base64
    assert status == 200 and np.frombuffer(base64.b64decode(b["data"][0]["embedding"]), dtype="<f4").tolist() == \
        pytest.approx(r["data"][0]["embedding"], abs=0)


def expect_error(result, status: int, param: str | None = None, code: str | None = None):
    got_status, body = result
    assert got_status == status, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err


def test_every_error_has_its_status_and_names_the_field(server):
    for body in (b"{not json", b'{"model": "lm", "prompt": "\x80\xc3"}'):  # (and bytes that are not UTF-8)
        status, _, text = server.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        assert status == 400 and json.loads(text)["error"]["code"] == "invalid_json"
    expect_error(server.post("/v1/completions", {"prompt": "x"}), 400, "model")
    expect_error(server.post("/v1/completions", {"model": "lm"}), 400, "prompt")
    expect_error(server.post("/v1/completions", {"model": "lm", "prompt": [1, 2]}), 400, "prompt")
    expect_error(server.post("/v1/completions", {"model": "lm", "prompt": "x", "max_tokens": "many"}), 400, "max_tokens")
    expect_error(server.post("/v1/completions", {"model": "lm", "prompt": "x", "top_p": 0}), 400, "top_p")
    expect_error(server.post("/v1/completions", {"model": "lm", "prompt": "x", "echo": True}), 400, "echo")
    expect_error(server.post("/v1/completions", {"model": "lm", "prompt": ["a", "b"], "stream": True}), 400, "stream")
    expect_error(server.post("/v1/completions", {"model": "nope", "prompt": "x"}), 404, "model", "model_not_found")
    expect_error(server.post("/v1/completions", {"model": "mt", "prompt": "x"}), 400, "model", "wrong_model_family")
    expect_error(server.post("/v1/translations", {"model": "mt", "input": "x", "beam_size": 2, "n_best": 3}), 400,
                 "n_best")
    expect_error(server.post("/v1/classifications", {"model": "enc", "input": "x"}), 400, "model", "no_classifier")
    expect_error(server.post("/v1/embeddings", {"model": "enc", "input": "x", "encoding_format": "int8"}), 400,
                 "encoding_format")
    # Too long: a prompt past the model's context, a body past --max-body-bytes.
    expect_error(server.post("/v1/completions", {"model": "lm", "prompt": "the light " * 400}), 413, "prompt",
                 "input_too_long")
    expect_error(server.post("/v1/embeddings", {"model": "enc", "input": "a" * 200000}), 413)
    status, _, text = server.request("GET", "/v1/nothing")
    assert status == 404 and json.loads(text)["error"]["code"] == "unknown_route"
    # After all that the server is healthy.
    assert server.request("GET", "/health")[0] == 200


def test_models_and_metrics(server):
    status, _, text = server.request("GET", "/v1/models")
    models = {m["id"]: m["family"] for m in json.loads(text)["data"]}
    assert status == 200 and models == {"mt": "encoder-decoder", "lm": "decoder-only", "enc": "encoder-only"}
    server.post("/v1/embeddings", {"model": "enc", "input": "the light"})
    status, headers, text = server.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    counted = [line for line in text.splitlines() if line.startswith('qkv_requests_total{route="/v1/embeddings",status="200"}')]
    assert counted and int(counted[0].split()[-1]) >= 1
    assert 'qkv_queue_length{model="enc"} 0' in text and "qkv_batch_requests_count" in text
    assert 'qkv_running_sequences{model="lm"} 0' in text and 'qkv_running_sequences{model="enc"}' not in text


def test_concurrent_clients_get_what_the_cli_gives_and_requests_share_batches(server, translation_checkpoint,
                                                                              data_dir, tmp_path):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:32]]
    inp = write_lines(tmp_path / "in.es", src)
    expected = cli_lines("translate", "--checkpoint", translation_checkpoint, "--input", str(inp), "--beam-size", "4",
                         n=len(src))

    def batches() -> int:
        text = server.request("GET", "/metrics")[2]
        return int(next(l for l in text.splitlines() if l.startswith('qkv_batches_total{model="mt"}')).split()[-1])

    before = batches()
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda s: server.post("/v1/translations", {"model": "mt", "input": s}), src))
    assert [a[0] for a in answers] == [200] * len(src)
    assert [a[1]["data"][0]["translation"] for a in answers] == expected
    assert batches() - before < len(src), "requests arriving together share batches"


def metric(server, name: str, model: str) -> float:
    text = server.request("GET", "/metrics")[2]
    return float(next(l for l in text.splitlines() if l.startswith(f'{name}{{model="{model}"}}')).split()[-1])


def completion_requests() -> list[dict]:
    """Greedy and sampled completions of every length the tiny model's context allows, with n > 1,
    stop strings and streams among them."""
    prompts = ["the light", "", "God said let there", "and the evening", "waters", "day"]
    out = []
    for i in range(24):
        body = {"model": "lm", "prompt": prompts[i % len(prompts)], "max_tokens": 3 + (5 * i) % 22}
        if i % 3 == 0:
            body["temperature"] = 0
        else:
            body.update(seed=100 + i, top_k=10 + i % 3)
        if i % 5 == 1:
            body["n"] = 2
        if i % 7 == 2:
            body["stop"] = ["e", "th"]
        if i % 4 == 3 and body.get("n", 1) == 1:
            body["stream"] = True
        out.append(body)
    return out


def complete(server, body: dict) -> list[tuple[str, str]]:
    """(text, finish_reason) of each choice; a streamed answer joined from its events."""
    if not body.get("stream"):
        status, r = server.post("/v1/completions", body)
        assert status == 200, r
        return [(c["text"], c["finish_reason"]) for c in r["choices"]]
    status, _, text = server.request("POST", "/v1/completions", json.dumps(body).encode("utf-8"),
                                     {"Content-Type": "application/json"})
    assert status == 200
    events = [line[len("data: "):] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
    return [("".join(c["text"] for c in chunks), chunks[-1]["finish_reason"])]


def test_completions_join_a_running_batch_and_answer_as_alone(server):
    requests = completion_requests()
    alone = [complete(server, body) for body in requests]  # one after another: nothing else runs
    steps, requests_in_steps = (metric(server, "qkv_batches_total", "lm"),
                                metric(server, "qkv_batch_requests_sum", "lm"))

    def staggered(i: int):
        time.sleep(0.002 * (i % 8))  # arrivals spread over the running batch's steps
        return complete(server, requests[i])

    with ThreadPoolExecutor(24) as pool:
        together = list(pool.map(staggered, range(len(requests))))
    for i, (a, t) in enumerate(zip(alone, together)):
        assert t == a, f"request {i} ({requests[i]}) answered {t} under load, {a} alone"
    steps = metric(server, "qkv_batches_total", "lm") - steps
    requests_in_steps = metric(server, "qkv_batch_requests_sum", "lm") - requests_in_steps
    assert requests_in_steps / steps > 1.5, "concurrent completions share the generation steps"


@pytest.mark.parametrize("batching", [[], ["--max-batch-tokens", "1"]], ids=["continuous", "one-at-a-time"])
def test_completions_one_request_at_a_time_equal_the_batched_ones(lm_checkpoint, tmp_path, batching):
    s = Server(tmp_path, "--model", f"lm={lm_checkpoint}", "--max-concurrent-sequences", "3", *batching)
    try:
        requests = completion_requests()[:12]
        expected = [complete(s, body) for body in requests]
        with ThreadPoolExecutor(12) as pool:
            assert list(pool.map(lambda b: complete(s, b), requests)) == expected
    finally:
        assert s.stop() == 0


def test_completions_under_overload_are_answered_or_refused(lm_checkpoint, tmp_path):
    s = Server(tmp_path, "--model", f"lm={lm_checkpoint}", "--max-queue", "4", "--max-concurrent-sequences", "4")
    try:
        requests = [dict(r, stream=False) for r in completion_requests()] * 3  # 72 requests, room for 4 waiting
        expected = {i: complete(s, body) for i, body in enumerate(requests[:24])}

        def ask(i: int):
            status, r = s.post("/v1/completions", requests[i])
            return i, status, r

        with ThreadPoolExecutor(64) as pool:
            answers = list(pool.map(ask, range(len(requests))))
        statuses = {status for _, status, _ in answers}
        assert statuses <= {200, 503} and 503 in statuses, statuses
        for i, status, r in answers:
            if status == 200:
                assert [(c["text"], c["finish_reason"]) for c in r["choices"]] == expected[i % 24]
            else:
                assert r["error"]["code"] == "queue_full"
        assert s.request("GET", "/health")[0] == 200
        assert complete(s, requests[0]) == expected[0]
    finally:
        assert s.stop() == 0


def memory_held(server) -> int:
    text = server.request("GET", "/metrics")[2]
    return int(float(next(l for l in text.splitlines() if l.startswith('qkv_memory_bytes{device="cpu"}')).split()[-1]))


def test_completions_under_a_memory_limit_are_preempted_or_refused_never_wrong(lm_checkpoint, tmp_path):
    """--max-memory a little above what the loaded model holds: concurrent completions that do not fit
    together are preempted and resumed with fewer rows (the same text as alone), or, when one does not
    fit even alone, refused with 503 out_of_memory; the server goes on."""
    requests = [dict(r, stream=False) for r in completion_requests()]
    roomy = Server(tmp_path, "--model", f"lm={lm_checkpoint}")
    try:
        held = memory_held(roomy)
        expected = [complete(roomy, body) for body in requests]
    finally:
        assert roomy.stop() == 0
    preemptions, refused, answered = 0, 0, 0
    for margin in (16 << 10, 48 << 10, 160 << 10):
        s = Server(tmp_path, "--model", f"lm={lm_checkpoint}", "--max-memory", str(held + margin))
        try:
            with ThreadPoolExecutor(len(requests)) as pool:
                answers = list(pool.map(lambda b: s.post("/v1/completions", b), requests))
            for i, (status, r) in enumerate(answers):
                if status == 200:
                    answered += 1
                    assert [(c["text"], c["finish_reason"]) for c in r["choices"]] == expected[i], (margin, requests[i])
                else:
                    refused += 1
                    assert status == 503 and r["error"]["code"] == "out_of_memory", (status, r)
                    assert "--max-memory" in r["error"]["message"]
            preemptions += metric(s, "qkv_preemptions_total", "lm") if "qkv_preemptions_total{" in \
                s.request("GET", "/metrics")[2] else 0
            assert s.request("GET", "/health")[0] == 200
            limit = s.request("GET", "/metrics")[2]
            assert f'qkv_memory_limit_bytes{{device="cpu"}} {held + margin}' in limit
        finally:
            assert s.stop() == 0
    assert answered > 0 and preemptions > 0, (answered, refused, preemptions)


def test_a_memory_limit_below_the_model_is_an_error_naming_it(lm_checkpoint, tmp_path):
    r = run_qkv("serve", "--model", f"lm={lm_checkpoint}", "--port", "0", "--max-memory", "1000", check=False)
    assert r.returncode == 1 and "qkv: error:" in r.stderr and "--max-memory" in r.stderr, r.stderr
    for bad in ("auto", "12Q", "-3"):
        r = run_qkv("serve", "--model", f"lm={lm_checkpoint}", "--max-memory", bad, check=False)
        assert r.returncode == 2 and "--max-memory" in r.stderr, (bad, r.stderr)


def test_api_key_and_overload(translation_checkpoint, data_dir, tmp_path):
    s = Server(tmp_path, "--model", f"mt={translation_checkpoint}", "--api-key", "sesame", "--max-queue", "2",
               "--max-batch-tokens", "1")
    try:
        expect_error(s.post("/v1/translations", {"model": "mt", "input": "x"}), 401, code="invalid_api_key")
        expect_error(s.post("/v1/translations", {"model": "mt", "input": "x"}, {"Authorization": "Bearer open"}), 401)
        assert s.request("GET", "/health")[0] == 200  # /health needs no key
        key = {"Authorization": "Bearer sesame"}
        src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:48]]
        inp = write_lines(tmp_path / "in.es", src)
        expected = cli_lines("translate", "--checkpoint", translation_checkpoint, "--input", str(inp), "--beam-size", "4",
                             n=len(src))

        def ask(i: int):
            status, headers, text = s.request("POST", "/v1/translations",
                                              json.dumps({"model": "mt", "input": src[i]}).encode("utf-8"),
                                              {"Content-Type": "application/json", **key})
            return i, status, headers, json.loads(text)

        with ThreadPoolExecutor(48) as pool:
            answers = list(pool.map(ask, range(len(src))))
        statuses = {status for _, status, _, _ in answers}
        assert statuses <= {200, 503} and 503 in statuses, statuses  # 64 clients, room for 2: refusals, no 500
        for i, status, headers, body in answers:
            if status == 200:
                assert body["data"][0]["translation"] == expected[i]
            else:
                assert headers.get("Retry-After") == "1" and body["error"]["code"] == "queue_full"
        assert s.request("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("batching", [[], ["--max-batch-tokens", "1"]], ids=["continuous", "one-at-a-time"])
def test_sigterm_finishes_the_requests_in_flight(lm_checkpoint, tmp_path, batching):
    s = Server(tmp_path, "--model", f"lm={lm_checkpoint}", *batching)
    results = []

    def ask(i: int):
        try:
            results.append(s.post("/v1/completions", {"model": "lm", "prompt": f"the light {i}", "max_tokens": 16,
                                                      "seed": i})[0])
        except (urllib.error.URLError, ConnectionError) as e:  # refused once the server stopped listening
            results.append(type(e).__name__)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    assert s.stop(signal.SIGTERM) == 0
    for t in threads:
        t.join()
    assert 500 not in results and len(results) == 16
    assert "stopped" in s.proc.stderr.read()


def test_bad_command_lines_are_refused(tmp_path, translation_checkpoint):
    r = run_qkv("serve", "--model", translation_checkpoint, check=False)
    assert r.returncode == 2 and "NAME=DIR" in r.stderr
    r = run_qkv("serve", "--model", f"a={tmp_path}/missing", "--port", "0", check=False)
    assert r.returncode == 1 and "qkv: error:" in r.stderr and "missing" in r.stderr


def test_classifications_equal_qkv_classify(data_dir, tmp_path):
    texts = sentences(40, 11)
    labelled = write_lines(tmp_path / "labelled.tsv", [("long" if len(t) > 40 else "short") + "\t" + t for t in texts])
    out = tmp_path / "clf"
    run_qkv("train", "--arch", "encoder-only", "--objective", "classify", "--labelled", str(labelled), "--output-dir", str(out),
            "--spm-vocab", "300", "--block-size", "48", "--batch-size", "8", "--steps", "5", "--log-every", "5",
            "--valid-every", "0", "--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32", "--threads", "1")
    inp = write_lines(tmp_path / "in.txt", texts[:9])
    cli = run_qkv("classify", "--checkpoint", str(out / "last"), "--input", str(inp), "--top-k", "2",
                  "--threads", "1").stdout.split("\n")[:9]
    s = Server(tmp_path, "--model", f"clf={out / 'last'}")
    try:
        status, r = s.post("/v1/classifications", {"model": "clf", "input": texts[:9], "top_k": 2, "truncate": True})
        assert status == 200
        for line, d in zip(cli, r["data"]):
            fields = line.split("\t")
            assert [l["label"] for l in d["labels"]] == fields[0::2] and d["label"] == fields[0]
            np.testing.assert_allclose([l["probability"] for l in d["labels"]], [float(p) for p in fields[1::2]],
                                       rtol=0, atol=5.01e-5)  # the CLI prints 4 decimals
    finally:
        assert s.stop() == 0
    # Python's typed form gives the CLI's labels and probabilities.
    encoder = qkv.Encoder(str(out / "last"))
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        encoder.classify_batch(texts[:2], top_k=0)
    results = encoder.classify_batch(texts[:9], top_k=2)
    for line, r in zip(cli, results):
        fields = line.split("\t")
        assert isinstance(r, qkv.ClassificationResult)
        assert r.label == fields[0] and [label for label, _ in r.top] == fields[0::2]
        assert r.probability == pytest.approx(float(fields[1]), abs=5.01e-5)


def test_a_request_past_the_timeout_gets_504_and_the_server_goes_on(translation_checkpoint, data_dir, tmp_path):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:256]]
    s = Server(tmp_path, "--model", f"mt={translation_checkpoint}", "--request-timeout", "0.005")
    try:
        expect_error(s.post("/v1/translations", {"model": "mt", "input": src, "beam_size": 8, "truncate": True}), 504,
                     code="timeout")
        assert s.request("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0


def test_clients_that_leave_mid_stream_do_not_hurt_the_server(server):
    import socket
    from urllib.parse import urlparse
    u = urlparse(server.url)
    body = json.dumps({"model": "lm", "prompt": "the light", "max_tokens": 20, "seed": 1, "stream": True}).encode()
    for _ in range(8):  # each client reads the headers, then hangs up
        with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            assert sock.recv(64).startswith(b"HTTP/1.1 200")
    status, r = server.post("/v1/completions", {"model": "lm", "prompt": "the light", "max_tokens": 20, "seed": 1})
    assert status == 200 and r["choices"][0]["finish_reason"] in ("stop", "length")
    assert server.request("GET", "/health")[0] == 200


def test_the_openai_python_client_works(server):
    openai = pytest.importorskip("openai")  # in the pip test extras; Debian's python has none
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    body = {"model": "lm", "prompt": "the light", "max_tokens": 12, "seed": 4}
    _, direct = server.post("/v1/completions", body)
    c = client.completions.create(**body)
    assert c.choices[0].text == direct["choices"][0]["text"] and c.usage.total_tokens == direct["usage"]["total_tokens"]
    streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(**body, stream=True))
    assert streamed == direct["choices"][0]["text"]
    _, plain = server.post("/v1/embeddings", {"model": "enc", "input": ["the light", "God said"]})
    e = client.embeddings.create(model="enc", input=["the light", "God said"])
    assert [d.embedding for d in e.data] == [d["embedding"] for d in plain["data"]]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x")


# The token rules: each JSON field and the CLI flag it is.
RULES = [({"repetition_penalty": 1.5}, ["--repetition-penalty", "1.5"]),
         ({"no_repeat_ngram_size": 2}, ["--no-repeat-ngram-size", "2"]),
         ({"min_tokens": 10}, ["--min-new-tokens", "10"])]


def test_completions_with_token_rules_equal_qkv_generate(server, lm_checkpoint, tmp_path):
    prompts = ["the light", "", "God said let there"]
    inp = write_lines(tmp_path / "prompts.txt", prompts)
    generate = ("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), "--max-new-tokens", "12")
    sampling = ("--do-sample", "--seed", "4", "--top-k", "20")
    plain, plain_sampled = cli_lines(*generate, n=3), cli_lines(*generate, *sampling, n=3)
    for fields, flags in RULES + [({k: v for f, _ in RULES for k, v in f.items()}, [x for _, f in RULES for x in f])]:
        expected = cli_lines(*generate, *flags, n=3)
        status, r = server.post("/v1/completions", {"model": "lm", "prompt": prompts, "max_tokens": 12,
                                                    "temperature": 0, **fields})
        assert status == 200 and [c["text"] for c in r["choices"]] == expected, flags
        sampled = cli_lines(*generate, *flags, *sampling, n=3)
        status, r = server.post("/v1/completions", {"model": "lm", "prompt": prompts, "max_tokens": 12, "seed": 4,
                                                    "top_k": 20, **fields})
        assert status == 200 and [c["text"] for c in r["choices"]] == sampled, flags
        # (the small model never ends a greedy line early, so min_tokens shows in the draws only)
        assert expected != plain or sampled != plain_sampled, f"{flags} change the small model's text"
    # Requests with different rules in one continuous batch each get their own.
    bodies = [{"model": "lm", "prompt": prompts, "max_tokens": 12, "temperature": 0, **f} for f, _ in RULES] * 3
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda b: server.post("/v1/completions", b), bodies))
    for (fields, flags), (status, r) in zip(RULES * 3, answers):
        assert status == 200 and [c["text"] for c in r["choices"]] == cli_lines(*generate, *flags, n=3)


def test_beam_search_completions_equal_qkv_generate(server, lm_checkpoint, tmp_path):
    prompts = ["the light", "", "God said let there"]
    inp = write_lines(tmp_path / "prompts.txt", prompts)
    flags = ["--max-new-tokens", "10", "--beam-size", "4", "--length-penalty", "0.8", "--no-repeat-ngram-size", "2"]
    out = run_qkv("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), *flags, "--num-hypotheses", "3",
                  "--threads", "1", "--quiet").stdout
    n_best = [line.split(" ||| ")[1] for line in out.splitlines()]  # prompt by prompt, best first
    body = {"model": "lm", "prompt": prompts, "max_tokens": 10, "temperature": 0, "beam_size": 4,
            "length_penalty": 0.8, "no_repeat_ngram_size": 2}
    status, r = server.post("/v1/completions", {**body, "n": 3})
    assert status == 200 and [c["text"] for c in r["choices"]] == n_best
    assert all(c["finish_reason"] in ("stop", "length") for c in r["choices"])
    best = cli_lines("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), *flags, n=3)
    assert best == n_best[::3] and best != cli_lines("generate", "--checkpoint", lm_checkpoint, "--input", str(inp),
                                                     "--max-new-tokens", "10", "--no-repeat-ngram-size", "2", n=3)
    status, r = server.post("/v1/completions", body)
    assert status == 200 and [c["text"] for c in r["choices"]] == best
    # A beam request runs beside continuous batching: greedy requests in flight meanwhile still get theirs.
    greedy = {"model": "lm", "prompt": prompts, "max_tokens": 12, "temperature": 0}
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda b: server.post("/v1/completions", b), [body, greedy] * 3))
    greedy_text = cli_lines("generate", "--checkpoint", lm_checkpoint, "--input", str(inp), "--max-new-tokens", "12",
                            n=3)
    for i, (status, r) in enumerate(answers):
        assert status == 200 and [c["text"] for c in r["choices"]] == (best if i % 2 == 0 else greedy_text)


@pytest.fixture(scope="module")
def eos_translation_checkpoint(data_dir, tmp_path_factory) -> str:
    """A translation model trained long enough to end its lines (EOS after a token or two), so that
    min_tokens shows; the shared one's lines all run to the length limit."""
    out = tmp_path_factory.mktemp("mt_eos") / "run"
    run_qkv("train", "--src", str(data_dir / "train.es"), "--tgt", str(data_dir / "train.en"), "--output-dir", str(out),
            "--spm-vocab", "360", "--max-seq-length", "48", "--max-batch-tokens", "400", "--steps", "300", "--lr",
            "3e-3", "--warmup", "5", "--log-every", "300", "--valid-every", "0", "--quiet", *TINY_MODEL)
    return str(out / "last")


def batches_run(server, model: str) -> int:
    """The batches a model has run (none yet: no line)."""
    prefix = f'qkv_batches_total{{model="{model}"}}'
    return next((int(float(l.split()[-1])) for l in server.request("GET", "/metrics")[2].splitlines()
                 if l.startswith(prefix)), 0)


def translations_with_rules_equal_qkv_translate(server, model: str, checkpoint: str, src: list[str], rules, tmp_path):
    """Each rule's requests, sent at once to a server that waits for them to share batches, get what
    `qkv translate` with its flags gives, greedy and beam; each rule changes the translations."""
    inp = write_lines(tmp_path / "in.es", src)
    translate = ("translate", "--checkpoint", checkpoint, "--input", str(inp))
    for beam in (1, 4):
        plain = cli_lines(*translate, "--beam-size", str(beam), n=len(src))
        bodies, expected = [], []
        for fields, flags in [({}, [])] + rules:
            expected.append(cli_lines(*translate, "--beam-size", str(beam), *flags, n=len(src)))
            assert not flags or expected[-1] != plain, f"{flags} change the model's translations"
            bodies.append({"model": model, "input": src, "beam_size": beam, **fields})
        batches = batches_run(server, model)
        with ThreadPoolExecutor(len(bodies) * 2) as pool:
            answers = list(pool.map(lambda b: server.post("/v1/translations", b), bodies * 2))
        for want, (status, r) in zip(expected * 2, answers):
            assert status == 200 and [d["translation"] for d in r["data"]] == want
        # Requests of equal rules shared batches; those of other rules were not in them.
        assert batches_run(server, model) - batches <= len(bodies) < len(answers)


def test_translations_with_token_rules_equal_qkv_translate(translation_checkpoint, eos_translation_checkpoint,
                                                           data_dir, tmp_path):
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:8]]
    server = Server(tmp_path, "--model", f"mt={translation_checkpoint}", "--model", f"eos={eos_translation_checkpoint}",
                    "--batch-wait", "500")
    try:
        # The shared model's lines repeat themselves up to the length limit: the repetition rules show there.
        translations_with_rules_equal_qkv_translate(
            server, "mt", translation_checkpoint, src,
            [({"repetition_penalty": 1.5}, ["--repetition-penalty", "1.5"]),
             ({"no_repeat_ngram_size": 1}, ["--no-repeat-ngram-size", "1"]),
             ({"repetition_penalty": 1.5, "no_repeat_ngram_size": 1},
              ["--repetition-penalty", "1.5", "--no-repeat-ngram-size", "1"])], tmp_path)
        # min_tokens N is N tokens before EOS: transformers' min_length N + 1 (the decoder's start counted).
        translations_with_rules_equal_qkv_translate(
            server, "eos", eos_translation_checkpoint, src,
            [({"min_tokens": 12}, ["--min-length", "13"]), ({"min_tokens": 3}, ["--min-length", "4"]),
             ({"min_tokens": 12, "repetition_penalty": 1.5}, ["--min-length", "13", "--repetition-penalty", "1.5"])],
            tmp_path)
    finally:
        assert server.stop() == 0


def test_a_batch_waits_while_requests_keep_arriving(translation_checkpoint, data_dir, tmp_path):
    """--batch-wait counts from the last arrival: requests 150 ms apart share one batch under a 300 ms
    wait, though the last comes 450 ms after the first (a window from the first arrival would cut
    them in two); one that comes after 300 ms of quiet runs in a batch of its own."""
    src = [l.strip() for l in (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:4]]
    server = Server(tmp_path, "--model", f"mt={translation_checkpoint}", "--batch-wait", "300")
    try:
        before = batches_run(server, "mt")
        with ThreadPoolExecutor(len(src)) as pool:
            answers = []
            for line in src:
                answers.append(pool.submit(server.post, "/v1/translations", {"model": "mt", "input": line}))
                time.sleep(0.15)
            assert all(a.result()[0] == 200 for a in answers)
        assert batches_run(server, "mt") - before == 1
        assert server.post("/v1/translations", {"model": "mt", "input": src[0]})[0] == 200
        assert batches_run(server, "mt") - before == 2
    finally:
        assert server.stop() == 0


def test_bad_token_rules_get_400_naming_the_field(server):
    for route, body in (("/v1/completions", {"model": "lm", "prompt": "x"}),
                        ("/v1/translations", {"model": "mt", "input": "x"})):
        expect_error(server.post(route, {**body, "repetition_penalty": 0}), 400, "repetition_penalty")
        expect_error(server.post(route, {**body, "no_repeat_ngram_size": -1}), 400, "no_repeat_ngram_size")
        expect_error(server.post(route, {**body, "min_tokens": "3"}), 400, "min_tokens")
    lm = {"model": "lm", "prompt": "x"}
    expect_error(server.post("/v1/completions", {**lm, "max_tokens": 4, "min_tokens": 5}), 400, "min_tokens")
    expect_error(server.post("/v1/completions", {**lm, "beam_size": 4}), 400, "temperature")
    expect_error(server.post("/v1/completions", {**lm, "beam_size": 2, "n": 3, "temperature": 0}), 400, "n")
    expect_error(server.post("/v1/completions", {**lm, "beam_size": 2, "stream": True, "temperature": 0}), 400,
                 "stream")
    expect_error(server.post("/v1/completions", {**lm, "beam_size": 0, "temperature": 0}), 400, "beam_size")
    expect_error(server.post("/v1/completions", {**lm, "length_penalty": -1}), 400, "length_penalty")
    assert server.request("GET", "/health")[0] == 200
