#!/usr/bin/env python3
"""Checks qkv's layering: dispatch on device and dtype happens in ops/ alone, so no source above
ops/ may include a kernels/ header or call kernels:: directly (a CUDA backend then adds cases to
ops/ instead of hunting callers). Prints each offence as FILE:LINE and exits 1 if there is one."""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1])
ALLOWED = {"kernels", "ops", "core"}  # core is below kernels; kernels and ops are the seam itself
PATTERN = re.compile(r'#include\s+"qkv/kernels/|\bkernels::')


def offences(root):
    src = root / "src" / "qkv"
    for path in sorted(list(src.rglob("*.cpp")) + list(src.rglob("*.h"))):
        if path.relative_to(src).parts[0] in ALLOWED:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("//", 1)[0]
            if PATTERN.search(code):
                yield f"{path.relative_to(root)}:{number}: {line.strip()}"


def main():
    found = list(offences(ROOT))
    for o in found:
        print(o)
    if found:
        print(f"check_layers: {len(found)} use(s) of kernels/ above ops/ (put the work behind an op)")
        return 1
    print("ok: no source above ops/ reaches into kernels/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
