// The status bar's text from the server's work-done progress: pure helpers, no `vscode` import
// (unit tested in src/test/progress.test.ts).
//
// The server reports "loading model" while the model loads, "waiting for the model: N ahead" while a
// rewrite is queued, then "T tokens/s, S tokens per step" while it streams (docs/language-server.md).

/** What the status bar shows: a short text and whether work is in progress. */
export interface Status {
  text: string;
  busy: boolean;
  tooltip: string;
}

export const STARTING: Status = { text: "starting", busy: true, tooltip: "Starting the assistant's language server" };
export const READY: Status = { text: "ready", busy: false, tooltip: "The assistant is ready: Ctrl+I (Cmd+I) rewrites the selection" };
export const STOPPED: Status = { text: "stopped", busy: false, tooltip: "The assistant's language server is not running" };

/** The status for one progress message (a begin's or a report's), or undefined to keep the current one. */
export function statusOf(message: string | undefined): Status | undefined {
  if (!message) {
    return undefined;
  }
  if (message.startsWith("loading model")) {
    return { text: "loading model", busy: true, tooltip: "The model is loading" };
  }
  const queued = /waiting for the model: (\d+) ahead/.exec(message);
  if (queued) {
    return { text: `queued (${queued[1]} ahead)`, busy: true, tooltip: `Waiting for the model: ${queued[1]} request(s) ahead` };
  }
  const speed = /^([\d.]+) tokens\/s/.exec(message);
  if (speed) {
    return { text: `${speed[1]} tok/s`, busy: true, tooltip: `Rewriting: ${message}` };
  }
  return { text: message, busy: true, tooltip: message };
}
