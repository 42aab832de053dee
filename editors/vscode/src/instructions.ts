// The instructions the picker offers: presets first, then the user's recent ones. Pure helpers, no
// `vscode` import (unit tested in src/test/instructions.test.ts); the QuickPick is in picker.ts.

export const PRESETS: readonly string[] = ["Fix this bug", "Add type hints", "Add docstrings", "Make this clearer"];

/** How many recent instructions the picker remembers. */
export const HISTORY_SIZE = 20;

/** `history` with `instruction` moved (or added) to the front, presets left out, at most HISTORY_SIZE. */
export function remember(history: readonly string[], instruction: string): string[] {
  const text = instruction.trim();
  if (!text || PRESETS.includes(text)) {
    return [...history];
  }
  return [text, ...history.filter((item) => item !== text)].slice(0, HISTORY_SIZE);
}
