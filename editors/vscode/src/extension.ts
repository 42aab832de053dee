// VS Code client for the editor assistant's language server (`assistant lsp`).
//
// Activates on its commands only, so a window that never asks for a rewrite never starts the server
// (nor loads a model). It finds the server (server.ts), asks for the instruction (picker.ts), shows
// the streamed rewrite as a diff to review hunk by hunk (review.ts: the marks, the context keys of the
// Ctrl+Enter / Esc keybindings, one undo step per rewrite), highlights the copied output
// (`assistant/attribution`) and shows the server's progress in the status bar (status.ts). The code
// lenses (Accept / Reject per hunk, Accept all / Reject all), hover and diagnostics come from the
// server through vscode-languageclient. A change to a server setting restarts the server.

import * as fs from "node:fs";
import * as vscode from "vscode";
import {
  ApplyWorkspaceEditRequest,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  State,
} from "vscode-languageclient/node";
import { AttributionParams, decorationRanges, isStale } from "./attribution";
import { DiffParams, isReviewing } from "./diff";
import { pickInstruction } from "./picker";
import { STARTING, STOPPED, READY } from "./progress";
import { documentOf, GroupedEdits, Review } from "./review";
import { findServer, NOT_FOUND, SERVER_SETTINGS, ServerSettings, serverArgs } from "./server";
import { StatusBar } from "./status";

const REWRITE_COMMANDS = new Set(["assistant.rewriteSelection", "assistant.rewriteDocument"]);

/** The rewrite's answer (docs/language-server.md): the parts the client uses. */
interface RewriteResult {
  uri: string;
  /** How many hunks wait for a decision: 0 when the answer changed nothing or did not finish. */
  hunks?: number;
  /** The answer did not finish and the original text is back (the server said why). */
  restored?: boolean;
  /** The answer made no edit, only layout or comments changed, or nothing (the server said "no change made"). */
  unchanged?: boolean;
}

let client: LanguageClient | undefined;
let extension: vscode.ExtensionContext;
let status: StatusBar;
let review: Review;
let edits: GroupedEdits;
let attribution: Attribution;

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/** Start the server, unless it runs; false (and a message naming the setting) when none is found. */
async function start(): Promise<boolean> {
  if (client) {
    return true;
  }
  const settings = vscode.workspace.getConfiguration("assistant");
  const folders = (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === "file").map((f) => f.uri.fsPath);
  const command = findServer(settings.get<string>("serverCommand"), folders, process.env.PATH, isExecutable);
  if (!command) {
    status.show(STOPPED);
    void vscode.window.showErrorMessage(NOT_FOUND, "Open Settings").then((choice) => choice &&
      vscode.commands.executeCommand("workbench.action.openSettings", "assistant.serverCommand"));
    return false;
  }
  const args = serverArgs(Object.fromEntries(SERVER_SETTINGS.map((key) => [key, settings.get<string>(key)])) as ServerSettings);
  client = new LanguageClient("editorAssistant", "Editor Assistant", { command, args }, clientOptions());
  client.onDidChangeState(({ newState }) => status.show(newState === State.Starting ? STARTING : newState === State.Running ? READY : STOPPED));
  client.onNotification("assistant/attribution", (params: AttributionParams) => attribution.update(params));
  client.onNotification("assistant/diff", (params: DiffParams) => {
    review.update(params);
    if (!isReviewing(params)) {
      edits.end(params.uri);
    }
  });
  // Replaces vscode-languageclient's own handler (it registers its handlers before the client's).
  client.onRequest(ApplyWorkspaceEditRequest.type, (params) => edits.apply(params));
  await client.start();
  return true;
}

async function restart(): Promise<void> {
  const running = client;
  client = undefined;
  review.clear();
  attribution.clear();
  await running?.stop();
  await start();
}

function clientOptions(): LanguageClientOptions {
  return {
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    middleware: {
      // The code actions "Rewrite selection…"/"Rewrite document…" arrive without the instruction.
      executeCommand: async (command, args, next) => {
        if (!REWRITE_COMMANDS.has(command) || args.length !== (command === "assistant.rewriteSelection" ? 2 : 1)) {
          return next(command, args);
        }
        const instruction = await pickInstruction(extension.globalState);
        return instruction ? next(command, [...args, instruction]) : undefined;
      },
      handleWorkDoneProgress: (token, params, next) => {
        status.progress(token, params);
        next(token, params);
      },
    },
  };
}

/** Sends an `assistant.*` command to the server, starting it first if needed. */
async function execute<T>(command: string, args: unknown[]): Promise<T | undefined> {
  if (!(await start()) || !client) {
    return undefined;
  }
  try {
    return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args })) as T;
  } catch (error) {
    void vscode.window.showErrorMessage(`Editor Assistant: ${error instanceof Error ? error.message : String(error)}`);
    return undefined;
  }
}

/** Rewrite the selection (the cursor's line when nothing is selected) or the whole document. */
async function rewrite(selection: boolean): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor || !(await start()) || !client) {
    return;
  }
  const instruction = await pickInstruction(extension.globalState);
  if (!instruction) {
    return;
  }
  const uri = client.code2ProtocolConverter.asUri(editor.document.uri);
  const line = editor.document.lineAt(editor.selection.active.line).rangeIncludingLineBreak;
  const target = editor.selection.isEmpty ? line : editor.selection;
  editor.selection = new vscode.Selection(target.start, target.start); // the review's marks, not a selection, show
  const result = selection
    ? await execute<RewriteResult>("assistant.rewriteSelection", [uri, client.code2ProtocolConverter.asRange(target), instruction])
    : await execute<RewriteResult>("assistant.rewriteDocument", [uri, instruction]);
  if (result && !result.restored && !result.unchanged && result.hunks === 0) {
    void vscode.window.showInformationMessage("Editor Assistant: the answer changed nothing.");
  }
}

/** A command on the active document's latest rewrite (accept all, reject all, cancel). */
function documentCommand(command: string): () => Promise<void> {
  return async () => {
    const editor = vscode.window.activeTextEditor;
    if (editor && client) {
      await execute(command, [client.code2ProtocolConverter.asUri(editor.document.uri)]);
    }
  };
}

/** Keeps the attribution highlights of each document and draws them in its visible editors. */
class Attribution implements vscode.Disposable {
  private readonly decoration = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor("editor.findRangeHighlightBackground"),
    rangeBehavior: vscode.DecorationRangeBehavior.ClosedClosed,
  });
  private readonly ranges = new Map<string, vscode.Range[]>();

  update(params: AttributionParams): void {
    const document = documentOf(params.uri);
    // A stale notification is skipped: a later edit moved the text, and a current one follows.
    if (!document || !client || isStale(params, document.version)) {
      return;
    }
    const ranges = decorationRanges(params.spans).map((range) => client!.protocol2CodeConverter.asRange(range));
    this.ranges.set(document.uri.toString(), ranges);
    this.draw();
  }

  clear(): void {
    this.ranges.clear();
    this.draw();
  }

  draw(): void {
    for (const editor of vscode.window.visibleTextEditors) {
      editor.setDecorations(this.decoration, this.ranges.get(editor.document.uri.toString()) ?? []);
    }
  }

  dispose(): void {
    this.decoration.dispose();
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  extension = context;
  status = new StatusBar();
  review = new Review();
  attribution = new Attribution();
  edits = new GroupedEdits(async (params) => ({
    applied: await vscode.workspace.applyEdit(await client!.protocol2CodeConverter.asWorkspaceEdit(params.edit)),
  }));
  context.subscriptions.push(
    status,
    review,
    attribution,
    vscode.window.onDidChangeVisibleTextEditors(() => {
      attribution.draw();
      review.draw();
    }),
    vscode.window.onDidChangeActiveTextEditor(() => review.draw()),
    // a save (Ctrl+S) during a review writes the answer, while streaming the original; an auto save
    // (on by default in VS Code for the Web) writes the buffer as it is, or it would end every review
    vscode.workspace.onWillSaveTextDocument((event) => event.reason === vscode.TextDocumentSaveReason.Manual &&
      event.waitUntil(Promise.resolve(review.beforeSave(event.document)))),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (SERVER_SETTINGS.some((key) => event.affectsConfiguration(`assistant.${key}`))) {
        void restart();
      }
    }),
    vscode.commands.registerCommand("editorAssistant.rewriteSelection", () => rewrite(true)),
    vscode.commands.registerCommand("editorAssistant.rewriteDocument", () => rewrite(false)),
    vscode.commands.registerCommand("editorAssistant.acceptAll", documentCommand("assistant.acceptAll")),
    vscode.commands.registerCommand("editorAssistant.rejectAll", documentCommand("assistant.rejectAll")),
    vscode.commands.registerCommand("editorAssistant.cancel", documentCommand("assistant.cancel")),
  );
  await start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
