// Unit tests for the status bar's reading of the server's progress messages (progress.ts).

import { test } from "node:test";
import * as assert from "node:assert/strict";
import { statusOf } from "../progress";

test("statusOf reads loading, the queue and the speed", () => {
  assert.equal(statusOf("loading model")?.text, "loading model");
  assert.equal(statusOf("waiting for the model: 2 ahead")?.text, "queued (2 ahead)");
  assert.equal(statusOf("31 tokens/s, 2.40 tokens per step")?.text, "31 tok/s");
  assert.equal(statusOf("starting")?.text, "starting");
});

test("statusOf of no message keeps the current status", () => {
  assert.equal(statusOf(undefined), undefined);
  assert.equal(statusOf(""), undefined);
});
