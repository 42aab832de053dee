// The review of a rewrite in VS Code: the marks of the server's `assistant/diff` notification (old
// lines red, new lines green, generated text outlined, lines the answer has not reached dimmed), the
// context keys the accept/reject keybindings depend on, and the streamed edits joined into one undo
// step. Every mark is redrawn from the latest notification, never patched; a stale notification (of
// an older document version) is skipped, since a current one follows.

import * as vscode from "vscode";
import { ApplyWorkspaceEditParams, ApplyWorkspaceEditResult, TextDocumentEdit } from "vscode-languageclient/node";
import { isStale, Range } from "./attribution";
import { DiffParams, isReviewing, Lines, linesRemovedOnSave, marksOf } from "./diff";

/** Context keys for `when` clauses: the active editor's rewrite streams, or waits for a decision. */
export const STREAMING = "editorAssistant.streaming";
export const REVIEWING = "editorAssistant.reviewing";

const asRange = (range: Range) => new vscode.Range(range.start.line, range.start.character, range.end.line, range.end.character);
const wholeLines = (lines: Lines) => new vscode.Range(lines.start, 0, lines.end - 1, 0);

/** The open document with this URI (as the server spells it), if any. */
export function documentOf(uri: string): vscode.TextDocument | undefined {
  const key = vscode.Uri.parse(uri).toString();
  return vscode.workspace.textDocuments.find((document) => document.uri.toString() === key);
}

function lineDecoration(background: string, ruler: string): vscode.TextEditorDecorationType {
  return vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    backgroundColor: new vscode.ThemeColor(background),
    overviewRulerColor: new vscode.ThemeColor(ruler),
    overviewRulerLane: vscode.OverviewRulerLane.Left,
  });
}

export class Review implements vscode.Disposable {
  private readonly decorations = {
    old: lineDecoration("diffEditor.removedLineBackground", "editorOverviewRuler.deletedForeground"),
    new: lineDecoration("diffEditor.insertedLineBackground", "editorOverviewRuler.addedForeground"),
    waiting: vscode.window.createTextEditorDecorationType({ isWholeLine: true, opacity: "0.5" }),
    generated: vscode.window.createTextEditorDecorationType({
      backgroundColor: new vscode.ThemeColor("diffEditor.insertedTextBackground"),
      border: "1px solid",
      borderColor: new vscode.ThemeColor("editorGutter.addedBackground"),
    }),
  };
  private readonly diffs = new Map<string, DiffParams>();

  update(params: DiffParams): void {
    const document = documentOf(params.uri);
    if (!document || isStale(params, document.version)) {
      return;
    }
    if (isReviewing(params)) {
      this.diffs.set(document.uri.toString(), params);
    } else {
      this.diffs.delete(document.uri.toString());
    }
    this.draw();
  }

  /** The edits a save of `document` makes first: the answer is written, or while streaming the original. */
  beforeSave(document: vscode.TextDocument): vscode.TextEdit[] {
    // the latest notice, even of an older version: typing after the rewrite's lines moves nothing,
    // and typing before or inside them is followed by a new notice
    const diff = this.diffs.get(document.uri.toString());
    return (diff ? linesRemovedOnSave(diff) : []).map((lines) => vscode.TextEdit.delete(new vscode.Range(lines.start, 0, lines.end, 0)));
  }

  /** Forget every review (the server restarted: its rewrites are gone). */
  clear(): void {
    this.diffs.clear();
    this.draw();
  }

  draw(): void {
    for (const editor of vscode.window.visibleTextEditors) {
      const diff = this.diffs.get(editor.document.uri.toString());
      const marks = diff ? marksOf(diff) : { old: [], new: [], waiting: [], generated: [] };
      editor.setDecorations(this.decorations.old, marks.old.map(wholeLines));
      editor.setDecorations(this.decorations.new, marks.new.map(wholeLines));
      editor.setDecorations(this.decorations.waiting, marks.waiting.map(wholeLines));
      editor.setDecorations(this.decorations.generated, marks.generated.map(asRange));
    }
    const active = vscode.window.activeTextEditor?.document.uri.toString();
    const diff = active === undefined ? undefined : this.diffs.get(active);
    void vscode.commands.executeCommand("setContext", STREAMING, diff?.streaming ?? false);
    void vscode.commands.executeCommand("setContext", REVIEWING, diff !== undefined && !diff.streaming);
  }

  dispose(): void {
    Object.values(this.decorations).forEach((decoration) => decoration.dispose());
  }
}

/**
 * Applies the server's `workspace/applyEdit`s one at a time. A rewrite's edits (labelled `assistant`,
 * `assistant: accept`, `assistant: reject`) to a document shown in an editor join one undo step, from
 * its first streamed edit to the end of its review, so one undo after accepting restores the text from
 * before the rewrite; any other edit is applied as VS Code applies a workspace edit. An edit that names
 * another version of the document than the one open is refused.
 */
export class GroupedEdits {
  private readonly joining = new Set<string>(); // documents whose next assistant edit joins the open undo step
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly fallback: (params: ApplyWorkspaceEditParams) => Promise<ApplyWorkspaceEditResult>) {}

  apply(params: ApplyWorkspaceEditParams): Promise<ApplyWorkspaceEditResult> {
    const applied = this.queue.then(() => this.applyNow(params));
    this.queue = applied.catch(() => undefined);
    return applied;
  }

  /** Close the document's undo step: the review ended, so what the user does next is a step of its own. */
  end(uri: string): void {
    const document = documentOf(uri);
    const key = document?.uri.toString() ?? uri;
    if (!this.joining.delete(key)) {
      return;
    }
    const editor = vscode.window.visibleTextEditors.find((shown) => shown.document === document);
    void editor?.edit((edit) => edit.insert(new vscode.Position(0, 0), ""), { undoStopBefore: false, undoStopAfter: true });
  }

  private async applyNow(params: ApplyWorkspaceEditParams): Promise<ApplyWorkspaceEditResult> {
    const changes = params.edit.documentChanges ?? [];
    const change = changes.length === 1 && TextDocumentEdit.is(changes[0]) ? changes[0] : undefined;
    const document = change && params.label?.startsWith("assistant") ? documentOf(change.textDocument.uri) : undefined;
    const editor = vscode.window.visibleTextEditors.find((shown) => shown.document === document);
    if (!change || !document || !editor) {
      return this.fallback(params);
    }
    if (change.textDocument.version !== null && change.textDocument.version !== document.version) {
      return { applied: false, failureReason: `the edit is for version ${change.textDocument.version}, the document is at ${document.version}` };
    }
    const key = document.uri.toString();
    const first = !this.joining.has(key);
    this.joining.add(key);
    const applied = await editor.edit(
      (edit) => change.edits.forEach(({ range, newText }) => edit.replace(asRange(range), newText)),
      { undoStopBefore: first, undoStopAfter: false },
    );
    return applied ? { applied } : { applied, failureReason: "VS Code did not apply the edit" };
  }
}
