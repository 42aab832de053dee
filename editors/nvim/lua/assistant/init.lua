-- Neovim client for the editor assistant's language server (`assistant lsp`).
--
-- Starts the server once and attaches it to file buffers, adds the :AssistantRewrite,
-- :AssistantAccept, :AssistantReject and :AssistantCancel commands, and shows the server's
-- `assistant/attribution` notifications as extmark highlights (group AssistantCopied) on the
-- rewritten text; on CursorHold the original lines a piece of output was copied from are echoed.
-- Works on Neovim 0.7 and later (vim.lsp.start_client + vim.lsp.buf_attach_client).

local M = {}

local ns = vim.api.nvim_create_namespace("assistant_attribution")

local config = {
  cmd = { "assistant", "lsp" },
  model = nil, -- passed as `--model`; nil: the server's default
  strategy = nil, -- passed as `--strategy`; nil: the server's default
  filetypes = nil, -- list of filetypes to attach to; nil: every file buffer
  root_dir = nil, -- nil: the current working directory
}

local client_id = nil

-- Per buffer: the last `assistant/attribution` spans (with extmark ids), the last rewrite
-- result (the executeCommand response), and whether a rewrite is streaming into it.
M.spans = {}
M.results = {}
local rewriting = {}

local has_011 = vim.fn.has("nvim-0.11") == 1

local function client_request(client, method, params, handler, bufnr)
  if has_011 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

local function offset_encoding()
  local client = client_id and vim.lsp.get_client_by_id(client_id)
  return client and client.offset_encoding or "utf-16"
end

-- LSP character offset on `line` -> byte column.
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

-- LSP Position -> (row, byte col), clamped to the buffer.
local function to_buf_pos(bufnr, pos, encoding)
  local count = vim.api.nvim_buf_line_count(bufnr)
  if pos.line >= count then
    local last = vim.api.nvim_buf_get_lines(bufnr, count - 1, count, false)[1]
    return count - 1, #last
  end
  local line = vim.api.nvim_buf_get_lines(bufnr, pos.line, pos.line + 1, false)[1]
  return pos.line, byte_col(line, pos.character, encoding)
end

-- (row, byte col) -> LSP Position.
local function to_lsp_pos(bufnr, row, col, encoding)
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  return { line = row, character = char_col(line, col, encoding) }
end

local function clear_attribution(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
  end
  M.spans[bufnr] = nil
end

-- `assistant/attribution`: highlight each output range; remember its source range by extmark id.
local function on_attribution(_, params)
  local bufnr = vim.uri_to_bufnr(params.uri)
  if not vim.api.nvim_buf_is_loaded(bufnr) then
    return
  end
  local versions = vim.lsp.util.buf_versions
  local current = versions and versions[bufnr]
  if params.version and current and params.version < current then
    return -- stale: a later edit has already moved the text; a newer notification follows
  end
  clear_attribution(bufnr)
  local encoding = offset_encoding()
  local spans = {}
  for _, span in ipairs(params.spans or {}) do
    local srow, scol = to_buf_pos(bufnr, span.output.start, encoding)
    local erow, ecol = to_buf_pos(bufnr, span.output["end"], encoding)
    local id = vim.api.nvim_buf_set_extmark(bufnr, ns, srow, scol, {
      end_row = erow,
      end_col = ecol,
      hl_group = "AssistantCopied",
    })
    spans[id] = { output = span.output, source = span.source }
  end
  M.spans[bufnr] = spans
end

-- `workspace/applyEdit`: the built-in handler, with every edit of one rewrite joined into a
-- single undo step.
local function on_apply_edit(err, params, ctx, cfg)
  local edit = params.edit or {}
  local uri = edit.documentChanges and edit.documentChanges[1] and edit.documentChanges[1].textDocument.uri
    or next(edit.changes or {})
  local bufnr = uri and vim.uri_to_bufnr(uri)
  if bufnr and rewriting[bufnr] then
    if rewriting[bufnr] == "joined" then
      pcall(vim.cmd, "undojoin")
    end
    rewriting[bufnr] = "joined"
  end
  return vim.lsp.handlers["workspace/applyEdit"](err, params, ctx, cfg)
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
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })) do
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

local function get_client(bufnr)
  local client = client_id and vim.lsp.get_client_by_id(client_id)
  if not client or not vim.lsp.buf_is_attached(bufnr, client_id) then
    vim.notify("assistant: the language server is not attached to this buffer", vim.log.levels.ERROR)
    return nil
  end
  return client
end

-- Runs an assistant.* command on the server for `bufnr`; `on_result(result)` gets its response.
function M.execute(bufnr, command, arguments, on_result)
  local client = get_client(bufnr)
  if not client then
    return
  end
  client_request(client, "workspace/executeCommand", { command = command, arguments = arguments }, function(err, result)
    if err then
      vim.notify("assistant: " .. command .. " failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
    end
    if on_result then
      on_result(result, err)
    end
  end, bufnr)
end

local function run_rewrite(bufnr, command, arguments)
  M.results[bufnr] = nil
  rewriting[bufnr] = "started"
  M.execute(bufnr, command, arguments, function(result, err)
    rewriting[bufnr] = nil
    M.results[bufnr] = result or { error = err }
    if result then
      local reason = result.stopped and (" (" .. tostring(result.stopped) .. ")") or ""
      vim.notify("assistant: rewrite finished" .. reason .. ": :AssistantAccept or :AssistantReject", vim.log.levels.INFO)
    end
    vim.api.nvim_exec_autocmds("User", { pattern = "AssistantRewriteDone" })
  end)
end

-- Rewrites `range` ({start = {row, col}, ["end"] = {row, col}}, 0-based rows, byte columns,
-- end exclusive) of `bufnr`, or the whole document when `range` is nil.
function M.rewrite(bufnr, range, instruction)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not instruction or instruction == "" then
    instruction = vim.fn.input("Rewrite instruction: ")
    if instruction == "" then
      return
    end
  end
  local uri = vim.uri_from_bufnr(bufnr)
  if not range then
    return run_rewrite(bufnr, "assistant.rewriteDocument", { uri, instruction })
  end
  local encoding = offset_encoding()
  local lsp_range = {
    start = to_lsp_pos(bufnr, range.start[1], range.start[2], encoding),
    ["end"] = to_lsp_pos(bufnr, range["end"][1], range["end"][2], encoding),
  }
  run_rewrite(bufnr, "assistant.rewriteSelection", { uri, lsp_range, instruction })
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

local function simple_command(command)
  return function()
    local bufnr = vim.api.nvim_get_current_buf()
    M.execute(bufnr, command, { vim.uri_from_bufnr(bufnr) })
  end
end

-- Code actions "Rewrite selection…"/"Rewrite document…" arrive without the instruction:
-- prompt for it and send the command on.
local function code_action_rewrite(command, ctx)
  local instruction = vim.fn.input("Rewrite instruction: ")
  if instruction == "" then
    return
  end
  local arguments = vim.deepcopy(command.arguments or {})
  table.insert(arguments, instruction)
  run_rewrite(ctx.bufnr, command.command, arguments)
end

local function start_client()
  if client_id and vim.lsp.get_client_by_id(client_id) then
    return client_id
  end
  local cmd = vim.deepcopy(config.cmd)
  if config.model then
    vim.list_extend(cmd, { "--model", config.model })
  end
  if config.strategy then
    vim.list_extend(cmd, { "--strategy", config.strategy })
  end
  client_id = vim.lsp.start_client({
    name = "assistant",
    cmd = cmd,
    root_dir = config.root_dir or vim.loop.cwd(),
    -- The server checks that each streamed edit landed by the document version it moved to, so
    -- didChange must go out before the answer to workspace/applyEdit.
    flags = { debounce_text_changes = 0 },
    handlers = {
      ["assistant/attribution"] = on_attribution,
      ["workspace/applyEdit"] = on_apply_edit,
    },
    on_exit = function()
      client_id = nil
    end,
  })
  return client_id
end

-- Attaches the server to `bufnr` (a normal file buffer of a configured filetype).
function M.attach(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if vim.bo[bufnr].buftype ~= "" or vim.api.nvim_buf_get_name(bufnr) == "" then
    return
  end
  if config.filetypes and not vim.tbl_contains(config.filetypes, vim.bo[bufnr].filetype) then
    return
  end
  local id = start_client()
  if id then
    vim.lsp.buf_attach_client(bufnr, id)
  end
end

function M.setup(opts)
  config = vim.tbl_extend("force", config, opts or {})
  vim.cmd("highlight default link AssistantCopied DiffText")

  local group = vim.api.nvim_create_augroup("assistant", { clear = true })
  vim.api.nvim_create_autocmd({ "BufReadPost", "BufNewFile", "FileType" }, {
    group = group,
    callback = function(args)
      M.attach(args.buf)
    end,
  })
  vim.api.nvim_create_autocmd("CursorHold", { group = group, callback = show_source })
  vim.api.nvim_create_autocmd("BufWipeout", {
    group = group,
    callback = function(args)
      M.spans[args.buf], M.results[args.buf], rewriting[args.buf] = nil, nil, nil
    end,
  })

  vim.api.nvim_create_user_command("AssistantRewrite", function(args)
    local bufnr = vim.api.nvim_get_current_buf()
    local range = args.range > 0 and command_range(bufnr, args.line1, args.line2) or nil
    M.rewrite(bufnr, range, args.args)
  end, { nargs = "?", range = true, desc = "Rewrite the selection (or the document) on an instruction" })
  vim.api.nvim_create_user_command("AssistantAccept", simple_command("assistant.accept"), { desc = "Keep the rewrite" })
  vim.api.nvim_create_user_command("AssistantReject", simple_command("assistant.reject"), { desc = "Undo the rewrite" })
  vim.api.nvim_create_user_command("AssistantCancel", simple_command("assistant.cancel"), { desc = "Stop the rewrite" })

  vim.lsp.commands["assistant.rewriteSelection"] = code_action_rewrite
  vim.lsp.commands["assistant.rewriteDocument"] = code_action_rewrite

  -- Buffers opened before setup() ran.
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) then
      M.attach(bufnr)
    end
  end
end

return M
