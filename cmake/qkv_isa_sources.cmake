# The kernels built for an instruction set above the baseline (x86-64-v3, AVX2 + FMA): each file
# gets its flags here, and kernels/isa.h calls into it only on a CPU that has them. Shared by the
# main build and tests/tsan/ (which builds core/ and kernels/ on its own).
#   qkv_isa_source_flags(ROOT)   ROOT: the source tree whose src/qkv/kernels/ is built
function(qkv_isa_source_flags root)
  set(k ${root}/src/qkv/kernels)
  set_property(SOURCE ${k}/gelu_avx512.cpp APPEND PROPERTY COMPILE_OPTIONS "-mavx512f")
  set_property(SOURCE ${k}/wide_tile_avx512.cpp APPEND PROPERTY COMPILE_OPTIONS "-mavx512f")
  set_property(SOURCE ${k}/head_tile_avx512.cpp APPEND PROPERTY COMPILE_OPTIONS "-mavx512f")
  set_property(SOURCE ${k}/dropout_avx512.cpp APPEND PROPERTY COMPILE_OPTIONS "-mavx512f;-mavx512dq;-mavx512vl")
  # bf16 products on vdpbf16ps (kernels/bf16_gemm.h), int8 products on vpdpbusd (kernels/int8_gemm.h).
  set_property(SOURCE ${k}/bf16_gemm_avx512.cpp APPEND PROPERTY COMPILE_OPTIONS
               "-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mavx512bf16")
  # bf16 and int8 products on AMX tiles (kernels/amx_tiles.h; bf16_amx_blocking.h, int8_amx_blocking.h).
  set_property(SOURCE ${k}/bf16_gemm_amx.cpp APPEND PROPERTY COMPILE_OPTIONS
               "-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mavx512bf16;-mamx-tile;-mamx-bf16;-mamx-int8")
  set_property(SOURCE ${k}/int8_gemm_amx.cpp APPEND PROPERTY COMPILE_OPTIONS
               "-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mamx-tile;-mamx-bf16;-mamx-int8")
  set_property(SOURCE ${k}/int8_gemm_vnni.cpp APPEND PROPERTY COMPILE_OPTIONS
               "-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mavx512vnni")
endfunction()
