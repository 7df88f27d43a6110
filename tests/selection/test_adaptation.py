"""Learning from feedback: convergence, recovery from a degraded model, personalisation.

Models are simulated with a seeded generator: a model with accuracy q answers the true class
(one of 10) with probability q, else one of the other nine at random.

On the learning rate (see docs/selection.md for the sweep): after T rounds the expected gap in
log weight between two models whose mean losses differ by d is about eta*T*d. The best model
holds 80 % of the choice probability once its gap to the runner-up is about 1.6. With clearly
different accuracies, 0.9 / 0.6 / 0.3 (d = 0.3), the default eta = 0.01 gets there within
1,000 rounds: 80 % of the last 200 of 1,000 choices on every one of 200 seeds (worst 84.5 %).
With closer ones, 0.9 / 0.7 / 0.5 (d = 0.2), eta*T >= 8 needs T = 800 at the default, so 80 % of
the last 200 of 1,000 choices is reached only on average (82.7 % over 300 seeds, 76 % of seeds
pass); every eta from 0.015 to 0.2 passed on all 300 seeds. Those closer accuracies are tested
at eta = 0.05 within 1,000 rounds and at the default eta within 2,000.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from headway.selection import Selection, StateRegistry, make_policy
from headway.selection.policy import Policy, PolicyState

CLASSES = 10


def _answer(world: random.Random, accuracy: float, label: int) -> int:
    if world.random() < accuracy:
        return label
    return (label + 1 + world.randrange(CLASSES - 1)) % CLASSES


def _run(
    policy: Policy,
    rounds: int,
    accuracy: Callable[[int], dict[str, float]],
    seed: int,
    state: PolicyState | None = None,
) -> tuple[PolicyState, list[Selection]]:
    state = state if state is not None else policy.initial_state()
    rng, world = random.Random(seed), random.Random(seed + 1_000)
    selections = []
    for t in range(rounds):
        label = world.randrange(CLASSES)
        selection = policy.select(state, rng)
        answers = {m: _answer(world, accuracy(t)[m], label) for m in selection.models}
        policy.observe(state, label, answers, selection)
        selections.append(selection)
    return state, selections


def _steady(t: int) -> dict[str, float]:
    return {"best": 0.9, "good": 0.7, "coin": 0.5}


def _best_share(selections: list[Selection]) -> float:
    return sum(s.models == ("best",) for s in selections) / len(selections)


def _clearly_different(t: int) -> dict[str, float]:
    return {"best": 0.9, "good": 0.6, "coin": 0.3}


@pytest.mark.parametrize("seed", range(20))
def test_exp3_default_eta_converges_within_1000_rounds(seed: int) -> None:
    policy = make_policy("exp3", ["coin", "good", "best"])
    assert policy.eta == 0.01
    _, selections = _run(policy, 1_000, _clearly_different, seed)
    assert _best_share(selections[-200:]) >= 0.8


@pytest.mark.parametrize("seed", range(10))
def test_exp3_converges_within_1000_rounds(seed: int) -> None:
    policy = make_policy("exp3", ["coin", "good", "best"], eta=0.05)
    _, selections = _run(policy, 1_000, _steady, seed)
    assert _best_share(selections[-200:]) >= 0.8


@pytest.mark.parametrize("seed", range(5))
def test_exp3_default_eta_converges_within_2000_rounds(seed: int) -> None:
    policy = make_policy("exp3", ["coin", "good", "best"])
    assert policy.eta == 0.01
    _, selections = _run(policy, 2_000, _steady, seed)
    assert _best_share(selections[-200:]) >= 0.8


def _degrading(t: int) -> dict[str, float]:
    return {"best": 0.9 if t < 500 else 0.2, "good": 0.7, "coin": 0.5}


def _events_until_abandoned(policy: Policy, seed: int) -> tuple[int | None, list[Selection]]:
    """Feedback events after "best" degrades (at round 500) until it holds under half the weight."""
    state, _ = _run(policy, 500, _degrading, seed)
    assert max(policy.weights(state), key=policy.weights(state).__getitem__) == "best"
    rng, world = random.Random(seed + 5), random.Random(seed + 6)
    abandoned, selections = None, []
    for t in range(500, 1_000):
        label = world.randrange(CLASSES)
        selection = policy.select(state, rng)
        answers = {m: _answer(world, _degrading(t)[m], label) for m in selection.models}
        policy.observe(state, label, answers, selection)
        selections.append(selection)
        if abandoned is None and policy.weights(state)["best"] < 0.5:
            abandoned = t - 500
    return abandoned, selections


# Over 200 seeds with the defaults (eta = 0.01, min_weight = 1e-3) "best" fell under half the
# weight after a median of 150 events for Exp3 (max 372) and 151 for Exp4 (max 208). Expected
# for Exp4: the gap after 500 rounds is 0.01 * 500 * (0.3 - 0.1) = 1.0 and closes at
# 0.01 * (0.8 - 0.3) = 0.005 a round, so the models are level after ~200 events.
@pytest.mark.parametrize("name", ["exp3", "exp4"])
@pytest.mark.parametrize("seed", range(5))
def test_moves_away_from_a_model_that_degrades(name: str, seed: int) -> None:
    abandoned, _ = _events_until_abandoned(make_policy(name, ["coin", "good", "best"]), seed)
    assert abandoned is not None and abandoned < 400


def test_exp3_stops_choosing_a_model_that_degrades() -> None:
    policy = make_policy("exp3", ["coin", "good", "best"], eta=0.05)
    _, selections = _events_until_abandoned(policy, seed=7)
    late = Counter(s.models[0] for s in selections[-200:])  # 300 to 500 events after
    assert late["best"] / 200 < 0.2
    assert late.most_common(1)[0][0] == "good"


def test_personalised_users_are_served_by_their_own_model() -> None:
    # Two groups: the labels of the "a" users are whatever model a says, and likewise for b.
    registry = StateRegistry(make_policy("exp3", ["a", "b"]), personalize=True)
    users = {f"a-user-{i}": "a" for i in range(4)} | {f"b-user-{i}": "b" for i in range(4)}
    rng, world = random.Random(11), random.Random(12)
    served: dict[str, list[str]] = {user: [] for user in users}
    for _ in range(400):
        for user, truth in users.items():
            outputs = {m: world.randrange(CLASSES) for m in ("a", "b")}
            selection = registry.select(rng, user=user)
            chosen = selection.models[0]
            registry.observe(outputs[truth], {chosen: outputs[chosen]}, selection, user=user)
            served[user].append(chosen)
    for user, truth in users.items():
        late = served[user][-100:]
        assert late.count(truth) / len(late) >= 0.8, user
    assert set(registry.users) == set(users)


def test_a_new_user_starts_from_a_copy_of_the_app_wide_state() -> None:
    registry = StateRegistry(make_policy("exp4", ["a", "b"], eta=0.1), personalize=True)
    everyone = Selection(("a", "b"), {"a": 1.0, "b": 1.0})
    for _ in range(20):
        registry.observe(1, {"a": 1, "b": 0}, everyone)  # anonymous feedback: app-wide only
    assert registry.users == {}
    app_weights = registry.policy.weights(registry.app)
    assert app_weights["a"] > 0.85
    # unseen: served from the app-wide state itself; first feedback makes their own copy
    assert registry.state_for("newcomer") is registry.app
    registry.observe(0, {"a": 1, "b": 0}, everyone, user="newcomer")
    own = registry.state_for("newcomer")
    assert own is not registry.app
    # their copy = app-wide state before this event, then one update: b right, a wrong
    expected = dict(registry.app.log_weights)  # the app took the same update
    assert own.log_weights == pytest.approx(expected)
