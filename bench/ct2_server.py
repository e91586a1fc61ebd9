#!/usr/bin/env python3
"""CTranslate2 behind a FastAPI server, the way it is usually served: bench_serve.py's peer for
`qkv serve`'s translations (issue 36).

    build/bench-venv/bin/python bench/ct2_server.py --checkpoint CKPT --model CT2DIR --port-file F \
        [--threads 2] [--compute-type float32|int8]

POST /v1/translations takes qkv serve's request shape ({"input": "a sentence", "beam_size": 4}) and
answers in it ({"data": [{"translation": ...}], "usage": {...}}), so one load generator drives both.
Each request is one translate_batch call of its sentence: a FastAPI endpoint defined with `def` runs
in the server's thread pool, and CTranslate2 (inter_threads=1, intra_threads=--threads) takes the
calls one after another; it has no batching across calls (its issues 457 and 1333). The text is cut
into pieces with the checkpoint's source.spm.model, truncated to max_seq_length as `qkv serve
--truncate` does, decoded with a length limit as qkv's (2 x source + 10, below max_seq_length), pad
and BOS never produced (as bench/ct2_translate.py). GET /health answers 200 once loaded.
"""
import argparse
import json
import math
import os
import socket
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="the qkv checkpoint (config.json, spm models)")
    ap.add_argument("--model", required=True, help="its CTranslate2 conversion (bench/ct2_convert.py)")
    ap.add_argument("--port-file", required=True, help="the port chosen is written here once listening")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compute-type", default="float32")
    a = ap.parse_args()

    import ctranslate2
    import sentencepiece as spm
    import uvicorn
    from fastapi import FastAPI
    from pydantic import BaseModel

    with open(os.path.join(a.checkpoint, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    max_seq_length = config.get("max_seq_length", 100)
    src_sp = spm.SentencePieceProcessor(model_file=os.path.join(a.checkpoint, "source.spm.model"))
    tgt_sp = spm.SentencePieceProcessor(model_file=os.path.join(a.checkpoint, "target.spm.model"))
    never = [[tgt_sp.id_to_piece(config.get(k, d))] for k, d in (("pad_id", 0), ("bos_id", 2)) if config.get(k, d) >= 0]
    translator = ctranslate2.Translator(a.model, device="cpu", compute_type=a.compute_type, inter_threads=1,
                                        intra_threads=a.threads)

    class TranslationRequest(BaseModel):
        model: str = ""
        input: str
        beam_size: int = 4
        truncate: bool = True

    app = FastAPI()

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.post("/v1/translations")
    def translate(r: TranslationRequest):
        pieces = src_sp.encode(r.input, out_type=str)[:max_seq_length]
        limit = max(1, min(math.ceil(2.0 * len(pieces)) + 10, max_seq_length - 1))
        out = translator.translate_batch([pieces], beam_size=r.beam_size, max_decoding_length=limit,
                                         suppress_sequences=never)[0].hypotheses[0]
        return {"object": "list", "model": r.model, "data": [{"index": 0, "translation": tgt_sp.decode(out)}],
                "usage": {"prompt_tokens": len(pieces), "completion_tokens": len(out),
                          "total_tokens": len(pieces) + len(out)}}

    with socket.socket() as s:  # a free port, as `qkv serve --port 0`
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    original_startup = server.startup

    async def startup(*args, **kwargs):
        await original_startup(*args, **kwargs)
        with open(a.port_file, "w") as f:
            f.write(str(port))

    server.startup = startup
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
