#!/usr/bin/env python3
"""Writes the hand-made seed corpora in fuzz/corpus/<target>/ (checked in; rerun to regenerate).

Each target gets a few small valid inputs and a few invalid ones that the code must refuse with
a qkv::Error. The SentencePiece seeds are not here: fuzz_make_spm_seeds trains them at fuzz time.
"""
import json
import os
import struct
import sys

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


def main():
    safetensors_seeds()
    config_seeds()
    id_lines_seeds()
    parallel_seeds()
    utf8_seeds()
    bleu_seeds()
    os.makedirs(os.path.join(ROOT, "sentencepiece_load"), exist_ok=True)
    put("sentencepiece_load", "bad_not_a_model", b"\x0a\x05hello\x12\x03abc")
    put("sentencepiece_load", "bad_empty_proto", b"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
