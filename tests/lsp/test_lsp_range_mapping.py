"""How a tracked range moves when the document changes under it (`ranges.changes`, `ranges.map_range`),
and LSP ranges to and from JSON through the converter; in process, without a model."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from assistant.lsp import ranges

TEXT = "alpha = 1\nbeta = 2\ngamma = 3\n"
BETA = (TEXT.index("beta"), TEXT.index("gamma"))  # the second line, its line break included


def moved(new: str, tracked: tuple[int, int] = BETA) -> tuple[int, int]:
    return ranges.map_range(*tracked, ranges.changes(TEXT, new))


def test_an_edit_before_the_range_shifts_it():
    new = "# header\n" + TEXT.replace("alpha", "a")
    start, end = moved(new)
    assert new[start:end] == "beta = 2\n"


def test_an_edit_after_the_range_leaves_it():
    assert moved(TEXT + "delta = 4\n") == BETA


@pytest.mark.parametrize("at", [BETA[0], BETA[1]])
def test_typing_right_at_either_edge_stays_outside(at):
    new = TEXT[:at] + "x" + TEXT[at:]
    start, end = moved(new)
    assert new[start:end] == "beta = 2\n"


@pytest.mark.parametrize("new", [TEXT.replace("beta = 2", "beta = 3"), TEXT.replace("beta = 2\n", ""),
                                 TEXT.replace("2\ngamma", "gamma")])
def test_an_edit_inside_or_across_the_range_is_a_conflict(new):
    with pytest.raises(ranges.Conflict):
        moved(new)


def test_no_change_is_no_edit():
    assert ranges.changes(TEXT, TEXT) == []
    assert moved(TEXT) == BETA


def test_ranges_go_to_json_and_back():
    range_ = types.Range(types.Position(1, 0), types.Position(2, 4))
    as_json = ranges.to_json(range_)
    assert as_json == {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 4}}
    assert ranges.parse_range(as_json) == range_


@pytest.mark.parametrize("value, problem", [
    ({"start": {"line": 0, "character": 0}}, "not an LSP range"),
    ([0, 0, 1, 0], "not an LSP range"),
    ({"start": {"line": 0, "character": 0}, "end": {"line": 1.5, "character": 0}}, "line must be a whole number"),
    ({"start": {"line": 0, "character": -1}, "end": {"line": 1, "character": 0}}, "character must be a whole number"),
    ({"start": {"line": 0, "character": 0}, "end": {"line": 2**31, "character": 0}}, "line must be a whole number"),
])
def test_a_malformed_range_is_refused_by_name(value, problem):
    with pytest.raises(JsonRpcInvalidParams, match=problem):
        ranges.parse_range(value)
