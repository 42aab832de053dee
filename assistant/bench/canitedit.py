"""CanItEdit (Cassano et al., COLM 2024) in the bench (`assistant bench --tasks canitedit`): hand-written
Python editing problems, each asked twice, with a descriptive and a lazy instruction, and scored as
upstream scores them (nuprl/CanItEdit `benchmark/` @ 8796791): the answer, a newline, then the problem's
tests, run as one Python file (here in the bench's sandbox, with upstream's 15 s), exit status 0 passes.
pass@1 of a greedy answer is the share of problems passed.

Beside the product's path (the engine's edit prompt), the `reference-prompt` row asks the same model
with CanItEdit's own chat prompt (`messages`: upstream's `chat_edit_prompt_zeroshot`) and takes the code
out of the reply's first code block as upstream does (`code_block`: `python_markdown_codeblock_extract`),
so that the product is compared with the figure the benchmark publishes for the model.

A problem whose packages (`requires`) are not importable by the interpreter that runs the bench (the one
the sandbox runs too) is left out, and counted: `pip install -e '.[bench]'` installs the cheap ones.
The set's license forbids training on it; measuring is its purpose.
"""

from __future__ import annotations

import importlib.util

from assistant.bench import sandbox

FILE = "canitedit_dev.jsonl"
TIME_LIMIT_S = 15.0  # upstream's
INSTRUCTIONS = {"descriptive": "instruction_descriptive", "lazy": "instruction_lazy"}
IMPORT_NAMES = {"scikit-learn": "sklearn", "z3-solver": "z3"}  # pip name -> the module it installs, where they differ

SYSTEM = ("You are PythonEditGPT. You will be provided the original code snippet and an instruction that "
          "specifies the changes you need to make. You will produce the changed code, based on the original "
          "code and the instruction given. Only produce the code, do not include any additional prose.")


def messages(before: str, instruction: str) -> list[dict]:
    """CanItEdit's chat prompt for a problem: its system message, then the code and the instruction."""
    user = f"## Code Before\n```py\n{before}\n```\n\n## Instruction\n{instruction}\n\n## Code After"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def code_block(reply: str) -> str:
    """The lines of the reply's first code block, each ending with a newline ("" when it has none), as
    upstream extracts them: a block opens and closes at a line starting with three backticks."""
    code, inside = "", False
    for line in reply.split("\n"):
        if line.startswith("```"):
            if inside:
                break
            inside = True
        elif inside:
            code += line + "\n"
    return code


def missing(requires: list[str]) -> list[str]:
    """The packages of `requires` that this interpreter cannot import."""
    return [name for name in requires
            if importlib.util.find_spec(IMPORT_NAMES.get(name, name.replace("-", "_"))) is None]


def score(answer: str, tests: str) -> sandbox.Outcome:
    """The answer and the tests run as one program in the sandbox: it passes when it exits with 0."""
    return sandbox.run_python(f"{answer}\n{tests}", TIME_LIMIT_S)
