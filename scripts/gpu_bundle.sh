#!/usr/bin/env bash
# Packs the CUDA build's test and bench binaries, with the shared libraries a GPU machine may lack
# (OpenBLAS, OpenMP, ...; not the CUDA libraries, which it has), into one folder that travels to it
# (the device tool's `carry`). Usage: scripts/gpu_bundle.sh BUILD_DIR OUT_DIR
set -euo pipefail
build="$1"
out="$2"
rm -rf "$out"
mkdir -p "$out/lib"
for bin in tests/qkv_cuda_tests qkv bench/bench_lm_train bench/bench_gpu_ops bench/bench_train_step; do
  [ -x "$build/$bin" ] && cp "$build/$bin" "$out/"
done
for bin in "$out"/*; do
  [ -f "$bin" ] || continue
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*|libcuda.so*|libcublas*|libcudart*) ;;
      *) cp -Ln "$lib" "$out/lib/" ;;
    esac
  done
done
# The libraries (OpenBLAS, ICU's data) are most of it: packed, the bundle fits the device tool's
# 64 MiB; scripts/gpu_check.sh unpacks it.
tar -C "$out" -cJf "$out.tar.xz" . && rm -rf "$out" && mkdir -p "$out" && mv "$out.tar.xz" "$out/bundle.tar.xz"
du -sh "$out"
