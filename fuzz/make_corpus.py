#!/usr/bin/env python3
"""Writes the hand-made seed corpora in fuzz/corpus/<target>/ (checked in; rerun to regenerate).

Each target gets a few small valid inputs and a few invalid ones that the code must refuse with
a qkv::Error. The SentencePiece seeds are not here: fuzz_make_spm_seeds trains them at fuzz time.
"""
import json
import os
import struct
import sys
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def safetensors(entries, data, metadata=None, pad=True, prefix_delta=0):
    """entries: list of (name, dtype, shape, begin, end) in header order."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, begin, end in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text) + prefix_delta) + text + data


def safetensors_seeds():
    f32 = struct.pack("<3f", 1.0, -2.5, 3.25)
    i32 = struct.pack("<2i", 7, -1)
    i64 = struct.pack("<q", 1 << 40)
    f64 = struct.pack("<d", 0.5)
    put("safetensors", "valid_four_dtypes", safetensors(
        [("a", "F32", [3], 0, 12), ("b", "I32", [2], 12, 20), ("c", "I64", [], 20, 28),
         ("d", "F64", [1, 1], 28, 36)], f32 + i32 + i64 + f64, metadata={"format": "pt"}))
    put("safetensors", "valid_unordered_with_empty", safetensors(
        [("z", "I32", [2], 12, 20), ("e", "F32", [0, 4], 12, 12), ("a", "F32", [3], 0, 12)], f32 + i32))
    put("safetensors", "valid_no_tensors", safetensors([], b""))
    put("safetensors", "valid_matrix", safetensors(
        [("w", "F32", [2, 3], 0, 24), ("bias", "F32", [3], 24, 36)], struct.pack("<9f", *range(9))))
    put("safetensors", "bad_prefix_minus_one", safetensors([("a", "F32", [3], 0, 12)], f32, prefix_delta=-1))
    put("safetensors", "bad_trailing_bytes", safetensors([("a", "F32", [3], 0, 12)], f32 + b"JUNK"))
    put("safetensors", "bad_hole", safetensors([("a", "F32", [3], 4, 16)], b"HOLE" + f32))
    put("safetensors", "bad_overlap", safetensors(
        [("a", "F32", [3], 0, 12), ("b", "F32", [2], 4, 12)], f32))
    put("safetensors", "bad_dtype", safetensors([("a", "F16", [2], 0, 4)], b"\0" * 4))
    put("safetensors", "bad_short", b"\x10\0\0\0")


def config_seeds():
    put("config_json", "defaults", "{}")
    put("config_json", "small", json.dumps({
        "src_vocab_size": 100, "tgt_vocab_size": 120, "d_model": 16, "num_heads": 2, "num_layers": 1,
        "d_ff": 32, "max_seq_length": 20, "dropout": 0.0, "pad_id": 0, "bos_id": 2, "eos_id": 3}, indent=2))
    put("config_json", "all_options", json.dumps({
        "src_vocab_size": 5000, "tgt_vocab_size": 5000, "d_model": 512, "num_heads": 8, "num_layers": 6,
        "d_ff": 2048, "max_seq_length": 100, "dropout": 0.1, "pad_id": 0, "norm": "pre",
        "activation": "gelu", "layer_norm_eps": 1e-6, "scale_embeddings": True,
        "tie_output_embedding": True, "mask_fill": "-inf", "attention_dropout": 0.1}))
    put("config_json", "bad_type", '{"d_model": "512"}')
    put("config_json", "bad_unknown_field", '{"d_modle": 512}')
    put("config_json", "bad_heads", '{"d_model": 10, "num_heads": 3}')
    put("config_json", "bad_json", '{"d_model": 5')


def id_lines_seeds():
    # Byte 0 is vocabulary size - 1.
    put("id_lines", "valid", b"\x63" + b"2 5 7 3\n2 9 3\n\n2 10 11 12 3\n")
    put("id_lines", "valid_crlf_tabs", b"\x31" + b"1\t2  3\r\n4 5\r\n")
    put("id_lines", "bad_out_of_range", b"\x09" + b"1 2 30\n")
    put("id_lines", "bad_token", b"\x63" + b"1 two 3\n")
    put("id_lines", "bad_negative", b"\x63" + b"1 -2 3\n")


def parallel_seeds():
    # Byte 0: bit 0 = TSV, bit 1 = empty lines are errors. Two-file inputs: src NUL tgt.
    put("parallel_text", "files_valid", b"\x00" + "hola mundo\nbuenos días\n\0hello world\ngood morning\n".encode())
    put("parallel_text", "files_bom_crlf", b"\x02" + "\ufeffuno\r\ndos\r\n\0one\r\ntwo".encode())
    put("parallel_text", "files_empty_lines", b"\x00" + b"a\n\n c\n\0x\ny\n\t\n")
    put("parallel_text", "files_bad_counts", b"\x00" + b"a\nb\n\0x\n")
    put("parallel_text", "files_bad_utf8", b"\x00" + b"a\xff\n\0x\n")
    put("parallel_text", "tsv_valid", b"\x01" + "hola\thello\n¿qué?\twhat?\n".encode())
    put("parallel_text", "tsv_empty_column", b"\x03" + b"a\tb\n\tc\n")
    put("parallel_text", "tsv_bad_columns", b"\x01" + b"a\tb\tc\n")


def utf8_seeds():
    put("utf8", "ascii", "plain text\nsecond line\r\n")
    put("utf8", "multilingual", "\ufeffñandú ¿qué? 你好 😀 \u2028 ﬁ\n")
    put("utf8", "overlong", b"\xc0\xaf \xe0\x80\xaf")
    put("utf8", "surrogate", b"a\xed\xa0\x80b")
    put("utf8", "above_max", b"\xf4\x90\x80\x80")
    put("utf8", "truncated", b"ok \xe2\x82")
    put("utf8", "stray_continuation", b"\x80abc")


def bleu_seeds():
    # hypothesis NUL reference [NUL reference].
    put("bleu_tokenizers", "simple", "The cat sat on the mat.\nIt rained.\n\0The cat is on the mat.\nIt rained today.\n")
    put("bleu_tokenizers", "two_refs", "a b c d e\n\0a b c d f\n\0a b x d e\n")
    put("bleu_tokenizers", "entities_and_dashes",
        "3-4 &amp; &quot;x&quot; 1,000.5 end.<skipped>\n\0 3 - 4 & \"x\" 1,000.5 end .\n")
    put("bleu_tokenizers", "unicode_space", "a\u00a0b\u3000c ñ\n\0a b c n\n")
    put("bleu_tokenizers", "empty_lines", "\n\n\0\n\n")
    put("bleu_tokenizers", "bad_utf8", b"ok\n\0bad \xff\n")


def npy(descr="<f4", fortran="False", shape="(2, 3)", data=None, version=b"\x01\x00", pad_to=64):
    """A .npy file as NumPy writes it (header padded with spaces to a multiple of 64, then \\n)."""
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)
    total = 10 + len(header) + 1
    header += " " * ((pad_to - total % pad_to) % pad_to) + "\n"
    return b"\x93NUMPY" + version + struct.pack("<H", len(header)) + header.encode("latin-1") + (data or b"")


def npy_seeds():
    six = struct.pack("<6f", 0.5, -1.0, 2.0, 1e-3, -0.0, 3.25)
    put("npy", "valid_matrix", npy(data=six))
    put("npy", "valid_vector", npy(shape="(3,)", data=six[:12]))
    put("npy", "valid_scalar", npy(shape="()", data=six[:4]))
    put("npy", "valid_empty", npy(shape="(0, 4)"))
    put("npy", "valid_qkv_written", npy(shape="(1,2,3)", data=six))  # qkv writes no space
    put("npy", "bad_float64", npy(descr="<f8", shape="(3,)", data=six))
    put("npy", "bad_fortran_order", npy(fortran="True", data=six))
    put("npy", "bad_short_data", npy(data=six[:20]))
    put("npy", "bad_version_2", npy(data=six, version=b"\x02\x00"))
    put("npy", "bad_huge_dimension", npy(shape="(1099511627776, 0)"))
    put("npy", "bad_magic", b"\x93NUMPZ\x01\x00\x00\x00")


def train_state(**fields):
    return json.dumps(fields, indent=2) + "\n"


HYPER = {"schedule": "inverse_sqrt", "lr": 5e-4, "warmup": 4000, "d_model": 512, "clip_norm": 1.0,
         "label_smoothing": 0.1, "micro_batch": 0, "beta1": 0.9, "beta2": 0.98, "eps": 1e-9,
         "optimizer": "adam", "weight_decay": 0.0, "max_memory": -1, "total_steps": 0}


def train_state_seeds():
    current = dict(format="qkv-train-state", format_version=2, kind="translation", step=1200,
                   generator={"seed": 0, "offset": 123456},
                   data={"epoch": 1, "index": 17, "seed": 42, "length_order": "source-target"},
                   hyper=HYPER, best=21.3, bad_validations=0, elapsed_seconds=3600.5)
    put("train_state", "valid_translation", train_state(**current))
    put("train_state", "valid_version_1_synthetic", train_state(**dict(
        current, format_version=1, kind="synthetic", data={"task": "copy", "batch": 32, "len": 10, "seed": 1},
        hyper=dict(HYPER, schedule="noam", optimizer="adamw", weight_decay=0.1, max_memory=1 << 30))))
    old_hyper = {k: v for k, v in HYPER.items() if k not in ("optimizer", "weight_decay", "max_memory", "total_steps")}
    put("train_state", "valid_language_model_old_hyper", train_state(**dict(
        current, kind="language-model", step=0, hyper=old_hyper, best=-1e300, data={})))
    put("train_state", "valid_legacy_synthetic", train_state(
        step=50, generator_seed=7, generator_offset=900, task="copy", batch=16, len=8, data_seed=3, lr=1e-3))
    put("train_state", "valid_legacy_corpus", train_state(
        step=300, epoch=2, batch_index=5, batcher_seed=9, generator_seed=1, generator_offset=77, best=12.5,
        bad_validations=1, elapsed_seconds=100.25))
    put("train_state", "bad_negative_step", train_state(**dict(current, step=-1)))
    put("train_state", "bad_newer_version", train_state(**dict(current, format_version=3)))
    put("train_state", "bad_optimizer", train_state(**dict(current, hyper=dict(HYPER, optimizer="sgd"))))
    put("train_state", "bad_max_memory", train_state(**dict(current, hyper=dict(HYPER, max_memory=-5))))
    put("train_state", "bad_format", train_state(**dict(current, format="qkv-checkpoint")))
    put("train_state", "bad_missing_hyper", train_state(**{k: v for k, v in current.items() if k != "hyper"}))


def manifest(files, step=None, fmt="qkv-checkpoint", version=1):
    """files: {name: bytes}; returns manifest.json as StagedDirectory::commit writes it."""
    listed = {name: {"bytes": len(data), "crc32": "%08x" % zlib.crc32(data)} for name, data in sorted(files.items())}
    m = {"format": fmt, "format_version": version, "files": listed}
    if step is not None:
        m["step"] = step
    return json.dumps(m, indent=2) + "\n"


MANIFEST_FILES = ["weights.safetensors", "optimizer.safetensors", "train_state.json"]


def manifest_seeds():
    # manifest.json NUL weights.safetensors NUL optimizer.safetensors NUL train_state.json (the
    # parts hold no NUL, which would split them)
    contents = [b"weights: any bytes \x01\xff", b"", b'{"step": 3}\n']
    three = dict(zip(MANIFEST_FILES, contents))
    body = b"\0" + b"\0".join(contents)
    put("manifest", "valid_three_files", manifest(three, step=3).encode() + body)
    put("manifest", "valid_no_step", manifest(dict(three, **{"config.json": b"{}"})).encode() + body)
    put("manifest", "valid_weights_only", manifest({"weights.safetensors": contents[0]}, step=0).encode() +
        b"\0" + contents[0])
    put("manifest", "valid_no_files", manifest({}))
    put("manifest", "bad_crc", manifest(dict(three, **{"train_state.json": b'{"step": 4}\n'})).encode() + body)
    put("manifest", "bad_size", manifest(dict(three, **{"optimizer.safetensors": b"x"})).encode() + body)
    put("manifest", "bad_missing_file", manifest(three).encode() + b"\0" + contents[0])
    put("manifest", "bad_json", b'{"format": "qkv-checkpoint", "files": {')


def serve_request_seeds():
    """One route byte (0 completions, 1 embeddings, 2 translations, 3 classifications), then the body."""
    put("serve_request", "completion", b"\x00" + json.dumps(
        {"model": "lm", "prompt": ["the light", "x"], "max_tokens": 12, "temperature": 0.7, "top_p": 0.9,
         "top_k": 5, "seed": 3, "stop": ["\n", "."], "n": 2}).encode())
    put("serve_request", "completion_stream",
        b"\x00" + b'{"model":"lm","prompt":"a","stream":true,"echo":false,"logprobs":null}')
    put("serve_request", "completion_bad", b"\x00" + b'{"model":"lm","prompt":[1,2],"max_tokens":-1}')
    put("serve_request", "embedding",
        b"\x01" + b'{"model":"enc","input":["a","b"],"encoding_format":"float","truncate":true}')
    put("serve_request", "translation", b"\x02" + json.dumps(
        {"model": "mt", "input": "hola", "beam_size": 4, "n_best": 2, "length_penalty": 0.6,
         "max_length": 20}).encode())
    put("serve_request", "classification", b"\x03" + b'{"model":"enc","input":["x"],"top_k":3}')
    put("serve_request", "not_json", b"\x02" + b'{"model":')


def main():
    safetensors_seeds()
    config_seeds()
    id_lines_seeds()
    parallel_seeds()
    utf8_seeds()
    bleu_seeds()
    npy_seeds()
    train_state_seeds()
    manifest_seeds()
    serve_request_seeds()
    os.makedirs(os.path.join(ROOT, "sentencepiece_load"), exist_ok=True)
    put("sentencepiece_load", "bad_not_a_model", b"\x0a\x05hello\x12\x03abc")
    put("sentencepiece_load", "bad_empty_proto", b"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
