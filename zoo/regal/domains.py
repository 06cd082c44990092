"""The three ReGAL domains: what a program's result is, how two results are compared, and what the prompts say.

Every program runs in `zoo.sandbox`: a domain turns (program, codebank source, example) into one sandbox job,
``(code, result_expression)``, and the *parent* turns the returned plain data into a result and decides.

* LOGO: the result is the pen-down segments (packed float64 bytes); two programs agree when their rendered images have
  ``vis_compare > 0.98`` (official `logo_tuple.test_programs`), identical segment lists agree without rendering.
* Date: the result is the value the program's last statement prints or assigns (the official
  `PythonNode.wrap_program` turns exactly that into the program's result); two results agree under
  Faithful-CoT's ``extract_pred_answer``/``is_correct`` for the dataset name ``python`` (equality, with any
  ``[invalid]`` answer mapped to ``[invalid]``), re-implemented below. A program that fails has no result and
  never agrees with anything (officially its result is the string "error", so two failing programs agreed).
* TextCraft: the result is whether the goal item is in the final inventory (official `TextCraftNode.execute`:
  ``'[target]' in check_inventory()``), from replaying the program's logged commands in the parent; two
  programs agree when both succeed or both fail (official: ``result_before == result_after``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from zoo.errors import ZooError
from zoo.regal import logo
from zoo.regal.textcraft_runtime import CraftingCommandsEnv

_HERE = Path(__file__).resolve().parent
INVALID_ANS = "[invalid]"  # Faithful-CoT's marker


def runtime_source(name: str) -> str:
    return (_HERE / f"{name}_runtime.py").read_text()


@dataclass
class Outcome:
    """One executed program: ``result`` is the domain's comparable value (None: the program failed)."""

    result: Any = None
    status: str = "passed"
    reason: str = ""
    stdout: str = ""
    image: Optional[np.ndarray] = field(default=None, repr=False)  # LOGO, rendered lazily

    @property
    def ok(self) -> bool:
        return self.result is not None

    def summary(self, limit: int = 300) -> str:
        """What a feedback prompt may show of this result."""
        if not self.ok:
            return f"error ({self.status}): {self.reason}"[:limit]
        if isinstance(self.result, bytes):  # LOGO strokes: the prompts show no images
            return f"a drawing of {len(self.result) // 32} strokes"
        return str(self.result)[:limit]


class Domain:
    name: str = ""
    max_tuple_size: int = 5
    library: str = ""        # the primitives, as the prompts describe them
    header_imports: str = ""  # what every codebank file starts with (official CodeBank._imports / header)

    def job(self, program: str, codebank_source: str, example: dict[str, Any]) -> tuple[str, str] | str:
        """``(code, result_expression)`` for the sandbox, or a reason (str) why the program cannot run."""
        raise NotImplementedError

    def outcome(self, verdict, example: dict[str, Any]) -> Outcome:
        raise NotImplementedError

    def same(self, before: Outcome, after: Outcome) -> bool:
        """Does the rewritten program execute to the same result as the original (training-time check)?"""
        raise NotImplementedError

    def correct(self, pred: Outcome, example: dict[str, Any], gold: Optional[Outcome]) -> bool:
        """Test-time accuracy: ``gold`` is the executed gold program where the example has one."""
        raise NotImplementedError

    def sandbox_preload(self) -> tuple[str, ...]:
        return ()


def _join(*parts: str) -> str:
    return "\n\n".join(p for p in parts if p and p.strip()) + "\n"


class LogoDomain(Domain):
    name = "logo"
    max_tuple_size = 5  # official refactor_db.py default (scripts/logo/train_regal.sh sets none)
    library = """- forward(x): move forward x pixels
- left(theta): turn left by theta degrees
- right(theta): turn right by theta degrees
- penup(): lift the pen (stop drawing)
- pendown(): put the pen down (start drawing)
- teleport(x, y, theta): jump to position (x, y) facing angle theta
- heading(): the current angle of the turtle
- isdown(): whether the pen is down
- embed(program, local_vars): run the code string `program` in the current context (pass locals() as
  local_vars), then return the turtle to the position, angle and pen state it had before. Use it to nest shapes.
Constants: HALF_INF = 63, INF = 126, EPS_DIST = 1/20, EPS_ANGLE = 2.86 (HALF_INF steps of forward(EPS_DIST * r)
and left(EPS_ANGLE) draw a half circle)."""

    def __init__(self, figsize: float = logo.FIGSIZE, dpi: int = logo.DPI):
        self.figsize, self.dpi = figsize, dpi
        self._runtime = runtime_source("logo")

    def job(self, program, codebank_source, example):
        return _join(self._runtime, codebank_source, program), "_regal_turtle.packed()"

    def outcome(self, verdict, example):
        if not verdict.passed:
            return Outcome(None, verdict.status, verdict.reason, verdict.stdout)
        try:  # the program could have replaced the turtle: accept only well-formed, finite float64 strokes
            raw = bytes.fromhex(verdict.value)
            segs = np.frombuffer(raw, dtype="<f8")
            if len(raw) % 32 or not np.isfinite(segs).all():
                raise ValueError
        except (TypeError, ValueError):
            return Outcome(None, "error", "the turtle's strokes were replaced by something else", verdict.stdout)
        return Outcome(raw, verdict.status, "", verdict.stdout)

    @staticmethod
    def segments(out: Outcome) -> np.ndarray:
        """(n, 4) float64 pen-down segments ``(x0, y0, x1, y1)`` of a successful outcome."""
        return np.frombuffer(out.result, dtype="<f8").reshape(-1, 4)

    def image(self, out: Outcome) -> Optional[np.ndarray]:
        if out.result is None:
            return None
        if out.image is None:
            out.image = logo.render(self.segments(out), self.figsize, self.dpi)
        return out.image

    def similarity(self, a: Outcome, b: Outcome) -> float:
        if a.ok and b.ok and a.result == b.result:
            return 1.0  # identical strokes render to identical images
        return logo.vis_compare(self.image(a), self.image(b))

    def same(self, before, after):
        return before.ok and after.ok and self.similarity(before, after) > logo.MATCH

    def sandbox_preload(self):
        return ("math", "struct")  # what the turtle runtime imports: once per zygote, not per program

    def correct(self, pred, example, gold):
        return gold is not None and self.same(gold, pred)


def extract_pred_answer(value: Any) -> Any:
    """Faithful-CoT `extract_pred_answer` for a dataset name without a rule of its own ("python", "date")."""
    return INVALID_ANS if INVALID_ANS in str(value) else value


def extract_gold_answer(answer: str) -> str:
    """Faithful-CoT `extract_gold_answer` for "date": the text after the last ``#### ``."""
    return str(answer).split("#### ")[-1]


def is_correct(gold: Any, pred: Any) -> bool:
    """Faithful-CoT `is_correct` outside saycan: the prediction equals the gold answer."""
    return pred == gold


def final_result_program(program: str) -> tuple[str, str] | str:
    """Split a Date program into (statements to run, expression whose value is its result), as the official
    `PythonNode.wrap_program`: a final ``print(x)`` gives ``x`` (the print itself is not run), a final
    assignment gives its first target; anything else has no result."""
    try:
        tree = ast.parse(program)
    except SyntaxError as e:
        return f"SyntaxError: {e.msg} (line {e.lineno})"
    if not tree.body:
        return "the program is empty"
    last = tree.body[-1]
    if (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and isinstance(last.value.func, ast.Name)
            and last.value.func.id == "print" and last.value.args):
        return ast.unparse(ast.Module(tree.body[:-1], [])), ast.unparse(last.value.args[0])
    if isinstance(last, ast.Assign) and isinstance(last.targets[0], ast.Name):
        return ast.unparse(ast.Module(tree.body, [])), last.targets[0].id
    return "the program neither ends with print(answer) nor with an assignment"


class DateDomain(Domain):
    name = "date"
    max_tuple_size = 3  # scripts/date/train_regal.sh: --max_tuple_size 3
    library = ""
    header_imports = "from datetime import *\nfrom dateutil.relativedelta import *"  # official CodeBank._imports

    def job(self, program, codebank_source, example):
        split = final_result_program(program)
        if isinstance(split, str):
            return split
        body, expr = split
        return _join(self.header_imports, codebank_source, body), expr

    def outcome(self, verdict, example):
        if not verdict.passed:
            return Outcome(None, verdict.status, verdict.reason, verdict.stdout)
        return Outcome(extract_pred_answer(verdict.value), verdict.status, "", verdict.stdout)

    def same(self, before, after):
        return before.ok and after.ok and is_correct(before.result, after.result)

    def correct(self, pred, example, gold):
        if gold is not None:
            target = gold.result if gold.ok else None
        else:
            target = extract_gold_answer(example["answer"])
        return pred.ok and target is not None and is_correct(target, pred.result)

    def sandbox_preload(self):
        return ("datetime", "dateutil.relativedelta")  # imported once per zygote, not per program


def textcraft_target(query: str) -> str:
    """Official `TextCraftNode`: the goal item is what follows the last 'craft ' in the query, without '.'."""
    return query.split("craft ")[-1].rstrip(".").strip()


class TextCraftDomain(Domain):
    name = "textcraft"
    max_tuple_size = 4  # scripts/textcraft/train_regal.sh: --max_tuple_size 4
    library = """- check_inventory(): returns the agent's current inventory (a string)
- get_object(target): fetch the target directly from the environment, e.g. get_object('2 oak logs')
- craft_object(target, ingredients): craft the target from ingredients that MUST already be in the inventory,
  giving quantity and exact name, e.g. craft_object('4 oak planks', ['1 oak logs'])"""
    ENVS = ("crafting_commands",)

    def __init__(self, env: Optional[str] = None):
        if env is None:
            raise ZooError("TextCraft needs an environment, and the paper's (ADaPT's TextCraft with Minecraft's "
                           "recipe files) is not in the official repository: set model.init_args.textcraft_env: "
                           "crafting_commands for the environment built from each task's crafting commands")
        if env not in self.ENVS:
            raise ZooError(f"unknown TextCraft environment {env!r}; available: {list(self.ENVS)}")
        self.env = env
        self._runtime = runtime_source("textcraft")

    @staticmethod
    def commands(example: dict[str, Any]) -> str:
        meta = example.get("metadata")
        if not meta:
            raise ZooError(f"TextCraft example {example.get('id')!r} has no crafting commands (metadata)")
        return meta

    def job(self, program, codebank_source, example):
        env = f"_regal_env = CraftingCommandsEnv({self.commands(example)!r})"
        return _join(self._runtime, env, codebank_source, program), "_regal_env.log"

    def outcome(self, verdict, example):
        if not verdict.passed:
            return Outcome(None, verdict.status, verdict.reason, verdict.stdout)
        log = verdict.value
        if not isinstance(log, list) or not all(isinstance(c, str) for c in log):
            return Outcome(None, "error", "the environment's command log was replaced", verdict.stdout)
        env = CraftingCommandsEnv(self.commands(example))
        for command in log:  # trusted replay: the verdict depends only on the commands the program sent
            env.step(command)
        inventory = env.step("inventory")
        return Outcome(f"[{textcraft_target(example['query'])}]" in inventory, verdict.status, inventory,
                       verdict.stdout)

    def same(self, before, after):
        return before.ok and after.ok and before.result == after.result

    def sandbox_preload(self):
        return ("re",)  # the environment's parser: once per zygote, not per program

    def correct(self, pred, example, gold):
        expected = example.get("answer")
        expected = True if expected is None else bool(expected)
        return pred.ok and pred.result == expected


def get_domain(name: str, textcraft_env: Optional[str] = None, **kwargs) -> Domain:
    if name == "logo":
        return LogoDomain(**kwargs)
    if name == "date":
        return DateDomain()
    if name == "textcraft":
        return TextCraftDomain(textcraft_env)
    raise ZooError(f"unknown ReGAL domain {name!r}; use 'logo', 'date' or 'textcraft'")
