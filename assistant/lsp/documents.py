"""The server's copy of each open document, kept as the editor keeps its buffer: its lines end at
"\\n", "\\r\\n" or "\\r" only, as LSP counts them, and an incremental change lands at the offsets its
range means in the negotiated position encoding (`ranges.Lines`), whatever else the text holds.

pygls splits lines with `str.splitlines`, which also breaks at \\x0b, \\x0c, \\x1c-\\x1e, \\x85, U+2028
and U+2029, so after one of those a `didChange` would land on another line than the editor's and
every later rewrite would follow a copy that differs from the buffer. `Workspace` makes `Document`s.
"""

from __future__ import annotations

from itertools import pairwise

from lsprotocol import types
from pygls import workspace

from assistant.lsp import ranges


class Document(workspace.TextDocument):
    """pygls' text document with LSP's lines."""

    @property
    def lines(self) -> tuple[str, ...]:
        """The lines, each with its break (none after a final break, as pygls has them)."""
        text = self.source
        return tuple(text[a:b] for a, b in pairwise([*ranges.line_starts(text), len(text)]) if a < b)

    def apply_change(self, change: types.TextDocumentContentChangeEvent) -> None:
        """Replace the change's range (a character past its line's end meaning the line's end), or the whole
        text; ValueError for a range outside the text."""
        if not isinstance(change, types.TextDocumentContentChangePartial):
            super().apply_change(change)
            return
        text = self.source
        start, end = ranges.offsets_of(text, change.range, self.position_codec.encoding, clamp=True)
        self._source = text[:start] + change.text + text[end:]


class Workspace(workspace.Workspace):
    """pygls' workspace, whose documents are `Document`s."""

    @classmethod
    def like(cls, other: workspace.Workspace) -> Workspace:
        """A workspace with `other`'s root, folders, sync kind and position encoding (and no documents)."""
        return cls(other.root_uri, other._sync_kind, list(other.folders.values()), other.position_encoding)

    def _create_text_document(self, doc_uri: str, source: str | None = None, version: int | None = None,
                              language_id: str | None = None) -> Document:
        return Document(doc_uri, source=source, version=version, language_id=language_id,
                        sync_kind=self._sync_kind, position_codec=self.position_codec)
