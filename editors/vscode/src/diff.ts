// The `assistant/diff` notification and what the editor marks from it: pure helpers, no `vscode`
// import (unit tested in src/test/diff.test.ts). The protocol is in docs/language-server.md
// ("Review: the rewrite as a diff"): line ranges are 0-based and half-open, in the document at
// `version`; only undecided hunks are listed, and an empty `hunks` with `streaming: false` means the
// review has ended.

import { Range, Versioned } from "./attribution";

/** A half-open range of whole lines. */
export interface Lines {
  start: number;
  end: number;
}

export interface Hunk {
  index: number;
  /** The original lines the hunk removes (empty for a pure insertion). */
  old: Lines;
  /** The answer's lines it adds (empty for a pure deletion). */
  new: Lines;
  /** The text of its new lines that the model wrote rather than copied. */
  generated: Range[];
  /** The text of its old lines (shown as text in VS Code: `old`). */
  removed?: string[];
}

export interface DiffParams extends Versioned {
  id: string;
  streaming: boolean;
  lines: Lines;
  /** The original lines the streaming answer has not reached yet. */
  waiting: Lines;
  hunks: Hunk[];
}

/** The ranges to mark, each kind drawn with its own decoration. */
export interface Marks {
  old: Lines[];
  new: Lines[];
  waiting: Lines[];
  generated: Range[];
}

const nonEmpty = (lines: Lines) => lines.end > lines.start;

/** The marks of one notification: old and new lines per hunk, the waiting lines, the generated text. */
export function marksOf(params: DiffParams): Marks {
  return {
    old: params.hunks.map((hunk) => hunk.old).filter(nonEmpty),
    new: params.hunks.map((hunk) => hunk.new).filter(nonEmpty),
    waiting: [params.waiting].filter(nonEmpty),
    generated: params.hunks.flatMap((hunk) => hunk.generated),
  };
}

/** Whether the rewrite still asks for a decision (or is still streaming): the accept/reject keys apply. */
export function isReviewing(params: DiffParams): boolean {
  return params.streaming || params.hunks.length > 0;
}

/**
 * The lines a save removes first, so that the file never holds both sides of a hunk: under review,
 * every undecided hunk's old lines (the server takes that as accepting them: the file holds the
 * answer); while streaming, the new lines (the rewrite stops, and the original lines are back).
 */
export function linesRemovedOnSave(params: DiffParams): Lines[] {
  return params.hunks.map((hunk) => (params.streaming ? hunk.new : hunk.old)).filter(nonEmpty);
}
