"""ReGAL's released row schemas, normalised to one example dict ``{id, query, program, answer, metadata}``.

* LOGO (``logo_data/python/*.jsonl``): ``{"program": str, "language": [query]}``.
* Date (``python_data/date/gpt-3.5-turbo_NL+SL/``): ``train_combined.jsonl`` ``{"language": [query],
  "program": str}``; ``train_data`` / ``test`` / ``dev`` ``{"id": int, "question": str,
  "answer": "#### MM/DD/YYYY"}``.
* TextCraft (``python_data/textcraft/gpt-4/``): ``{"idx": "env_N", "language": [query], "program": str}`` or
  ``"answer": bool`` instead of the program, and ``"metadata": "Crafting commands:\\n..."``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from zoo.errors import ZooError


def _query(row: dict[str, Any], where: str) -> str:
    lang = row.get("language")
    if isinstance(lang, list) and lang and isinstance(lang[0], str):
        return lang[0]
    if isinstance(lang, str):
        return lang
    if isinstance(row.get("question"), str):
        return row["question"]
    raise ZooError(f"{where}: the row has no query ('language': [str] or 'question': str)")


def normalize(domain: str, row: Any, index: int, split: str, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ZooError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    q = _query(row, where)
    program = row.get("program")
    if program is not None and not isinstance(program, str):
        raise ZooError(f"{where}: 'program' must be a string")
    if domain == "logo":
        if program is None:
            raise ZooError(f"{where}: a LOGO row needs 'program' (the gold turtle program)")
        return {"id": f"logo_{split}_{index}", "query": q, "program": program, "answer": None, "metadata": None}
    if domain == "date":
        # an "answer": null counts as none: its gold text would be "None", which no program's date equals
        if program is None and row.get("answer") is None:
            raise ZooError(f"{where}: a Date row needs 'program' (train_combined) or 'answer' ('#### MM/DD/YYYY')")
        rid = row.get("id", f"{split}_{index}")
        return {"id": f"date_{rid}", "query": q, "program": program, "answer": row.get("answer"), "metadata": None}
    if domain == "textcraft":
        for key in ("idx", "metadata"):
            if key not in row:
                raise ZooError(f"{where}: a TextCraft row needs {key!r}")
        if program is None and row.get("answer") is None:
            raise ZooError(f"{where}: a TextCraft row needs 'program' or 'answer'")
        return {"id": f"textcraft_{row['idx']}", "query": q, "program": program, "answer": row.get("answer"),
                "metadata": row["metadata"]}
    raise ZooError(f"unknown ReGAL domain {domain!r}")


def read_jsonl(path: str | Path, domain: str, split: str, limit: Optional[int] = None) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise ZooError(f"ReGAL {domain} file {path} not found; the files come from the official repository "
                       f"(esteng/regal_program_learning: logo_data/python/, python_data/date/gpt-3.5-turbo_NL+SL/, "
                       f"python_data/textcraft/gpt-4/), see ../shared/data/regal/")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as e:
            raise ZooError(f"{path}:{n}: not JSON ({e.msg})") from e
        rows.append(normalize(domain, raw, len(rows), split, f"{path}:{n}"))
        if limit is not None and len(rows) >= limit:
            break
    return rows
