#!/usr/bin/env python3
"""kill -9 soak test of qkv's checkpoints.

A tiny synthetic training run that saves after every step is killed with SIGKILL at random moments.
After every kill the run directory must hold either nothing (killed before the first save) or a
complete checkpoint that loads, and resuming it to the last step must give model.safetensors and
optimizer.safetensors byte-identical to an uninterrupted run (train_state.json holds wall-clock
times and may differ). Leftovers of the killed save must be gone after the next save.

--mode corpus does the same with translation training on a small generated parallel text that
validates (dev loss and BLEU) and saves DIR/last and DIR/best after every step.

A kill lands mid-save when the killed process's staging directory (.NAME.staging-PID, or
.NAME.old-PID of a two-rename swap) is still there after it: the save had begun and not finished.
Those are the kills the soak exists for, so at least --min-mid-save of them (default 1) must land
mid-save or the soak fails. Most kills wait a uniformly random time within the uninterrupted
run's duration; every --aim-every-th (default 3rd) waits such a time and then kills as soon as a
staging directory of the process appears (polled every 0.2 ms), so it lands in a save at a random
step.

Usage: kill9_soak.py --qkv build/qkv [--mode synthetic|corpus] [--kills 30] [--seed 1] [--work DIR]
                     [--min-mid-save 1] [--aim-every 3]
Prints one line per kill, how many landed mid-save and a closing 'N passed, M failed' line; exit
status 1 on any failure or when fewer than --min-mid-save kills landed mid-save.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

STEPS = 30
SYNTHETIC_FLAGS = ["train", "--synthetic", "--preset", "tiny", "--d-model", "32", "--heads", "2", "--layers", "1",
                   "--d-ff", "64", "--dropout", "0.1", "--steps", str(STEPS), "--save-every", "1", "--threads", "1",
                   "--log-every", "1000"]
CORPUS_STEPS = 12


def corpus_flags(data):
    return ["train", "--src", data + "/train.src", "--tgt", data + "/train.tgt", "--valid-src", data + "/dev.src",
            "--valid-tgt", data + "/dev.tgt", "--spm-vocab", "300", "--d-model", "16", "--heads", "2", "--layers", "1",
            "--d-ff", "32", "--max-seq-length", "32", "--max-batch-tokens", "240", "--warmup", "3", "--lr", "1e-3",
            "--dropout", "0.1", "--threads", "1", "--log-every", "1000", "--valid-every", "1",
            "--valid-bleu-sentences", "3", "--steps", str(CORPUS_STEPS), "--keep-checkpoints", "2"]


def write_toy_corpus(data, rng):
    """A word-for-word 'translation' of random sentences: enough for SentencePiece and a few steps."""
    os.makedirs(data, exist_ok=True)
    src_words = ["la", "casa", "perro", "gato", "come", "bebe", "agua", "pan", "grande", "rojo", "y", "el"]
    tgt_words = ["the", "house", "dog", "cat", "eats", "drinks", "water", "bread", "big", "red", "and", "he"]
    for split, n in (("train", 300), ("dev", 20)):
        with open(os.path.join(data, split + ".src"), "w") as s, open(os.path.join(data, split + ".tgt"), "w") as t:
            for _ in range(n):
                ids = [rng.randrange(len(src_words)) for _ in range(rng.randint(2, 9))]
                s.write(" ".join(src_words[i] for i in ids) + "\n")
                t.write(" ".join(tgt_words[i] for i in ids) + "\n")


def run(qkv, args, timeout=120):
    return subprocess.run([qkv] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def leftovers(work, name):
    return sorted(n for n in os.listdir(work) if n.startswith("." + name + ".staging-") or ".tmp." in n)


def checkpoint_of(out, corpus):
    """The directory --resume continues from: the run's last/ (corpus) or the --output-dir directory itself."""
    return os.path.join(out, "last") if corpus else out


def staging_of(pid, dirs):
    """The save directories process pid left in dirs: .NAME.staging-PID and .NAME.old-PID."""
    found = []
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        found += [os.path.join(d, n) for n in names
                  if n.startswith(".") and (n.endswith(".staging-%d" % pid) or n.endswith(".old-%d" % pid))]
    return found


def one_kill(qkv, flags, corpus, work, trial, delay, aim, reference):
    """Returns (ok, description, mid_save, seconds): seconds the run took when it finished before
    its kill, else None. With aim, waits delay and then kills as soon as a staging directory of the
    process appears (or when it exits)."""
    name = "run%02d" % trial
    out = os.path.join(work, name)
    ckpt = checkpoint_of(out, corpus)
    t0 = time.time()
    proc = subprocess.Popen([qkv] + flags + ["--output-dir", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
    finished_in = time.time() - t0 if proc.poll() is not None else None
    if aim:  # the synthetic run's saves stage next to --output-dir, the corpus run's inside it
        while proc.poll() is None and not staging_of(proc.pid, [work, out]):
            time.sleep(0.0002)
    killed = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    mid_save = killed and bool(staging_of(proc.pid, [work, out]))
    ok, what = check_after_kill(qkv, flags, corpus, out, ckpt, killed, reference)
    return ok, what + ("; killed mid-save" if mid_save else ""), mid_save, finished_in


def check_after_kill(qkv, flags, corpus, out, ckpt, killed, reference):
    """Returns (ok, description)."""
    if not os.path.exists(ckpt):
        state = "killed before the first save"
        r = run(qkv, flags + ["--output-dir", out])
    else:
        if not os.path.exists(os.path.join(ckpt, "manifest.json")):
            return False, "%s exists without manifest.json: a partial checkpoint" % ckpt
        with open(os.path.join(ckpt, "manifest.json")) as f:
            step = json.load(f)["step"]
        with open(os.path.join(ckpt, "train_state.json")) as f:
            state_step = json.load(f)["step"]
        if step != state_step:
            return False, "manifest step %d but train_state step %d" % (step, state_step)
        state = "checkpoint of step %d" % step if killed else "finished before the kill"
        r = run(qkv, flags + ["--resume", out])
    if r.returncode != 0:
        return False, "%s; resume/rerun exited %d:\n%s" % (state, r.returncode, r.stdout[-2000:])
    for f in reference:
        if read(os.path.join(ckpt, f)) != reference[f]:
            return False, "%s; %s differs from the uninterrupted run" % (state, f)
    left = leftovers(os.path.dirname(ckpt), os.path.basename(ckpt))
    if left:
        return False, "%s; leftovers after the next save: %s" % (state, left)
    shutil.rmtree(out)
    return True, state


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--mode", choices=["synthetic", "corpus"], default="synthetic")
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default="")
    ap.add_argument("--min-mid-save", type=int, default=1,
                    help="fail unless at least this many kills land in the middle of a save (default 1)")
    ap.add_argument("--aim-every", type=int, default=3,
                    help="every N-th kill waits for a save to begin after its random delay (0: none)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="qkv_kill9_")
    os.makedirs(work, exist_ok=True)
    rng = random.Random(a.seed)
    corpus = a.mode == "corpus"
    if corpus:
        write_toy_corpus(os.path.join(work, "data"), rng)
        flags, steps = corpus_flags(os.path.join(work, "data")), CORPUS_STEPS
    else:
        flags, steps = SYNTHETIC_FLAGS, STEPS
    ref_dir = os.path.join(work, "reference")
    shutil.rmtree(ref_dir, ignore_errors=True)
    t0 = time.time()
    r = run(a.qkv, flags + ["--output-dir", ref_dir])
    duration = reference_duration = time.time() - t0
    if r.returncode != 0:
        print(r.stdout)
        print("0 passed, 1 failed")
        return 1
    files = ["model.safetensors", "optimizer.safetensors"] + (["source.spm.model"] if corpus else [])
    reference = {f: read(os.path.join(checkpoint_of(ref_dir, corpus), f)) for f in files}
    passed = failed = mid_saves = 0
    for trial in range(a.kills):
        delay = rng.uniform(0.0, duration * 1.05)
        aim = a.aim_every > 0 and trial % a.aim_every == a.aim_every - 1
        if aim:
            delay *= 0.75  # leave saves to come: run times vary by more than the 5% past the end
        ok, what, mid_save, finished_in = one_kill(a.qkv, flags, corpus, work, trial, delay, aim, reference)
        # The uninterrupted run is timed once, and a machine busy then (other tests, a build) made
        # it seem twice as long as the runs after it: every kill came too late (2026-12-01). A run
        # that ends before its kill says how long runs take now.
        if finished_in is not None:
            duration = min(duration, finished_in)
        print("kill %2d at %.3f s%s: %s: %s" % (trial + 1, delay, " + next save" if aim else "",
                                                "ok" if ok else "FAILED", what), flush=True)
        passed += ok
        failed += not ok
        mid_saves += mid_save
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    print("kill9 soak (%s): %d kills of a %d-step run saving every step (%.2f s uninterrupted; kills drawn "
          "within %.2f s at the end)" % (a.mode, a.kills, steps, reference_duration, duration))
    enough = mid_saves >= a.min_mid_save
    print("%d of %d kills landed mid-save (at least %d required)%s"
          % (mid_saves, a.kills, a.min_mid_save, "" if enough else ": FAILED"))
    print("%d passed, %d failed" % (passed, failed + (not enough)))
    return 0 if failed == 0 and enough else 1


if __name__ == "__main__":
    sys.exit(main())
