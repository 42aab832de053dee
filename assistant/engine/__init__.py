"""The public API: a `Request` in, typed events out (`assistant.py`), the prompt (`prompts.py`), the
answer's text and attribution (`output.py`), long documents in pieces (`long_documents.py`), and the
asyncio view the front doors use (`aio.py`)."""
