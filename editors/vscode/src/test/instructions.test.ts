// Unit tests for the picker's history (instructions.ts).

import { test } from "node:test";
import * as assert from "node:assert/strict";
import { HISTORY_SIZE, PRESETS, remember } from "../instructions";

test("remember puts the newest first, once", () => {
  assert.deepEqual(remember(["b", "a"], " a "), ["a", "b"]);
  assert.deepEqual(remember([], "Use f-strings"), ["Use f-strings"]);
});

test("remember leaves presets and empty text out", () => {
  assert.deepEqual(remember(["a"], PRESETS[0]), ["a"]);
  assert.deepEqual(remember(["a"], "  "), ["a"]);
});

test("remember keeps at most HISTORY_SIZE", () => {
  const full = Array.from({ length: HISTORY_SIZE }, (_, i) => `i${i}`);
  const after = remember(full, "new");
  assert.equal(after.length, HISTORY_SIZE);
  assert.equal(after[0], "new");
  assert.ok(!after.includes(`i${HISTORY_SIZE - 1}`));
});
