"""What the checks of `qkv export --to hf` share (check_marian_export.py, check_t5_export.py,
check_bart_m2m100_export.py): running qkv, loading an export strictly, and comparing its numbers
with those transformers computed on the original directory (the refs of make_*_refs.py). Each
function calls sys.exit with a message naming the model on a mismatch."""

import subprocess
import sys

import torch


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def import_then_export(qkv, hf_dir, ckpt, out):
    """`qkv import --from hf HF_DIR` into CKPT, then `qkv export --to hf CKPT` into OUT; export's
    report line ("wrote OUT: CLASS (...)")."""
    run([qkv, "import", "--from", "hf", hf_dir, "--output-dir", ckpt])
    return run([qkv, "export", "--to", "hf", ckpt, "--output-dir", out])


def load_strict(cls, directory, name):
    """cls.from_pretrained(directory) in eval mode, refusing missing, unexpected or mismatched weights."""
    model, info = cls.from_pretrained(directory, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"{name}: transformers reported {bad}")
    return model.eval()


def worst_log_prob_error(model, source_ids, target_ids, expected):
    """The largest relative difference between each pair's teacher-forced log-probability (the sum
    over target_ids of log p, in double precision) and `expected`."""
    worst = 0.0
    with torch.no_grad():
        for s, t, want in zip(source_ids, target_ids, expected):
            logits = model(input_ids=torch.tensor([s]), labels=torch.tensor([t])).logits[0]
            lp = torch.log_softmax(logits.double(), dim=-1)
            got = float(sum(lp[i, tok] for i, tok in enumerate(t)))
            worst = max(worst, abs(got - want) / max(1.0, abs(want)))
    return worst


def expect_log_probs(model, source_ids, target_ids, expected, name, tolerance=1e-4):
    worst = worst_log_prob_error(model, source_ids, target_ids, expected)
    if not worst <= tolerance:
        sys.exit(f"{name}: log-probabilities differ from the original's: worst relative error {worst:.3g} > {tolerance}")
    return worst


def expect_greedy(model, sources, expected, new_tokens, name, **generate_args):
    """generate(num_beams=1) of each source gives the ids after the decoder start in `expected`."""
    with torch.no_grad():
        for s, want in zip(sources, expected):
            got = model.generate(torch.tensor([s]), num_beams=1, do_sample=False, max_new_tokens=new_tokens,
                                 synced_gpus=False, **generate_args)[0, 1:].tolist()
            if got != want:
                sys.exit(f"{name}: greedy output {got} differs from the original's {want}")
