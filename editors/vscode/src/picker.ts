// The instruction picker: a QuickPick offering the presets and the recent instructions (kept in the
// extension's global state), or whatever the user types.

import * as vscode from "vscode";
import { PRESETS, remember } from "./instructions";

const HISTORY = "editorAssistant.history";

/** The instruction the user picked or typed, remembered for next time; undefined when dismissed. */
export async function pickInstruction(state: vscode.Memento): Promise<string | undefined> {
  const history = state.get<string[]>(HISTORY, []);
  const offered: vscode.QuickPickItem[] = [
    ...PRESETS.map((label) => ({ label, description: "preset" })),
    ...(history.length ? [{ label: "recent", kind: vscode.QuickPickItemKind.Separator }] : []),
    ...history.map((label) => ({ label })),
  ];
  const pick = vscode.window.createQuickPick();
  pick.title = "Rewrite instruction";
  pick.placeholder = "Type an instruction, or pick one";
  pick.items = offered;
  pick.onDidChangeValue((value) => {
    const typed = value.trim();
    pick.items = typed && !offered.some((item) => item.label === typed)
      ? [{ label: typed, description: "your instruction", alwaysShow: true }, ...offered]
      : offered;
  });
  const chosen = await new Promise<string | undefined>((resolve) => {
    pick.onDidAccept(() => resolve(pick.selectedItems[0]?.label ?? pick.value.trim()));
    pick.onDidHide(() => resolve(undefined));
    pick.show();
  });
  pick.dispose();
  if (chosen) {
    await state.update(HISTORY, remember(history, chosen));
  }
  return chosen || undefined;
}
