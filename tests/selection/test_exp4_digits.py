"""Exp4 with real scikit-learn models on load_digits: the weighted answer is at least as accurate
as the best single model on held-out data.

Split (stratified, seeded): 30 % trains the models, 35 % is feedback for Exp4, 35 % is held out.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("sklearn")

from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB
from sklearn.tree import DecisionTreeClassifier

from headway.selection import make_policy


@pytest.mark.parametrize("split_seed", [0, 1, 2])
def test_exp4_is_at_least_as_accurate_as_the_best_model(split_seed: int) -> None:
    features, labels = load_digits(return_X_y=True)
    features = features / 16.0
    x_train, x_rest, y_train, y_rest = train_test_split(
        features, labels, train_size=0.3, random_state=split_seed, stratify=labels
    )
    x_feedback, x_held, y_feedback, y_held = train_test_split(
        x_rest, y_rest, train_size=0.5, random_state=split_seed, stratify=y_rest
    )
    models = {
        "logreg": LogisticRegression(max_iter=2000),
        "tree": DecisionTreeClassifier(max_depth=6, random_state=0),
        "bayes": GaussianNB(),
    }
    for model in models.values():
        model.fit(x_train, y_train)
    feedback = {name: model.predict(x_feedback).tolist() for name, model in models.items()}
    held = {name: model.predict(x_held).tolist() for name, model in models.items()}
    truth = y_held.tolist()

    policy = make_policy("exp4", list(models))  # the default eta = 0.01
    state = policy.initial_state()
    rng = random.Random(split_seed)
    for i, label in enumerate(y_feedback.tolist()):
        selection = policy.select(state, rng)
        policy.observe(state, label, {m: feedback[m][i] for m in selection.models}, selection)

    correct = 0
    for i, label in enumerate(truth):
        selection = policy.select(state, rng)
        decision = policy.combine(state, {m: held[m][i] for m in selection.models}, selection)
        correct += decision.output == label
    ensemble = correct / len(truth)
    single = {
        m: sum(p == t for p, t in zip(held[m], truth, strict=True)) / len(truth) for m in held
    }

    assert ensemble >= max(single.values())
    # the learned weights rank the models as their held-out accuracy does
    weights = policy.weights(state)
    assert sorted(weights, key=weights.__getitem__) == sorted(single, key=single.__getitem__)
