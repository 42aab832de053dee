// Unit tests for finding the server and its command line (server.ts).

import { test } from "node:test";
import * as assert from "node:assert/strict";
import { findServer, serverArgs } from "../server";

const only = (...files: string[]) => (file: string) => files.includes(file);

test("findServer takes the configured command as given", () => {
  assert.equal(findServer(" /opt/a/assistant ", ["/w"], "/usr/bin", only(), "linux"), "/opt/a/assistant");
});

test("findServer prefers a workspace folder's .venv, in folder order, to PATH", () => {
  const found = only("/w2/.venv/bin/assistant", "/usr/local/bin/assistant");
  assert.equal(findServer("", ["/w1", "/w2"], "/usr/bin:/usr/local/bin", found, "linux"), "/w2/.venv/bin/assistant");
});

test("findServer falls back to PATH, then to nothing", () => {
  assert.equal(findServer(undefined, ["/w"], "/usr/bin::/usr/local/bin", only("/usr/local/bin/assistant"), "linux"),
    "/usr/local/bin/assistant");
  assert.equal(findServer(undefined, ["/w"], undefined, only(), "linux"), undefined);
});

test("findServer looks for assistant.exe in .venv\\Scripts on Windows", () => {
  assert.equal(findServer("", ["C:\\w"], "", only("C:\\w\\.venv\\Scripts\\assistant.exe"), "win32"),
    "C:\\w\\.venv\\Scripts\\assistant.exe");
});

test("serverArgs passes the settings that are set as the server's flags", () => {
  assert.deepEqual(serverArgs({}), ["lsp"]);
  assert.deepEqual(serverArgs({ model: "smollm2-135m", weights: "float32", strategy: " ", device: "" }),
    ["lsp", "--model", "smollm2-135m", "--weights", "float32"]);
});
