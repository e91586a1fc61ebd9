#!/usr/bin/env python3
"""Runs two qkv binaries on the same small models and inputs and says, per command and compute
type, whether their outputs are bit-identical, and otherwise how far apart they are.

For a change that must not move numbers (a refactor of the core, a kernel swap): build the old
commit elsewhere (git worktree add /tmp/qkv-old COMMIT; cmake ...; cmake --build ... --target
qkv_cli) and run

    scripts/compare_outputs.py /tmp/qkv-old/build/qkv build/qkv build/ref

REF_DIR is a build's reference directory (CTest's ref.* tests write it): model_small
(encoder-decoder), gpt_small (decoder-only), minilm (a sentence-transformers model, imported here).
`--old-flag` / `--new-flag` give each binary's spelling of a compute type ('{type}' is replaced),
for comparing across a rename of the flag. Exit 0 always: the report is the result.
"""
import argparse
import os
import pathlib
import random
import subprocess
import sys
import tempfile


def run(binary, args, env):
    r = subprocess.run([binary, *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{binary} {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def numbers(text):
    out = []
    for token in text.replace("[", " ").replace("]", " ").replace(",", " ").replace("\t", " ").split():
        try:
            out.append(float(token))
        except ValueError:
            pass
    return out


def compare(name, old, new):
    if old == new:
        print(f"{name:44s} identical ({len(old)} bytes)")
        return
    a, b = numbers(old), numbers(new)
    if len(a) != len(b) or not a:
        print(f"{name:44s} DIFFERENT text ({len(old)} vs {len(new)} bytes)")
        return
    worst = max(abs(x - y) for x, y in zip(a, b))
    rel = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))
    print(f"{name:44s} differs: max |d| {worst:.3g}, max rel {rel:.3g} over {len(a)} numbers")


def id_lines(path, n, vocab, low, high, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            f.write(" ".join(str(rng.randrange(low, vocab)) for _ in range(rng.randrange(low, high))) + "\n")
    return str(path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("ref_dir")
    p.add_argument("--old-flag", default="--compute-type {type}")
    p.add_argument("--new-flag", default="--compute-type {type}")
    p.add_argument("--types", default="float32,int8")
    a = p.parse_args()
    ref = pathlib.Path(a.ref_dir)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="qkv-compare-"))
    src = id_lines(tmp / "src.txt", 40, 37, 3, 12, 1)
    tgt = id_lines(tmp / "tgt.txt", 40, 41, 3, 12, 2)
    prompts = id_lines(tmp / "prompts.txt", 12, 53, 3, 8, 3)
    lm_lines = id_lines(tmp / "lm.txt", 30, 53, 3, 20, 4)
    few = tmp / "few.txt"
    sentences = (ref / "minilm_sentences.txt").read_text(encoding="utf-8").splitlines()
    few.write_text("\n".join(sentences[:5]) + "\n", encoding="utf-8")
    minilm = {}
    for side, binary in (("old", a.old), ("new", a.new)):
        minilm[side] = tmp / f"minilm_{side}"
        run(binary, ["import", "--from", "hf", str(ref / "minilm" / "all-MiniLM-L6-v2"), "--out", str(minilm[side])], env)
    for compute_type in a.types.split(","):
        outputs = {}
        for side, binary, flag in (("old", a.old, a.old_flag), ("new", a.new, a.new_flag)):
            f = flag.format(type=compute_type).split() if compute_type != "float32" else []  # float32: the default
            common = ["--threads", "2", *f]
            outputs[side] = {
                "translate --ids, beam 4": run(binary, ["translate", "--checkpoint", str(ref / "model_small"), "--ids",
                                                        "--input", src, "--beam", "4", "--n-best", "2", "--quiet",
                                                        *common], env),
                "generate --ids, greedy": run(binary, ["generate", "--checkpoint", str(ref / "gpt_small"), "--ids",
                                                       "--input", prompts, "--max-new-tokens", "8", "--quiet",
                                                       *common], env),
                "score encoder-decoder --per-line": run(binary, ["score", "--checkpoint", str(ref / "model_small"),
                                                                 "--src", src, "--tgt", tgt, "--per-line", *common],
                                                        env),
                "score decoder-only --per-line": run(binary, ["score", "--checkpoint", str(ref / "gpt_small"), "--tgt",
                                                              lm_lines, "--per-line", *common], env),
            }
            if compute_type == "float32":
                for label, path in (("embed, 5 sentences", few), ("embed, 1000 sentences",
                                                                   ref / "minilm_sentences.txt")):
                    outputs[side][label] = run(binary, ["embed", "--checkpoint", str(minilm[side]), "--input",
                                                        str(path), "--threads", "2"], env)
        for name in outputs["old"]:
            compare(f"{compute_type:8s} {name}", outputs["old"][name], outputs["new"][name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
