"""A model: found, verified, converted and loaded (`loading.py`), its forward pass (`transformer.py`),
attention and the KV cache (`attention.py`, `kv_cache.py`), the weight formats (`weights.py`,
`gguf_blocks.py`) and the tuned settings (`tuning.py`)."""
