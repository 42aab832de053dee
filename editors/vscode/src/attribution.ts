// Pure helpers for `assistant/attribution` notifications: no `vscode` import, so they are unit
// tested with `node --test` outside VS Code (src/test/attribution.test.ts).

/** An LSP position: zero-based line and UTF-16 character offset. */
export interface Position {
  line: number;
  character: number;
}

/** An LSP range, end exclusive. */
export interface Range {
  start: Position;
  end: Position;
}

/** One attributed span: `output` in the current buffer, `source` in the document before the rewrite. */
export interface Span {
  output: Range;
  source: Range;
}

/** A notification about one document, made for one version of it. */
export interface Versioned {
  uri: string;
  version?: number | null;
}

/** The params of the `assistant/attribution` notification. */
export interface AttributionParams extends Versioned {
  spans: Span[];
}

/** Whether a notification describes an older version of the document than the one open now. */
export function isStale(params: Versioned, documentVersion: number): boolean {
  return params.version !== undefined && params.version !== null && params.version < documentVersion;
}

/** The output ranges to highlight, sorted by position, without empty ranges. */
export function decorationRanges(spans: Span[]): Range[] {
  return spans
    .map(({ output }) => output)
    .filter(({ start, end }) => start.line !== end.line || start.character !== end.character)
    .sort((a, b) => a.start.line - b.start.line || a.start.character - b.start.character);
}
