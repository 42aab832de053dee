"""A KV cache sized once for the whole generation, written in place.

transformers' DynamicCache concatenates every step, which copies the whole cache (every layer,
every position) once per forward: at a 2,000-token prompt that was a quarter of a one-token
step's time on CPU. Here each layer writes the new keys and values into a buffer allocated
for prompt + output + draft, and `crop` only moves the end, so a rejected draft costs nothing.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from assistant.model import attention


class PreallocatedLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are views of a fixed buffer of `capacity` positions."""

    def __init__(self, capacity: int, dtype: torch.dtype | None = None):
        super().__init__()
        self.capacity = capacity
        self.storage_dtype = dtype  # None: the model's
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, _ = key_states.shape
        self.dtype, self.device = self.storage_dtype or key_states.dtype, key_states.device
        # Zeros, not whatever memory held: attention reads past the end (`attention.widened`).
        self.key_buffer = key_states.new_zeros(batch, heads, self.capacity, key_states.shape[-1], dtype=self.dtype)
        self.value_buffer = value_states.new_zeros(batch, heads, self.capacity, value_states.shape[-1],
                                                   dtype=self.dtype)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache full: {end} positions asked of {self.capacity}")
        self.key_buffer[:, :, self.length:end] = key_states
        self.value_buffer[:, :, self.length:end] = value_states
        self.length = end
        return self.keys, self.values

    def advance(self, count: int) -> None:
        """Take the next `count` positions, written into the buffers in place (`attention.projected`)."""
        self.length += count

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last -tokens_to_remove positions (a negative count, as DynamicLayer.crop takes)."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of positions to remove")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self.length = max(0, self.length + tokens_to_remove)

    def reset(self) -> None:
        self.length = 0

    # The keys and values are the buffers' first `length` positions, viewed when asked for: moving the
    # end (a step, a crop) costs no views, where making them took 10 us a layer, 0.5 ms a step of the 1.5B.
    @property
    def keys(self) -> torch.Tensor | None:
        return self.key_buffer[:, :, :self.length] if self.is_initialized else None

    @keys.setter
    def keys(self, value: None) -> None:  # DynamicLayer's __init__ clears them; nothing else may set them
        if value is not None:
            raise AttributeError("a preallocated layer's keys are views of its buffer")

    @property
    def values(self) -> torch.Tensor | None:
        return self.value_buffer[:, :, :self.length] if self.is_initialized else None

    @values.setter
    def values(self, value: None) -> None:
        if value is not None:
            raise AttributeError("a preallocated layer's values are views of its buffer")

    def get_seq_length(self) -> int:
        return self.length


def preallocated_cache(model, capacity: int) -> DynamicCache:
    """A cache for `model` that holds up to `capacity` positions without ever reallocating; under our
    attention, in the dtype its kernel reads (`attention.cache_dtype`)."""
    cache = DynamicCache(config=model.config.get_text_config())
    ours = model.config._attn_implementation == attention.NAME
    dtype = attention.cache_dtype(model) if ours else None
    capacity = -(-capacity // attention.KEYS) * attention.KEYS if ours else capacity  # room to read past the end
    # Sliding-window layers keep their own bounded storage; only full-attention layers grow.
    cache.layers = [PreallocatedLayer(capacity, dtype) if type(layer) is DynamicLayer else layer
                    for layer in cache.layers]
    return cache
