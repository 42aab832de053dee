// Unit tests for the marks of the `assistant/diff` notification (diff.ts).

import { test } from "node:test";
import * as assert from "node:assert/strict";
import { DiffParams, isReviewing, linesRemovedOnSave, marksOf } from "../diff";

const generated = { start: { line: 4, character: 4 }, end: { line: 4, character: 18 } };
const notice = (streaming: boolean, hunks: DiffParams["hunks"]): DiffParams => ({
  uri: "file:///a.py", version: 7, id: "r1", streaming,
  lines: { start: 3, end: 12 }, waiting: { start: 10, end: 12 }, hunks,
});

test("marksOf marks each hunk's old and new lines, the waiting lines and the generated text", () => {
  const marks = marksOf(notice(true, [
    { index: 0, old: { start: 3, end: 4 }, new: { start: 4, end: 5 }, generated: [generated] },
    { index: 1, old: { start: 6, end: 6 }, new: { start: 6, end: 8 }, generated: [] },
  ]));
  assert.deepEqual(marks.old, [{ start: 3, end: 4 }]);
  assert.deepEqual(marks.new, [{ start: 4, end: 5 }, { start: 6, end: 8 }]);
  assert.deepEqual(marks.waiting, [{ start: 10, end: 12 }]);
  assert.deepEqual(marks.generated, [generated]);
});

test("isReviewing: while streaming, and while hunks wait; not once the review ended", () => {
  assert.equal(isReviewing(notice(true, [])), true);
  assert.equal(isReviewing(notice(false, [{ index: 0, old: { start: 3, end: 4 }, new: { start: 4, end: 4 }, generated: [] }])), true);
  assert.equal(isReviewing(notice(false, [])), false);
});

test("linesRemovedOnSave: a review's old lines (the answer is saved), a streaming rewrite's new lines (the original)", () => {
  const hunks = [
    { index: 0, old: { start: 3, end: 4 }, new: { start: 4, end: 5 }, generated: [] },
    { index: 1, old: { start: 6, end: 6 }, new: { start: 6, end: 8 }, generated: [] },
  ];
  assert.deepEqual(linesRemovedOnSave(notice(false, hunks)), [{ start: 3, end: 4 }]);
  assert.deepEqual(linesRemovedOnSave(notice(true, hunks)), [{ start: 4, end: 5 }, { start: 6, end: 8 }]);
  assert.deepEqual(linesRemovedOnSave(notice(false, [])), []);
});
