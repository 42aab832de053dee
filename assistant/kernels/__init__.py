"""C++ kernels, by operation and instruction set, compiled once per machine (`build.py`): matrix
products on a GGUF's own blocks (`gguf_avx2`, `gguf_bf16` on AMX or AVX512-BF16, `gguf_vnni` on
AVX512-VNNI) and attention over the KV cache (`attention_avx2`, in float32 or, on AVX512-BF16, bfloat16
over a bfloat16 cache)."""
