// VS Code client for the editor assistant's language server (`assistant lsp`).
//
// Starts the server over stdio, adds the Rewrite Selection / Rewrite Document / Accept / Reject /
// Cancel commands (the instruction comes from an input box), and highlights the server's
// `assistant/attribution` output ranges. Streaming edits (workspace/applyEdit), work-done progress
// and hover ("copied from lines X–Y") are handled by vscode-languageclient and the server.

import * as vscode from "vscode";
import { ExecuteCommandRequest, LanguageClient, LanguageClientOptions, ServerOptions } from "vscode-languageclient/node";
import { AttributionParams, decorationRanges, isStale } from "./attribution";

const REWRITE_COMMANDS = new Set(["assistant.rewriteSelection", "assistant.rewriteDocument"]);

let client: LanguageClient | undefined;

/** The rewrite's response: the new text, its attribution and decoding stats. */
interface RewriteResult {
  uri: string;
  text: string;
  /** Why generation ended, "eos", "length", "stop" or "cancelled". */
  stopped: string;
  /** Names this rewrite, so accept and reject act on it and on no newer one. */
  id?: string;
  /** The answer did not finish and the original text is back (the server said why). */
  restored?: boolean;
}

async function askInstruction(): Promise<string | undefined> {
  const instruction = await vscode.window.showInputBox({
    prompt: "Rewrite instruction",
    placeHolder: "e.g. Add type hints.",
  });
  return instruction?.trim() || undefined;
}

function serverOptions(): ServerOptions {
  const config = vscode.workspace.getConfiguration("editorAssistant");
  const args = ["lsp"];
  const model = config.get<string>("model");
  const strategy = config.get<string>("strategy");
  if (model) {
    args.push("--model", model);
  }
  if (strategy) {
    args.push("--strategy", strategy);
  }
  return { command: config.get<string>("serverCommand") || "assistant", args };
}

/** Sends an `assistant.*` command to the server. */
function execute<T>(command: string, args: unknown[]): Promise<T> {
  if (!client) {
    return Promise.reject(new Error("the assistant language server is not running"));
  }
  return client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }) as Promise<T>;
}

async function rewrite(selection: boolean): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor || !client) {
    return;
  }
  const instruction = await askInstruction();
  if (!instruction) {
    return;
  }
  const uri = client.code2ProtocolConverter.asUri(editor.document.uri);
  const result = selection
    ? await execute<RewriteResult>("assistant.rewriteSelection", [
        uri,
        client.code2ProtocolConverter.asRange(editor.selection),
        instruction,
      ])
    : await execute<RewriteResult>("assistant.rewriteDocument", [uri, instruction]);
  await offerAcceptReject(editor.document, result);
}

async function offerAcceptReject(document: vscode.TextDocument, result: RewriteResult | null): Promise<void> {
  if (result?.restored) {
    return;
  }
  const choice = await vscode.window.showInformationMessage(
    result?.stopped ? `Rewrite finished (${result.stopped}).` : "Rewrite finished.",
    "Accept",
    "Reject",
  );
  if (choice && client) {
    const uri = client.code2ProtocolConverter.asUri(document.uri);
    await execute(choice === "Accept" ? "assistant.accept" : "assistant.reject", result?.id ? [uri, result.id] : [uri]);
  }
}

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
    const document = vscode.workspace.textDocuments.find((doc) => doc.uri.toString() === vscode.Uri.parse(params.uri).toString());
    // A stale notification is skipped: a later edit moved the text, and a current one follows.
    if (!document || !client || isStale(params, document.version)) {
      return;
    }
    const ranges = decorationRanges(params.spans).map((range) => client!.protocol2CodeConverter.asRange(range));
    this.ranges.set(document.uri.toString(), ranges);
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
  const attribution = new Attribution();
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    middleware: {
      // The code actions "Rewrite selection…"/"Rewrite document…" arrive without the instruction.
      executeCommand: async (command, args, next) => {
        if (!REWRITE_COMMANDS.has(command)) {
          return next(command, args);
        }
        const instruction = await askInstruction();
        if (!instruction) {
          return undefined;
        }
        const result = await next(command, [...args, instruction]);
        const document = vscode.workspace.textDocuments.find((doc) => doc.uri.toString() === vscode.Uri.parse(String(args[0])).toString());
        if (document) {
          await offerAcceptReject(document, result as RewriteResult | null);
        }
        return result;
      },
    },
  };
  client = new LanguageClient("editorAssistant", "Editor Assistant", serverOptions(), clientOptions);
  context.subscriptions.push(
    attribution,
    client.onNotification("assistant/attribution", (params: AttributionParams) => attribution.update(params)),
    vscode.window.onDidChangeVisibleTextEditors(() => attribution.draw()),
    vscode.commands.registerCommand("editorAssistant.rewriteSelection", () => rewrite(true)),
    vscode.commands.registerCommand("editorAssistant.rewriteDocument", () => rewrite(false)),
    vscode.commands.registerCommand("editorAssistant.accept", documentCommand("assistant.accept")),
    vscode.commands.registerCommand("editorAssistant.reject", documentCommand("assistant.reject")),
    vscode.commands.registerCommand("editorAssistant.cancel", documentCommand("assistant.cancel")),
  );
  await client.start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
