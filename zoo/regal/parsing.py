"""Reading LLM answers: the refactoring format (``NEW PROGRAM i:`` / ``NEW HELPERS:``), single-helper rewrites,
test-time completions, and which helpers a program calls.

An answer without the expected sections raises `AnswerFormatError`; the loop records it as a failed tuple.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field


class AnswerFormatError(ValueError):
    """The LLM's answer lacks the sections the prompt asked for."""


_HEADER = re.compile(r"(NEW HELPERS|NEW PROGRAM\s+(\d+))\s*:", flags=re.IGNORECASE)
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*$", flags=re.MULTILINE)


def clean_code(text: str) -> str:
    """Drop Markdown fences (and a bare 'python' line after one), keep the code."""
    text = _FENCE.sub("", text)
    text = re.sub(r"^\s*[pP]ython\s*$", "", text, flags=re.MULTILINE)
    return text.strip("\n").rstrip()


def _dedent_block(text: str) -> str:
    import textwrap

    return textwrap.dedent(text).strip("\n")


def split_functions(code: str) -> tuple[list[str], list[str], str]:
    """(function definitions, import statements, the remaining code) of a Python text, each as its own source
    (comments inside a function are kept). Raises SyntaxError when the text is not Python."""
    tree = ast.parse(code)
    lines = code.splitlines()
    funcs, imports, rest = [], [], []
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        src = "\n".join(lines[start:node.end_lineno])
        if isinstance(node, ast.FunctionDef):
            funcs.append(_dedent_block(src))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.unparse(node))
        else:
            rest.append(_dedent_block(src))
    return funcs, imports, "\n".join(rest)


@dataclass
class RefactorAnswer:
    helpers: list[str] = field(default_factory=list)   # function sources, from NEW HELPERS and from programs
    imports: list[str] = field(default_factory=list)
    programs: dict[int, str] = field(default_factory=dict)  # 1-based index -> program (functions removed)
    unparsable: dict[int, str] = field(default_factory=dict)  # index -> why that section is not Python


def parse_refactor_answer(text: str) -> RefactorAnswer:
    """Sections start at ``NEW HELPERS:`` or ``NEW PROGRAM <i>:`` (in any order) and run to the next one.
    Functions defined inside a program section are helpers too (as officially, `Tuple.split_helpers`)."""
    heads = list(_HEADER.finditer(text or ""))
    if not any(m.group(2) for m in heads):
        raise AnswerFormatError("the answer has no 'NEW PROGRAM <i>:' section")
    ans = RefactorAnswer()
    for k, m in enumerate(heads):
        body = clean_code(text[m.end(): heads[k + 1].start() if k + 1 < len(heads) else len(text)])
        idx = int(m.group(2)) if m.group(2) else None
        try:
            funcs, imports, rest = split_functions(_dedent_block(body))
        except (SyntaxError, ValueError) as e:
            if idx is not None:
                ans.unparsable[idx] = f"not Python ({type(e).__name__}: {getattr(e, 'msg', e)})"
                ans.programs[idx] = body  # kept: it runs (and fails) like any other program
            continue
        ans.helpers += [f for f in funcs if f not in ans.helpers]
        ans.imports += [i for i in imports if i not in ans.imports]
        if idx is not None and idx not in ans.programs:
            ans.programs[idx] = "\n".join(imports + [rest]) if imports else rest
    return ans


def parse_functions(text: str) -> dict[str, str]:
    """name -> source of every top-level function in a single-helper rewrite (official
    `CodeBank.parse_refactor_output`: the text after ``NEW PROGRAM:``, else the last fenced block, else all)."""
    m = re.search(r"NEW PROGRAM:?\s*(.*)", text or "", flags=re.DOTALL)
    body = m.group(1) if m else (text or "")
    blocks = re.findall(r"```(?:python)?\n(.*?)```", body, flags=re.DOTALL)
    candidates = ([blocks[0]] if m and blocks else blocks[::-1]) + [clean_code(body)]
    for cand in candidates:
        try:
            funcs, _, _ = split_functions(_dedent_block(clean_code(cand)))
        except (SyntaxError, ValueError):
            continue
        if funcs:
            return {function_name(f): f for f in funcs}
    return {}


def function_name(source: str) -> str:
    return ast.parse(source).body[0].name  # type: ignore[attr-defined]


def called_names(code: str) -> set[str]:
    """Names called anywhere in ``code``, including inside the code strings passed to ``embed`` (LOGO).
    Code that does not parse calls nothing."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            names.add(node.func.id)
            if node.func.id == "embed" and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                names |= called_names(node.args[0].value)
    return names


def extract_completion(completion: str) -> str:
    """The program in a test-time completion: the prompt ends with ``# Thought:``, so the completion is the
    thought's text and then code; it ends at ``[/PYTHON]`` or where the model starts a new ``# Query:``
    (official `CodeLlamaModel.clean_result`)."""
    text = "# Thought:" + (completion or "")
    text = re.split(r"\[/?PYTHON\]", text)[0]
    text = re.split(r"^\s*# Query:", text, flags=re.MULTILINE)[0]
    return clean_code(text)
