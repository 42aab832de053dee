// The status bar item: the server starting, the model loading, ready, a queued rewrite's position,
// a streaming rewrite's tokens per second. It follows the server's work-done progress (see
// progress.ts for the messages); clicking it rewrites the selection.

import * as vscode from "vscode";
import { ProgressToken, WorkDoneProgressBegin, WorkDoneProgressEnd, WorkDoneProgressReport } from "vscode-languageclient/node";
import { READY, Status, statusOf } from "./progress";

export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem("editorAssistant.status", vscode.StatusBarAlignment.Right, 100);
  private readonly working = new Set<ProgressToken>();

  constructor() {
    this.item.name = "Editor Assistant";
    this.item.command = "editorAssistant.rewriteSelection";
  }

  show(status: Status): void {
    this.item.text = `${status.busy ? "$(loading~spin)" : "$(sparkle)"} Assistant: ${status.text}`;
    this.item.tooltip = status.tooltip;
    this.item.show();
  }

  /** One work-done progress notification of the server. */
  progress(token: ProgressToken, params: WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd): void {
    if (params.kind === "end") {
      this.working.delete(token);
      if (this.working.size === 0) {
        this.show(READY);
      }
      return;
    }
    this.working.add(token);
    const status = statusOf(params.kind === "begin" ? (params.message ?? params.title) : params.message);
    if (status) {
      this.show(status);
    }
  }

  dispose(): void {
    this.item.dispose();
  }
}
