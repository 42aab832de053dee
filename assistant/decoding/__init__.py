"""The draft-and-verify loop (`loop.py`), the drafters (`drafters.py`), how much to draft
(`draft_length.py`) and the reuse of prompt prefixes (`prefix_cache.py`)."""
