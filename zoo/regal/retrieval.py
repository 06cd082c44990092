"""Offline text similarity for ReGAL's three retrievals (helpers for a query, in-context examples for a query,
and the query embeddings that are clustered): TF-IDF vectors compared by cosine similarity.

The official code embeds with OpenAI's text-embedding-ada-002 through chromadb 0.3; its stores cannot be read by
current chromadb and the API is not reachable offline, so queries are re-embedded with scikit-learn's TF-IDF.
"""

from __future__ import annotations

import numpy as np


def tfidf(texts: list[str], fit_on: list[str] | None = None) -> np.ndarray:
    """L2-normalised TF-IDF rows of ``texts`` (vocabulary from ``fit_on``, default the texts themselves);
    word unigrams and bigrams, so "5 gon" and "5 sided" share what they share."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b", sublinear_tf=True)
    vec.fit(fit_on if fit_on is not None else texts)
    return vec.transform(texts).toarray()


def top_k(query: str, docs: list[str], k: int, exclude: set[int] | None = None) -> list[int]:
    """Indices of the k documents most similar to ``query`` (ties: the earlier document first)."""
    if not docs or k <= 0:
        return []
    m = tfidf([query] + list(docs), fit_on=list(docs) + [query])
    sims = m[1:] @ m[0]
    order = sorted(range(len(docs)), key=lambda i: (-sims[i], i))
    if exclude:
        order = [i for i in order if i not in exclude]
    return order[:k]
