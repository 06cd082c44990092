"""Zero-shot classification protocol of MOMENT: an RBF support-vector machine on frozen embeddings (paper, Sec. 4:
"unsupervised representation learning"; official ``momentfm/models/statistical_classifiers.fit_svm``).

scikit-learn does the SVM; this file is the protocol: C = 100000 without a search when there are fewer than 5
training examples per class or fewer than 50 in all, otherwise 5-fold grid search over C in 1e-4 ... 1e4 (RBF,
gamma "scale"), on at most 10,000 stratified training examples.
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.svm import SVC

# momentfm's grid (the tutorial's); moment-research's fit_svm, behind the paper's UCR table, also tries C = inf
# (cards/moment.md, deviations)
C_GRID = (0.0001, 0.001, 0.01, 0.1, 1, 10, 100, 1000, 10000)


def fit_svm(features: np.ndarray, y: np.ndarray, max_samples: int = 10_000,
            n_jobs: int = 1) -> tuple[SVC, np.ndarray, np.ndarray]:
    """(the fitted SVM, the features and labels it was finally fit on: all, or the stratified subsample)."""
    n_classes = np.unique(y).shape[0]
    n = features.shape[0]
    if n // n_classes < 5 or n < 50:
        return SVC(C=100000, gamma="scale").fit(features, y), features, y
    if n > max_samples:
        features, _, y, _ = train_test_split(features, y, train_size=max_samples, random_state=0, stratify=y)
    search = GridSearchCV(SVC(kernel="rbf", gamma="scale", max_iter=10_000_000), {"C": list(C_GRID)}, cv=5,
                          n_jobs=n_jobs)
    return search.fit(features, y).best_estimator_, features, y


def refit_svm(C: float, features: np.ndarray, y: np.ndarray) -> SVC:
    """The SVM `fit_svm` chose, refit from its training data (deterministic: the same support vectors)."""
    return SVC(C=C, gamma="scale", max_iter=10_000_000).fit(features, y)
