-- Neovim client for the editor assistant's language server (`assistant lsp`).
--
-- The server starts on the first command (not for every buffer) and is attached to the buffers
-- that ask for a rewrite. A rewrite streams into the buffer as a diff that keeps the original in
-- view (`assistant/diff`): the buffer holds only the answer's lines, and each hunk's old lines are
-- virtual lines above its new ones (`removedLines = "virtual"`), AssistantRemoved, so a save writes
-- the answer (the hunks rejected so far in their original text); new lines AssistantAdded, the
-- text the model wrote rather than copied AssistantGenerated; copied text is AssistantCopied, and
-- rests of the cursor on it echo the original lines it came from (`assistant/attribution`). Hunks are accepted
-- or rejected one by one (the hunk under the cursor) or all at once; every edit of one rewrite,
-- from its first streamed line to its last decision, is one undo step. Works on Neovim 0.7 and
-- later: 0.11's vim.lsp.start, or vim.lsp.start_client before it.

local M = {}

local ns_attribution = vim.api.nvim_create_namespace("assistant_attribution")
local ns_diff = vim.api.nvim_create_namespace("assistant_diff")

local defaults = {
  cmd = { "assistant", "lsp" }, -- the server; e.g. { "/path/to/repo/.venv/bin/assistant", "lsp" }
  model = nil, -- passed as `--model`; nil: the server's default
  weights = nil, -- passed as `--weights`
  strategy = nil, -- passed as `--strategy`
  engine = nil, -- passed as `--engine`: a shared server's URL (assistant serve, vLLM); nil: a model in the server
  root_dir = nil, -- nil: the current working directory
  draft_from_open_buffers = false, -- let the drafter copy from the other buffers the server has seen
  health_wait_ms = 120000, -- how long :checkhealth waits for the server to answer, and for its model to load
}
local config = vim.deepcopy(defaults)

-- Per buffer: the attribution spans by extmark id, the last rewrite's answer, the last
-- `assistant/diff` notification, and (while a rewrite or its review runs) the changedtick after
-- our last edit, to join the next one to it.
M.spans = {}
M.results = {}
M.diffs = {}
local joining = {}

local has_011 = vim.fn.has("nvim-0.11") == 1
local client_id = nil
local waiting = {} -- functions to run once the client has initialized

local function notify(message, level)
  vim.notify("assistant: " .. message, level or vim.log.levels.INFO)
end

local function get_client()
  return client_id and vim.lsp.get_client_by_id(client_id)
end

local function request(client, method, params, handler, bufnr)
  if has_011 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

-- LSP character offset on `line` -> byte column, in the client's position encoding.
local function byte_col(line, character, encoding)
  if encoding == "utf-8" then
    return math.min(character, #line)
  end
  local ok, col
  if has_011 then
    ok, col = pcall(vim.str_byteindex, line, encoding, character, false)
  else
    ok, col = pcall(vim.str_byteindex, line, character, encoding == "utf-16")
  end
  return ok and col or #line
end

-- Byte column on `line` -> LSP character offset.
local function char_col(line, col, encoding)
  col = math.min(col, #line)
  if encoding == "utf-8" then
    return col
  end
  if has_011 then
    return vim.str_utfindex(line, encoding, col, false)
  end
  local utf32, utf16 = vim.str_utfindex(line, col)
  return encoding == "utf-16" and utf16 or utf32
end

local function encoding()
  local client = get_client()
  return client and client.offset_encoding or "utf-16"
end

-- LSP Position -> (row, byte col), clamped to the buffer.
local function to_buf_pos(bufnr, pos)
  local count = vim.api.nvim_buf_line_count(bufnr)
  if pos.line >= count then
    local last = vim.api.nvim_buf_get_lines(bufnr, count - 1, count, false)[1]
    return count - 1, #last
  end
  local line = vim.api.nvim_buf_get_lines(bufnr, pos.line, pos.line + 1, false)[1]
  return pos.line, byte_col(line, pos.character, encoding())
end

local function to_lsp_pos(bufnr, row, col)
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  return { line = row, character = char_col(line, col, encoding()) }
end

-- Whether a notification for `version` is older than the buffer (a newer one follows).
local function stale(bufnr, version)
  local versions = vim.lsp.util.buf_versions
  local current = versions and versions[bufnr]
  return version ~= nil and version ~= vim.NIL and current ~= nil and version < current
end

local function mark_range(bufnr, ns, range, group, priority)
  local srow, scol = to_buf_pos(bufnr, range.start)
  local erow, ecol = to_buf_pos(bufnr, range["end"])
  return vim.api.nvim_buf_set_extmark(bufnr, ns, srow, scol,
    { end_row = erow, end_col = ecol, hl_group = group, priority = priority })
end

-- `assistant/attribution`: highlight each output range; remember its source range by extmark id.
local function on_attribution(_, params)
  local bufnr = vim.uri_to_bufnr(params.uri)
  if not vim.api.nvim_buf_is_loaded(bufnr) or stale(bufnr, params.version) then
    return
  end
  vim.api.nvim_buf_clear_namespace(bufnr, ns_attribution, 0, -1)
  local spans = {}
  for _, span in ipairs(params.spans or {}) do
    spans[mark_range(bufnr, ns_attribution, span.output, "AssistantCopied")] = span
  end
  M.spans[bufnr] = spans
end

-- Whole lines, to the window's edge (a highlight over each line's end, which 0.7 reports back too),
-- and a sign beside each.
local function mark_lines(bufnr, lines, group, sign)
  local count = vim.api.nvim_buf_line_count(bufnr)
  for row = lines.start, math.min(lines["end"], count) - 1 do
    local last = row + 1 == count and #vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or nil
    vim.api.nvim_buf_set_extmark(bufnr, ns_diff, row, 0, { end_row = last and row or row + 1, end_col = last or 0,
      hl_group = group, hl_eol = true, priority = 100 })
    vim.api.nvim_buf_set_extmark(bufnr, ns_diff, row, 0, { sign_text = sign, sign_hl_group = group })
  end
end

-- Where a hunk's removed lines show as virtual lines: above its first new line, or below the last
-- line of the buffer when it ends there. Returns the row and whether above.
local function virtual_row(bufnr, hunk)
  local count = vim.api.nvim_buf_line_count(bufnr)
  if hunk.new.start < count then
    return hunk.new.start, true
  end
  return count - 1, false
end

local function mark_removed(bufnr, hunk)
  if #(hunk.removed or {}) == 0 or hunk.old.start ~= hunk.old["end"] then
    return -- nothing removed, or the old lines are text (mark_lines marks them)
  end
  local lines = {}
  for _, line in ipairs(hunk.removed) do
    table.insert(lines, { { line, "AssistantRemoved" } })
  end
  local row, above = virtual_row(bufnr, hunk)
  vim.api.nvim_buf_set_extmark(bufnr, ns_diff, row, 0, { virt_lines = lines, virt_lines_above = above })
end

-- `assistant/diff`: redraw the hunks' old and new lines and their generated text.
local function on_diff(_, params)
  local bufnr = vim.uri_to_bufnr(params.uri)
  if not vim.api.nvim_buf_is_loaded(bufnr) or stale(bufnr, params.version) then
    return
  end
  M.diffs[bufnr] = params
  vim.api.nvim_buf_clear_namespace(bufnr, ns_diff, 0, -1)
  for _, hunk in ipairs(params.hunks) do
    mark_removed(bufnr, hunk)
    mark_lines(bufnr, hunk.old, "AssistantRemoved", "-")
    mark_lines(bufnr, hunk.new, "AssistantAdded", "+")
    for _, range in ipairs(hunk.generated) do
      mark_range(bufnr, ns_diff, range, "AssistantGenerated", 200)
    end
  end
  if not params.streaming and #params.hunks == 0 then
    joining[bufnr] = nil -- the review ended: the next edit is the user's own undo step
  end
  if not params.streaming and bufnr == vim.api.nvim_get_current_buf() then
    if has_011 then
      vim.lsp.codelens.refresh({ bufnr = bufnr })
    else
      vim.lsp.codelens.refresh()
    end
  end
end

-- `workspace/applyEdit`: the built-in handler, each edit of a rewrite joined to the one before it
-- unless the buffer changed in between (the user's own change is not taken into our undo step).
local function on_apply_edit(err, params, ctx, cfg)
  local changes = params.edit and params.edit.documentChanges
  local uri = changes and changes[1] and changes[1].textDocument.uri
  local bufnr = uri and vim.uri_to_bufnr(uri)
  local state = bufnr and joining[bufnr]
  if state and state.tick == vim.api.nvim_buf_get_changedtick(bufnr) then
    pcall(vim.cmd, "undojoin")
  end
  local answer = vim.lsp.handlers["workspace/applyEdit"](err, params, ctx, cfg)
  if state then
    state.tick = vim.api.nvim_buf_get_changedtick(bufnr)
  end
  return answer
end

-- The source lines of the attributed span under the cursor, for CursorHold.
local function show_source()
  local bufnr = vim.api.nvim_get_current_buf()
  local spans = M.spans[bufnr]
  if not spans then
    return
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  local row, col = cursor[1] - 1, cursor[2]
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, ns_attribution, 0, -1, { details = true })) do
    local id, srow, scol, details = mark[1], mark[2], mark[3], mark[4]
    local after_start = row > srow or (row == srow and col >= scol)
    local before_end = row < details.end_row or (row == details.end_row and col < details.end_col)
    if after_start and before_end and spans[id] then
      local source = spans[id].source
      local first, last = source.start.line + 1, source["end"].line + 1
      if source["end"].character == 0 and last > first then
        last = last - 1
      end
      local where = first == last and ("line " .. first) or ("lines " .. first .. "–" .. last)
      vim.api.nvim_echo({ { "assistant: copied from " .. where .. " of the original", "AssistantCopied" } }, false, {})
      return
    end
  end
end

-- The server's command line, with the options of setup().
function M.server_command()
  local cmd = vim.deepcopy(config.cmd)
  for _, option in ipairs({ "model", "weights", "strategy", "engine" }) do
    if config[option] then
      vim.list_extend(cmd, { "--" .. option, config[option] })
    end
  end
  return cmd
end

local function client_config()
  return {
    name = "assistant",
    cmd = M.server_command(),
    root_dir = config.root_dir or (vim.uv or vim.loop).cwd(),
    -- removed lines are virtual lines (Neovim 0.6 and later), so the buffer holds only the answer
    init_options = { draftFromOpenBuffers = config.draft_from_open_buffers,
                      removedLines = vim.fn.has("nvim-0.6") == 1 and "virtual" or "text" },
    -- The server checks that each streamed edit landed by the document version it moved to, so
    -- didChange must go out before the answer to workspace/applyEdit.
    flags = { debounce_text_changes = 0 },
    handlers = {
      ["assistant/attribution"] = on_attribution,
      ["assistant/diff"] = on_diff,
      ["workspace/applyEdit"] = on_apply_edit,
    },
    on_init = function()
      -- after this callback the client sends didOpen for the buffers attached while it started
      vim.schedule(function()
        local ready = waiting
        waiting = {}
        for _, run in ipairs(ready) do
          run()
        end
      end)
    end,
    on_exit = function()
      client_id, waiting = nil, {}
    end,
  }
end

-- Starts the server once, attaches it to `bufnr` (when given), and runs `run(client)` once it has
-- initialized.
function M.with_client(bufnr, run)
  if not get_client() then
    if has_011 then
      client_id = vim.lsp.start(client_config(), { attach = false })
    else
      client_id = vim.lsp.start_client(client_config())
    end
    if not client_id then
      return notify("could not start " .. table.concat(M.server_command(), " "), vim.log.levels.ERROR)
    end
  end
  if bufnr and not vim.lsp.buf_is_attached(bufnr, client_id) then
    vim.lsp.buf_attach_client(bufnr, client_id)
  end
  local client = get_client()
  if client.initialized then
    run(client)
  else
    table.insert(waiting, function()
      run(get_client())
    end)
  end
end

-- Runs the server's `command` for `bufnr`; `on_result(result, err)` gets its answer.
function M.execute(bufnr, command, arguments, on_result)
  M.with_client(bufnr, function(client)
    request(client, "workspace/executeCommand", { command = command, arguments = arguments }, function(err, result)
      if err then
        notify(command .. " failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      end
      if on_result then
        on_result(result, err)
      end
    end, bufnr)
  end)
end

local function rewrite_done(bufnr, result, err)
  M.results[bufnr] = result or { error = err }
  if not result or (result.hunks or 0) == 0 then
    joining[bufnr] = nil
  end
  if result and result.unchanged then
    -- nothing to add: the server said "no change made", and what did change (window/showMessage)
  elseif result and (result.hunks or 0) > 0 then
    notify(result.hunks .. " hunk(s) to review (:AssistantAcceptHunk, :AssistantRejectHunk, …All)")
  elseif result then
    notify(result.restored and "the original text is back" or "the rewrite changed nothing")
  end
  vim.api.nvim_exec_autocmds("User", { pattern = "AssistantRewriteDone" })
end

-- Rewrites `range` ({start = {row, col}, ["end"] = {row, col}}, 0-based rows, byte columns, end
-- exclusive) of `bufnr`, or the whole buffer when `range` is nil; asks for the instruction
-- (vim.ui.input) when none is given.
function M.rewrite(bufnr, range, instruction)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not instruction or instruction == "" then
    return vim.ui.input({ prompt = "Rewrite instruction: " }, function(input)
      if input and input ~= "" then
        M.rewrite(bufnr, range, input)
      end
    end)
  end
  M.with_client(bufnr, function()
    local uri = vim.uri_from_bufnr(bufnr)
    local command, arguments = "assistant.rewriteDocument", { uri, instruction }
    if range then
      local lsp_range = { start = to_lsp_pos(bufnr, range.start[1], range.start[2]),
                          ["end"] = to_lsp_pos(bufnr, range["end"][1], range["end"][2]) }
      command, arguments = "assistant.rewriteSelection", { uri, lsp_range, instruction }
    end
    M.results[bufnr] = nil
    joining[bufnr] = {}
    M.execute(bufnr, command, arguments, function(result, err)
      rewrite_done(bufnr, result, err)
    end)
  end)
end

-- The undecided hunk on `row` (0-based) of `bufnr`: its old lines, then its new ones; one with
-- no line of text, on the line its removed lines show at.
function M.hunk_at(bufnr, row)
  local diff = M.diffs[bufnr]
  for _, hunk in ipairs(diff and diff.hunks or {}) do
    local first = math.min(hunk.old.start, hunk.new.start)
    local last = math.max(hunk.old["end"], hunk.new["end"])
    if (row >= first and row < last) or (first == last and row == virtual_row(bufnr, hunk)) then
      return hunk, diff.id
    end
  end
end

local function decide_hunk(command)
  return function(on_done)
    local bufnr = vim.api.nvim_get_current_buf()
    local hunk, id = M.hunk_at(bufnr, vim.api.nvim_win_get_cursor(0)[1] - 1)
    if not hunk then
      return notify("the cursor is not on a hunk of a rewrite", vim.log.levels.WARN)
    end
    M.execute(bufnr, command, { vim.uri_from_bufnr(bufnr), id, hunk.index }, on_done)
  end
end

local function decide_all(command)
  return function(on_done)
    local bufnr = vim.api.nvim_get_current_buf()
    M.execute(bufnr, command, { vim.uri_from_bufnr(bufnr) }, on_done)
  end
end

-- For keymaps: each acts on the current buffer, and takes an optional callback(result, err).
M.accept_hunk = decide_hunk("assistant.acceptHunk")
M.reject_hunk = decide_hunk("assistant.rejectHunk")
M.accept_all = decide_all("assistant.acceptAll")
M.reject_all = decide_all("assistant.rejectAll")
M.cancel = decide_all("assistant.cancel")

-- What the server says of itself: {version, loaded, model, error}; nil and why after `timeout_ms`.
function M.status(timeout_ms)
  local answer, failure
  M.with_client(nil, function(client)
    request(client, "workspace/executeCommand", { command = "assistant.status", arguments = {} }, function(err, result)
      answer, failure = result, err and (err.message or vim.inspect(err))
    end)
  end)
  if not vim.wait(timeout_ms, function()
    return answer ~= nil or failure ~= nil
  end, 50) then
    return nil, "no answer in " .. timeout_ms .. " ms"
  end
  return answer, failure
end

function M.config()
  return vim.deepcopy(config)
end

-- The range a command given `line1,line2` covers: the last visual selection when it spans
-- exactly those lines (charwise columns kept), whole lines otherwise.
local function command_range(bufnr, line1, line2)
  local vstart = vim.api.nvim_buf_get_mark(bufnr, "<")
  local vend = vim.api.nvim_buf_get_mark(bufnr, ">")
  local last_line = vim.api.nvim_buf_get_lines(bufnr, line2 - 1, line2, false)[1] or ""
  if vstart[1] == line1 and vend[1] == line2 and vim.fn.visualmode() == "v" then
    -- '> is the first byte of the last selected character: include the whole character.
    local end_col = math.min(#last_line, vend[2] + #vim.fn.strcharpart(last_line:sub(vend[2] + 1), 0, 1))
    return { start = { line1 - 1, vstart[2] }, ["end"] = { line2 - 1, end_col } }
  end
  if line2 < vim.api.nvim_buf_line_count(bufnr) then
    return { start = { line1 - 1, 0 }, ["end"] = { line2, 0 } }
  end
  return { start = { line1 - 1, 0 }, ["end"] = { line2 - 1, #last_line } }
end

-- Code actions "Rewrite selection…"/"Rewrite document…" arrive without the instruction: ask for
-- it and send the command on.
local function code_action_rewrite(command, ctx)
  vim.ui.input({ prompt = "Rewrite instruction: " }, function(instruction)
    if instruction and instruction ~= "" then
      local arguments = vim.deepcopy(command.arguments or {})
      table.insert(arguments, instruction)
      joining[ctx.bufnr] = {}
      M.execute(ctx.bufnr, command.command, arguments, function(result, err)
        rewrite_done(ctx.bufnr, result, err)
      end)
    end
  end)
end

local function highlights()
  vim.cmd([[
    highlight default link AssistantRemoved DiffDelete
    highlight default link AssistantAdded DiffAdd
    highlight default link AssistantGenerated DiffText
    highlight default AssistantCopied gui=underline cterm=underline
  ]])
end

local function user_command(name, run, desc)
  vim.api.nvim_create_user_command(name, function()
    run()
  end, { desc = desc })
end

function M.setup(opts)
  config = vim.tbl_extend("force", vim.deepcopy(defaults), opts or {})
  highlights()
  local group = vim.api.nvim_create_augroup("assistant", { clear = true })
  vim.api.nvim_create_autocmd("ColorScheme", { group = group, callback = highlights })
  vim.api.nvim_create_autocmd("CursorHold", { group = group, callback = show_source })
  vim.api.nvim_create_autocmd("BufWipeout", {
    group = group,
    callback = function(args)
      M.spans[args.buf], M.results[args.buf], M.diffs[args.buf], joining[args.buf] = nil, nil, nil, nil
    end,
  })

  vim.api.nvim_create_user_command("AssistantRewrite", function(args)
    local bufnr = vim.api.nvim_get_current_buf()
    local range = args.range > 0 and command_range(bufnr, args.line1, args.line2) or nil
    M.rewrite(bufnr, range, args.args)
  end, { nargs = "?", range = true, desc = "Rewrite the selection (or the buffer) on an instruction" })
  user_command("AssistantAcceptHunk", M.accept_hunk, "Keep the new lines of the hunk under the cursor")
  user_command("AssistantRejectHunk", M.reject_hunk, "Put back the original lines of the hunk under the cursor")
  user_command("AssistantAcceptAll", M.accept_all, "Keep every undecided hunk's new lines")
  user_command("AssistantRejectAll", M.reject_all, "Put back every undecided hunk's original lines")
  user_command("AssistantAccept", M.accept_all, "Same as :AssistantAcceptAll")
  user_command("AssistantReject", M.reject_all, "Same as :AssistantRejectAll")
  user_command("AssistantCancel", M.cancel, "Stop the rewrite streaming into this buffer")

  vim.lsp.commands["assistant.rewriteSelection"] = code_action_rewrite
  vim.lsp.commands["assistant.rewriteDocument"] = code_action_rewrite
end

return M
