"""The registry is the truth about the zoo: every registered paper has what it claims, every config parses."""

from __future__ import annotations

import re
import shlex

import pytest

from zoo.hub import import_class
from zoo.registry import PAPERS, ROOT, find

ACTIVE = [p for p in PAPERS.values() if p.status != "planned"]
ALL_CONFIGS = sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "configs" / "smoke").glob("*.yaml"))


def test_nineteen_papers_with_unique_ids():
    assert len(PAPERS) == 19
    assert {p.status for p in PAPERS.values()} <= {"implemented", "in progress", "planned"}


@pytest.mark.parametrize("paper", ACTIVE, ids=lambda p: p.id)
def test_registered_paper_is_complete(paper):
    assert (ROOT / "zoo" / paper.id / "__init__.py").exists(), "package zoo/<id>/"
    assert paper.card.exists(), f"cards/{paper.id}.md"
    assert list((ROOT / "tests" / paper.id).glob("test_*.py")), f"tests/{paper.id}/"
    assert paper.configs, "at least one config"
    for stem in paper.configs:
        assert paper.config_path(stem).exists(), f"configs/{stem}.yaml"
        assert paper.config_path(stem, smoke=True).exists(), f"configs/smoke/{stem}.yaml"
    for path in paper.modules + paper.datamodules + paper.callbacks:
        import_class(path)


@pytest.mark.parametrize("paper", ACTIVE, ids=lambda p: p.id)
def test_card_has_hub_metadata(paper):
    from huggingface_hub import ModelCard

    card = ModelCard(paper.card.read_text())
    assert card.data.license and card.data.tags and "zoo" in card.data.tags
    assert "reported in the paper" in card.text.lower() or "paper's" in card.text.lower()


# Paths of the project's own layout that a card names but that are the official code's (say so in the card).
OFFICIAL_PATHS = {"configs/pretraining/pretrain.yaml"}  # MOMENT's pretraining config
PROJECT_PATH = re.compile(r"(?<![\w/.-])((?:configs|benchmarks|tests|zoo|datamodules|callbacks|cards)/[\w./-]+"
                          r"\.(?:yaml|py|md|jsonl|json|csv))\b")


def test_every_project_path_a_card_names_exists():
    """A card's commands and references (configs, sweeps, benchmarks, tests, run logs) point at files that exist:
    a renamed config otherwise leaves a reproduction command that fails."""
    cards = sorted((ROOT / "cards").rglob("*.md"))
    named = {(c.relative_to(ROOT).as_posix(), m) for c in cards for m in PROJECT_PATH.findall(c.read_text())}
    assert len(named) > 300  # the pattern still reads the cards
    missing = sorted(f"{card}: {path}" for card, path in named
                     if path not in OFFICIAL_PATHS and not (ROOT / path).exists())
    assert not missing, missing


def test_every_config_belongs_to_a_paper():
    stems = {s for p in PAPERS.values() for s in p.configs}
    orphans = [c.name for c in ALL_CONFIGS if c.stem not in stems]
    assert not orphans, f"configs not listed in the registry: {orphans}"


@pytest.mark.parametrize("config", ALL_CONFIGS, ids=lambda c: str(c.relative_to(ROOT / "configs")))
def test_every_config_parses_and_names_existing_classes(config):
    """Parse with the real CLI parser (class paths resolved, types checked) and check the settings, without
    instantiating."""
    from zoo.errors import ZooError
    from zoo.trainer import parse_only

    try:
        parse_only(["fit", "--config", str(config)])
    except ZooError:  # an evaluation config (no training step, or max_steps 0): what `zoo test` makes of it
        parse_only(["test", "--config", str(config)])


COMMAND = re.compile(r"zoo (fit|test|validate|predict)\s+([^`|\n]*)")


def written_commands(text: str) -> list[list[str]]:
    """The one-line `zoo fit/test/validate/predict --config ...` commands of a card or README, as argv; commands
    with placeholders (<ts>, CFG, [...]) or continued on the next line are left out, and --ckpt_path is dropped
    (the run dirs they name are the reader's)."""
    out = []
    for m in COMMAND.finditer(text):
        rest = m.group(2).split("#")[0].split("&&")[0].strip()
        if rest.endswith("\\") or "--config" not in rest:
            continue
        try:
            words = shlex.split(rest)
        except ValueError:
            continue
        words = [w for i, w in enumerate(words) if w != "--ckpt_path" and (i == 0 or words[i - 1] != "--ckpt_path")]
        if not any(c in w for w in words for c in ("<", "...", "[")) and "CFG" not in words:
            out.append([m.group(1), *words])
    return out


@pytest.mark.parametrize("doc", sorted((ROOT / "cards").glob("*.md")) + [ROOT / "README.md"], ids=lambda p: p.name)
def test_every_command_a_card_writes_parses(doc):
    """What a reader copies from a card or the README (about 150 commands) names options that exist, with values
    the settings checks accept: a renamed option would otherwise leave a reproduction command that fails."""
    import contextlib
    import io

    from zoo.trainer import parse_only

    for argv in written_commands(doc.read_text()):
        with contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                parse_only(argv)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - the parser's own errors, reported as they are
                pytest.fail(f"{doc.name}: zoo {' '.join(argv)}: {type(e).__name__}: {e} {err.getvalue()[-300:]}")


def test_the_command_reader_finds_commands_and_leaves_placeholders_out():
    text = ("`zoo fit --config configs/a.yaml --model.init_args.r 4`, `zoo test --config CFG`, and\n"
            "    zoo test --config configs/b.yaml --ckpt_path runs/b/x/last.ckpt   # comment\n"
            "    zoo fit --config configs/c.yaml --ckpt_path runs/c/<ts>/last.ckpt --data.init_args.path <dir>\n")
    assert written_commands(text) == [["fit", "--config", "configs/a.yaml", "--model.init_args.r", "4"],
                                      ["test", "--config", "configs/b.yaml"]]


def test_find_matches_ids_titles_and_configs():
    assert [p.id for p in find("rosa")] == ["rosa"]
    assert "rosa" in [p.id for p in find("*gsm8k*")]
    assert find("no-such-thing-xyz") == []


def _bare_containers(annotation) -> list:
    """The dict/list/tuple/set parts of a type annotation without element types, at any depth."""
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    bare_aliases = (typing.Dict, typing.List, typing.Tuple, typing.Set)  # noqa: UP006 - what is looked for
    if annotation in (dict, list, tuple, set, *bare_aliases):
        return [annotation]
    return [bare for a in args if a is not Ellipsis for bare in _bare_containers(a)] if origin else []


def test_every_container_setting_names_its_element_types():
    """jsonargparse reads a nested override into a bare `dict` (or list) as strings: with `t5_config: dict`,
    `--model.init_args.t5_config.d_model=32` built a T5 config with d_model '32' and ended in a traceback. Every
    registered class types its container settings (dict[str, Any], list[int], ...), so overrides keep their types."""
    import inspect
    import typing

    bad = []
    for paper in PAPERS.values():
        for path in paper.modules + paper.datamodules + paper.callbacks:
            cls = import_class(path)
            hints = typing.get_type_hints(cls.__init__)
            for name in inspect.signature(cls.__init__).parameters:
                if name in hints and _bare_containers(hints[name]):
                    bad.append(f"{path}.{name}: {hints[name]}")
    assert not bad, bad
    from zoo.trainer import parse_only

    args = parse_only(["fit", "--config", str(ROOT / "configs/smoke/moment_ecg5000_head.yaml"),
                       "--model.init_args.t5_config.d_model=32"])
    assert args["t5_config"]["d_model"] == 32
