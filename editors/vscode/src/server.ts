// Which `assistant` the extension starts, and with which arguments: pure helpers, no `vscode`
// import, so they are unit tested with `node --test` (src/test/server.test.ts).
//
// The server is the configured `assistant.serverCommand` when set; else the first workspace folder's
// project environment (.venv/bin/assistant, the README's setup); else `assistant` on PATH; else none,
// and the extension says which setting to set.

import * as path from "node:path";

/** The settings that shape the server's command line; a change to any of them restarts it. */
export const SERVER_SETTINGS = ["serverCommand", "model", "weights", "strategy", "device", "engine"] as const;

export interface ServerSettings {
  serverCommand?: string;
  model?: string;
  weights?: string;
  strategy?: string;
  device?: string;
  engine?: string;
}

/** The places a project environment keeps its executables, for this platform. */
function environmentExecutables(folder: string, platform: string): string[] {
  return platform === "win32"
    ? [path.win32.join(folder, ".venv", "Scripts", "assistant.exe")]
    : [path.posix.join(folder, ".venv", "bin", "assistant")];
}

/**
 * The executable to start: the configured command (as given: a path or a name on PATH), else the
 * workspace folders' `.venv`, else `assistant` on PATH; undefined when none is found.
 */
export function findServer(
  configured: string | undefined,
  folders: readonly string[],
  pathVariable: string | undefined,
  isExecutable: (file: string) => boolean,
  platform: string = process.platform,
): string | undefined {
  if (configured?.trim()) {
    return configured.trim();
  }
  const name = platform === "win32" ? "assistant.exe" : "assistant";
  const onPath = (pathVariable ?? "")
    .split(platform === "win32" ? ";" : ":")
    .filter((dir) => dir)
    .map((dir) => (platform === "win32" ? path.win32 : path.posix).join(dir, name));
  const candidates = [...folders.flatMap((folder) => environmentExecutables(folder, platform)), ...onPath];
  return candidates.find(isExecutable);
}

/** `assistant lsp` and the flags of the settings that are set (empty ones leave the server's default). */
export function serverArgs(settings: ServerSettings): string[] {
  const args = ["lsp"];
  for (const key of ["model", "weights", "strategy", "device", "engine"] as const) {
    const value = settings[key]?.trim();
    if (value) {
      args.push(`--${key}`, value);
    }
  }
  return args;
}

/** What to tell the user when no server was found. */
export const NOT_FOUND =
  "Editor Assistant: no `assistant` executable found (looked in the workspace folders' .venv and on PATH). " +
  "Install the project (scripts/setup) and set `assistant.serverCommand` to its path, e.g. /path/to/repo/.venv/bin/assistant.";
