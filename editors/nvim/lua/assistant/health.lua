-- :checkhealth assistant — the server found, its version, its model loaded.
-- Neovim 0.10+ reports through vim.health.start/ok/...; 0.7 through require("health").report_*.

local M = {}

local function reporter()
  local health = vim.health or require("health")
  return {
    start = health.start or health.report_start,
    ok = health.ok or health.report_ok,
    warn = health.warn or health.report_warn,
    error = health.error or health.report_error,
  }
end

-- JSON null arrives as nil or vim.NIL, depending on the version.
local function given(value)
  return value ~= nil and value ~= vim.NIL
end

function M.check()
  local report = reporter()
  local assistant = require("assistant")
  report.start("assistant")
  local version = vim.version()
  report.ok(string.format("Neovim %d.%d.%d", version.major, version.minor, version.patch))
  local cmd = assistant.server_command()
  if vim.fn.executable(cmd[1]) ~= 1 then
    return report.error(string.format("the server command %q is not an executable", cmd[1]), {
      "point setup() at it: require('assistant').setup({ cmd = { '/path/to/repo/.venv/bin/assistant', 'lsp' } })",
    })
  end
  report.ok("server: " .. table.concat(cmd, " ") .. " (" .. vim.fn.exepath(cmd[1]) .. ")")
  local wait = assistant.config().health_wait_ms
  local status, failure = assistant.status(wait)
  if not status then
    return report.error("the server did not answer: " .. tostring(failure))
  end
  report.ok("server version " .. status.version)
  local waited = 0
  while not status.loaded and not given(status.error) and waited < wait do
    vim.wait(500)
    waited = waited + 500
    status = assistant.status(wait) or status
  end
  if status.loaded then
    report.ok("model loaded: " .. status.model)
  elseif given(status.error) then
    report.error("the model failed to load: " .. status.error, { "check `model` and `weights` in setup()" })
  else
    report.warn("the model is still loading after " .. waited / 1000 .. " s")
  end
end

return M
