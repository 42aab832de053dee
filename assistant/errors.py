"""The errors every layer may raise and every door may catch, kept apart from the layers that raise them so
that catching one loads nothing: `ModelError` is raised by the model layer (which imports torch) and by the
remote client (which must not)."""


class ModelError(RuntimeError):
    """A model cannot be found, verified, loaded or reached; the message says how to fix it."""
