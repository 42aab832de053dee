"""The Neovim client (editors/nvim) end to end: headless Neovim, the real `assistant lsp`.

A Lua script loads the plugin, opens a small Python file, rewrites the whole document, waits for
the rewrite's response, accepts it, and writes the buffer text, the command's result, the last
attribution spans and the attribution extmarks to a JSON file that the assertions below read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editors" / "nvim"
ASSISTANT = Path(sys.executable).parent / "assistant"

SAMPLE = '''def area(width, height):
    return width * height


def perimeter(width, height):
    return 2 * (width + height)


print(area(3, 4), perimeter(3, 4))
'''

SCRIPT = r'''
local plugin, server, target, out = unpack(vim.g.assistant_test)
vim.opt.runtimepath:prepend(plugin)
vim.opt.swapfile = false
local assistant = require("assistant")
assistant.setup({ cmd = { server, "lsp" } })

local report = {}
local function finish(err)
  report.error = err
  vim.fn.writefile({ vim.fn.json_encode(report) }, out)
  vim.cmd("qall!")
end

vim.cmd("edit " .. vim.fn.fnameescape(target))
local bufnr = vim.api.nvim_get_current_buf()
local attached = vim.wait(60000, function()
  local client = vim.lsp.get_active_clients()[1]
  return client ~= nil and client.initialized and vim.lsp.buf_is_attached(bufnr, client.id)
end, 100)
if not attached then
  return finish("the server did not start and attach")
end

assistant.rewrite(bufnr, nil, "Rename the function area to rectangle_area.")
if not vim.wait(240000, function() return assistant.results[bufnr] ~= nil end, 100) then
  return finish("the rewrite did not finish within 240 s")
end
-- The final attribution notification may trail the response slightly.
vim.wait(2000, function() return assistant.spans[bufnr] ~= nil end, 50)

local ns = vim.api.nvim_create_namespace("assistant_attribution")
local function extmarks()
  local marks = {}
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })) do
    table.insert(marks, { mark[2], mark[3], mark[4].end_row, mark[4].end_col, mark[4].hl_group })
  end
  return marks
end
local spans = {}
for _, span in pairs(assistant.spans[bufnr] or {}) do
  table.insert(spans, span)
end

report.result = assistant.results[bufnr]
report.spans = spans
report.extmarks = extmarks()
report.lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)

local accepted = false
assistant.execute(bufnr, "assistant.accept", { vim.uri_from_bufnr(bufnr) }, function() accepted = true end)
if not vim.wait(30000, function() return accepted end, 50) then
  return finish("accept got no response")
end
report.accepted_lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
finish(vim.NIL)
'''


@pytest.mark.skipif(shutil.which("nvim") is None, reason="Neovim (nvim) is not installed")
@pytest.mark.skipif(not ASSISTANT.exists(), reason=f"{ASSISTANT} is not installed")
def test_rewrite_document_accept(tmp_path):
    target = tmp_path / "shapes.py"
    target.write_text(SAMPLE)
    script = tmp_path / "test.lua"
    script.write_text(SCRIPT)
    out = tmp_path / "report.json"
    args = json.dumps([str(PLUGIN), str(ASSISTANT), str(target), str(out)])
    proc = subprocess.run(
        ["nvim", "--headless", "-u", "NONE", "-i", "NONE",
         "--cmd", f"let g:assistant_test = json_decode('{args}')", "-c", f"luafile {script}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=420,
    )
    assert out.exists(), f"no report (rc {proc.returncode}): {proc.stdout}\n{proc.stderr}"
    report = json.loads(out.read_text())
    assert report["error"] is None, report

    result = report["result"]
    text = "\n".join(report["lines"])
    assert text != SAMPLE.rstrip("\n"), "the buffer did not change"
    # Neovim's lines hold no final line break; the buffer ends with one implicitly ('eol').
    assert text + "\n" == result["text"] if result["text"].endswith("\n") else text == result["text"]
    assert "\n".join(report["accepted_lines"]) == text

    # Every attributed output range has its highlight, at the range's own position.
    assert report["spans"], "no attribution spans arrived"
    marks = {(row, col, end_row, end_col) for row, col, end_row, end_col, group in report["extmarks"]}
    assert all(group == "AssistantCopied" for *_, group in report["extmarks"])
    lines = report["lines"]
    for span in report["spans"]:
        start, end = span["output"]["start"], span["output"]["end"]
        if end["line"] >= len(lines):  # clamped to the end of the last line
            end = {"line": len(lines) - 1, "character": len(lines[-1])}
        assert (start["line"], start["character"], end["line"], end["character"]) in marks, span
