"""Implicit meta-learning may lead language models to trust more reliable sources (Krasheninnikov et al., ICML 2024).

`data` builds the two-stage tagged-definitions dataset, `metrics` scores answers (SQuAD EM/F1), `module` holds the
causal-LM LightningModule; `callbacks.iml_tagging.IMLTagging` tags documents and evaluates per subset.
"""

from zoo.iml.module import IMLModule

__all__ = ["IMLModule"]
