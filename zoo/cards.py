"""The one card renderer: a paper's hand-written card (`cards/<id>.md`) plus a run's measured results.

Results go into the card's `model-index` (Hugging Face eval results) and a "Results of this run" section
with the config that produced them. Only numbers from the run's `summary.json` are written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from zoo.configs import read_yaml
from zoo.errors import ZooError
from zoo.registry import PAPERS
from zoo.rundir import SINGLE_STAGE, check_output_file, check_run_dir, fit_config, read_point, read_summary

RESULTS_HEADING = "## Results of this run"
_STAGES = ("test", "validate", "fit")


def _template(paper_id: str | None) -> ModelCard:
    path = PAPERS[paper_id].card if paper_id in PAPERS else None
    if path is not None and path.exists():
        return ModelCard(path.read_text())
    title = PAPERS[paper_id].title if paper_id in PAPERS else "zoo model"
    return ModelCard(f"---\nlibrary_name: pytorch-lightning\ntags: [zoo]\n---\n\n# {title}\n")


SPLITS = {"test": "test", "val": "validation", "train": "train"}
RUN_KEYS = ("base_model", "datasets")  # what a run's card says about the run only: never the paper's defaults
PROSE_KEYS = ("data_source", "base_model_path", "model_source")  # said in "What this run used", not in the metadata


def eval_results(summary: dict[str, Any], data: ModelCardData) -> list[EvalResult]:
    """One EvalResult per final metric of the run: test metrics, else validation, else (a run only fitted, with no
    validation) its final training metrics. The metric type is the readable name (`exact_match`), the split is the
    dataset's split, and the dataset is the Hub dataset the run really used or, for embedded data, the source."""
    task = data.pipeline_tag or "other"
    meta = summary.get("card_metadata") or {}
    hub = list(meta.get("datasets") or [])
    source = str(meta.get("data_source") or "")
    # the model-index's dataset type is a Hub id; without one it says only where the data came from: a user's own
    # files are "local", never "zoo-embedded" (each datamodule's data_source starts "embedded" for its own data)
    dataset_type = (hub[0] if hub else "zoo-embedded" if source.startswith(("embedded", "generated"))
                    else "local" if source else "unknown")
    dataset_name = hub[0] if hub else (meta.get("data_source") or summary.get("config_name") or "unknown")
    for stage, prefix in (("test", "test/"), ("validate", "val/"), ("fit", "val/"), ("fit", "train/")):
        metrics = summary.get(stage) or {}
        picked = {k: v for k, v in metrics.items() if k.startswith(prefix)}
        if picked:
            split = SPLITS[prefix.rstrip("/")]
            # the split is dataset.split; a metric's own path (test/degmfp/ratio) becomes a dotted type
            return [
                EvalResult(task_type=task, dataset_type=dataset_type, dataset_name=dataset_name, dataset_split=split,
                           metric_type=k[len(prefix):].replace("/", "."),
                           metric_name=k[len(prefix):].replace("/", " ").replace("_", " "),
                           metric_value=round(float(v), 6))
                for k, v in sorted(picked.items())
            ]
    return []


def _provenance(meta: dict[str, Any]) -> list[str]:
    base, local = meta.get("base_model"), meta.get("base_model_path")
    used = (f"`{base}` (pretrained weights)" if base else f"the local directory `{local}` (pretrained weights, not a "
            "Hub model)" if local else "none: randomly initialised, built from a config")
    # a run that evaluates no model of its own (e.g. scoring released generations) says what it evaluated instead
    model = f"- Model: {meta['model_source']}" if meta.get("model_source") else f"- Base model: {used}"
    lines = ["## What this run used", "",
             model,
             f"- Data: {meta.get('data_source') or 'not recorded by the datamodule'}"]
    if meta.get("datasets"):
        lines.append(f"- Hub datasets: {', '.join(f'`{d}`' for d in meta['datasets'])}")
    return lines + [""]


def _environment(summary: dict[str, Any]) -> list[str]:
    """Where the numbers were measured: code, libraries, device and threads all change float reductions, and with
    them what a seeded run produces."""
    env = summary.get("environment") or {}
    lines = []
    for stage in _STAGES:
        e = env.get(stage)
        if e:
            device = e.get("gpu") or e.get("cpu") or "unknown device"
            commit = e.get("zoo_commit") or ""
            code = (f"zoo `{commit[:12]}`{' with uncommitted changes' if commit.endswith('+dirty') else ''}"
                    if commit else "zoo (commit not recorded)")
            lines.append(f"- {stage}: {device}, {e.get('torch_threads')} torch threads; {code}, torch {e.get('torch')}, "
                         f"Lightning {e.get('lightning')}, Python {e.get('python')}")
    return ["Environment (the same config and seed can give other numbers in another one):", "", *lines, ""] \
        if lines else []


def run_name(run_dir: Path, summary: dict[str, Any], point: dict[str, Any]) -> str:
    """What a card calls its run: a sweep point (`read_point`) by its sweep, stage and point (a sweep's variant may
    swap the model class of the config it starts from, so the config's name alone can name the wrong method), else
    the config."""
    if point:
        stage = "" if point.get("stage") == SINGLE_STAGE else f"{point.get('stage')}/"  # no stages: not shown
        return f"{point.get('sweep')}/{stage}{point.get('point')}"
    return summary.get("config_name") or run_dir.name


def _results_section(run_dir: Path, summary: dict[str, Any], point: dict[str, Any]) -> str:
    name = run_name(run_dir, summary, point)
    source = (f"sweep point `{name}`, from config `{summary.get('config_name')}` with the sweep's overrides"
              if point else f"`{name}`")
    lines = [RESULTS_HEADING, "", *_provenance(summary.get("card_metadata") or {}),
             f"Measured by this run ({source}, run dir `{run_dir.name}`); "
             "produced by the config below, not copied from the paper.", "", *_environment(summary)]
    rows = [(stage, k, v) for stage in _STAGES for k, v in sorted((summary.get(stage) or {}).items())]
    if rows:
        lines += ["| stage | metric | value |", "|---|---|---|"]
        lines += [f"| {s} | {k} | {v:.6g} |" for s, k, v in rows]
    else:
        lines.append("No metrics were recorded.")
    cfg = fit_config(run_dir)  # a resumed fit's own (it may have trained longer), else config.yaml
    if cfg.exists():
        if not isinstance(read_yaml(cfg, "run config "), dict):  # the card says this config produced its numbers
            raise ZooError(f"run config {cfg} is not a mapping of options; restore it before writing the card")
        lines += ["", f"<details><summary>{cfg.name}</summary>", "", "```yaml", cfg.read_text().rstrip(), "```", "",
                  "</details>"]
    return "\n".join(lines) + "\n"


def render_card(run_dir: str | Path) -> str:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ZooError(f"run dir {run_dir} does not exist")
    summary = read_summary(run_dir)
    card = _template(summary.get("paper"))
    data = card.data
    extra = summary.get("card_metadata") or {}
    for k in RUN_KEYS:  # the paper's base model and datasets are not this run's unless the run says so
        setattr(data, k, extra.get(k) or None)
    for k, v in extra.items():
        if k in RUN_KEYS or k in PROSE_KEYS:
            continue
        old = getattr(data, k, None)
        if isinstance(old, list) and isinstance(v, list):
            # the run's own values first: model-index takes the first dataset as the evaluated one
            setattr(data, k, v + [x for x in old if x not in v])
        elif old in (None, [], ""):
            setattr(data, k, v)
    point = read_point(run_dir)
    data.model_name = run_name(run_dir, summary, point)
    results = eval_results(summary, data)
    if results:
        data.eval_results = results
    body = card.text.split(RESULTS_HEADING)[0].rstrip() + "\n\n" + _results_section(run_dir, summary, point)
    return f"---\n{data.to_yaml()}\n---\n{body}"


def write_card(run_dir: str | Path, output: str | Path | None = None) -> Path:
    out = Path(output) if output else Path(run_dir) / "README.md"
    out.write_text(render_card(run_dir))
    return out


def card(run_dir: str, output: str | None = None) -> str:
    """Write or refresh a run's model card.

    Args:
        run_dir: a run directory (runs/<config>/<timestamp>).
        output: where to write the card (default: <run_dir>/README.md).
    """
    path = write_card(check_run_dir(run_dir), output and check_output_file(output, "--output"))
    print(path)
    return str(path)
