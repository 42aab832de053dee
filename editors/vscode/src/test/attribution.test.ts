// Unit tests for the attribution helpers (run by `npm test` with node's built-in test runner).

import { test } from "node:test";
import * as assert from "node:assert/strict";
import { decorationRanges, isStale, Span } from "../attribution";

const range = (l1: number, c1: number, l2: number, c2: number) => ({
  start: { line: l1, character: c1 },
  end: { line: l2, character: c2 },
});

test("decorationRanges keeps output ranges, sorted, without empty ones", () => {
  const spans: Span[] = [
    { output: range(4, 0, 5, 2), source: range(1, 0, 2, 2) },
    { output: range(0, 3, 0, 3), source: range(0, 0, 0, 1) },
    { output: range(0, 0, 1, 0), source: range(6, 0, 7, 0) },
  ];
  assert.deepEqual(decorationRanges(spans), [range(0, 0, 1, 0), range(4, 0, 5, 2)]);
});

test("decorationRanges of no spans (after reject) is empty", () => {
  assert.deepEqual(decorationRanges([]), []);
});

test("isStale compares the notification's version with the document's", () => {
  assert.equal(isStale({ uri: "file:///a", version: 3 }, 4), true);
  assert.equal(isStale({ uri: "file:///a", version: 4 }, 4), false);
  assert.equal(isStale({ uri: "file:///a" }, 9), false);
});
