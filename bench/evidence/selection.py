"""Clipper's model-selection experiments on real models, through Headway's `SelectionApplication`.

Each run serves a stream of queries through a real `headway.apps.SelectionApplication` (`virtual.py`:
its selection, deadline and feedback code, unchanged, in virtual time) over members trained
here (`members.py`), and sends the true label back as feedback after every answer, as
Clipper's evaluation did. Accuracy is the share of answers that were right when given
(before their own feedback was learned).

- `ensemble`: Exp4 over each pool on each data set vs the best single member of the pool on
  the same queries, per seed.
- `recovery`: the best of three members starts answering at random mid-run; the selected
  share (Exp3: share of the last 100 choices; Exp4: weight share) and accuracy over events.
- `personal`: two groups of users, one sending digits as they are and one mirrored; a
  specialist per group and one model trained on both; selection per user vs for everyone.
- `stragglers`: ensembles of 2 to 16 members whose calls take heavy-tailed times; P99 latency,
  accuracy and members missing with the deadline (answer at the SLO with what arrived) and
  without it (wait for every member).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
from bench.evidence import members as pools
from bench.evidence.virtual import StubController, application, run


def _answers(table: dict[str, np.ndarray]) -> Any:
    return lambda model, row: int(table[model][row])


async def _serve(
    app: Any, items: Sequence[int], labels: Sequence[int], users: Sequence[Any]
) -> list[dict[str, Any]]:
    """One query and its feedback per item; the answers as given."""
    out = []
    for item, label, user in zip(items, labels, users, strict=True):
        answer = await app.predict([float(item)], user)
        await app.feedback(int(label), query_id=answer["query_id"])
        out.append(answer)
    return out


# -- (1) Exp4 against the best member ---------------------------------------------------------


def ensemble(dataset: str, kind: str, seed: int, eta: float | None = None) -> dict[str, Any]:
    x, y = pools.dataset(dataset)
    fit, stream = pools.split(y, 0.5, seed)
    members = pools.pool(kind, x[fit], y[fit], seed)
    order = np.random.default_rng(seed).permutation(stream)
    table = {m.name: m.predict(x[order]) for m in members}
    labels = y[order]
    controller = StubController(list(table), _answers(table))
    options = {} if eta is None else {"eta": eta}
    app = application(controller, seed, models=list(table), policy="exp4", **options)
    answers = run(_serve(app, range(len(order)), labels.tolist(), [None] * len(order)))
    exp4 = float(np.mean([a["output"] == t for a, t in zip(answers, labels, strict=True)]))
    accuracy = {m: float(np.mean(p == labels)) for m, p in table.items()}
    votes = np.stack(list(table.values()))
    agree = float(np.mean(votes == labels[None, :]))
    # how differently the members err: the share of rows where at least one member is wrong
    # that not all of them get wrong
    wrong = votes != labels[None, :]
    some = wrong.any(axis=0)
    diverse = float(np.mean(~wrong.all(axis=0)[some])) if some.any() else 0.0
    best = max(accuracy.values())
    return {"dataset": dataset, "pool": kind, "seed": seed, "queries": len(order),
            "exp4": exp4, "members": accuracy, "best": best, "margin": exp4 - best,
            "mean_member": agree, "errs_apart": diverse}  # fmt: skip


# -- (2) recovery from a degrading model ------------------------------------------------------


def recovery(policy: str, eta: float, seed: int, events: int, at: int) -> dict[str, Any]:
    x, y = pools.dataset("digits")
    fit, stream = pools.split(y, 0.4, seed)
    chosen = [pools.family(f, seed).fit(x[fit], y[fit]) for f in ("logreg", "bayes", "tree")]
    names = ["logreg", "bayes", "tree"]
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.permutation(stream) for _ in range(events // len(stream) + 1)])
    rows = rows[:events]
    table = {
        n: np.asarray(m.predict(x[rows]), dtype=np.int64)
        for n, m in zip(names, chosen, strict=True)
    }
    noise = np.random.default_rng([seed, 7]).integers(0, 10, size=events)
    table["logreg"] = np.where(np.arange(events) >= at, noise, table["logreg"])  # degraded
    labels = y[rows]
    controller = StubController(names, _answers(table))
    app = application(controller, seed, models=names, policy=policy, eta=eta)

    async def serve() -> tuple[list[dict[str, Any]], list[dict[str, float]]]:
        answers, shares = [], []
        for item, label in enumerate(labels.tolist()):
            answer = await app.predict([float(item)])
            await app.feedback(int(label), query_id=answer["query_id"])
            answers.append(answer)
            weights = {n: float(np.exp(v)) for n, v in app.registry.app.log_weights.items()}
            total = sum(weights.values())
            shares.append({n: w / total for n, w in weights.items()})
        return answers, shares

    answers, weights = run(serve())
    correct = [int(a["output"] == t) for a, t in zip(answers, labels, strict=True)]
    if policy == "exp3":  # the chosen model, one-hot
        share = {n: [float(a["models"] == [n]) for a in answers] for n in names}
    else:
        share = {n: [w[n] for w in weights] for n in names}
    accuracy = {n: float(np.mean(table[n][:at] == labels[:at])) for n in names}
    return {"policy": policy, "eta": eta, "seed": seed, "events": events, "at": at,
            "share": share, "correct": correct, "accuracy_before": accuracy}  # fmt: skip


def rolling(values: Sequence[float], window: int) -> np.ndarray:
    """The mean of each value and the `window - 1` before it (fewer at the start)."""
    data = np.asarray(values, dtype=np.float64)
    sums = np.cumsum(np.concatenate([[0.0], data]))
    ends = np.arange(1, len(data) + 1)
    starts = np.maximum(0, ends - window)
    return (sums[ends] - sums[starts]) / (ends - starts)


def recovered_after(share: Sequence[float], at: int, window: int, below: float = 0.5) -> int | None:
    """Feedback events after `at` until the degraded model's (rolling) share is below `below`."""
    smooth = rolling(share, window) if window > 1 else np.asarray(share)
    after = np.nonzero(smooth[at:] < below)[0]
    return int(after[0]) if len(after) else None


# -- (3) personalisation ----------------------------------------------------------------------


def personal(
    policy: str, per_user: bool, eta: float, seed: int, events: int, users: int = 20
) -> dict[str, Any]:
    x, y = pools.dataset("digits")
    mirrored = x.reshape(-1, 8, 8)[:, :, ::-1].reshape(len(x), -1)
    fit, stream = pools.split(y, 0.5, seed)
    specialist_a = pools.family("logreg", seed).fit(x[fit], y[fit])
    specialist_b = pools.family("logreg", seed).fit(mirrored[fit], y[fit])
    both = pools.family("logreg", seed).fit(
        np.vstack([x[fit], mirrored[fit]]), np.concatenate([y[fit], y[fit]])
    )
    models = {"plain-digits": specialist_a, "mirrored-digits": specialist_b, "both": both}
    # item 2*i: stream row i as it is; 2*i+1: mirrored
    inputs = np.empty((2 * len(stream), x.shape[1]))
    inputs[0::2], inputs[1::2] = x[stream], mirrored[stream]
    table = {n: np.asarray(m.predict(inputs), dtype=np.int64) for n, m in models.items()}
    rng = np.random.default_rng([seed, 3])
    who = rng.integers(0, users, size=events)
    rows = rng.integers(0, len(stream), size=events)
    items = 2 * rows + (who % 2)  # even users send digits as they are, odd ones mirrored
    labels = y[stream][rows]
    controller = StubController(list(models), _answers(table))
    app = application(controller, seed, models=list(models), policy=policy, eta=eta,
                      personalize=per_user)  # fmt: skip
    answers = run(_serve(app, items.tolist(), labels.tolist(), [f"user{u}" for u in who]))
    correct = [int(a["output"] == t) for a, t in zip(answers, labels, strict=True)]
    group_accuracy = {
        n: [
            float(np.mean(table[n][0::2] == y[stream])),
            float(np.mean(table[n][1::2] == y[stream])),
        ]
        for n in models
    }
    return {"policy": policy, "per_user": per_user, "eta": eta, "seed": seed, "events": events,
            "users": users, "correct": correct, "model_accuracy_by_group": group_accuracy}  # fmt: skip


# -- (4) stragglers ---------------------------------------------------------------------------

#: A member's call takes FLOOR + SCALE * Lomax(ALPHA) seconds: heavy-tailed (a Pareto tail of
#: index 2), median ~2.8 ms, P(over 20 ms) = 1%: one member alone has its P99 at the SLO.
FLOOR, SCALE, ALPHA = 0.002, 0.002, 2.0
SLO_MS = 20.0


def latency_draw(rng: random.Random) -> float:
    return FLOOR + SCALE * ((1.0 - rng.random()) ** (-1.0 / ALPHA) - 1.0)


def stragglers(
    size: int, deadline: bool, seed: int, queries: int, slo_ms: float = SLO_MS
) -> dict[str, Any]:
    x, y = pools.dataset("digits")
    fit, stream = pools.split(y, 0.5, seed)
    members: list[Any] = []
    for kind in ("bagged", "subspace", "mixed", "bagged"):  # 20 members, the first `size` used
        members += pools.pool(kind, x[fit], y[fit], seed * 10 + len(members))
    members = members[:size]
    order = np.random.default_rng(seed).permutation(np.resize(stream, queries))
    table = {f"m{i:02d}-{m.name}": m.predict(x[order]) for i, m in enumerate(members)}
    labels = y[order]
    rng = random.Random(seed)
    controller = StubController(list(table), _answers(table), lambda _m: latency_draw(rng))
    slo = slo_ms if deadline else 1e7  # without: wait for every member
    app = application(controller, seed, models=list(table), policy="exp4", slo_ms=slo)

    async def serve() -> tuple[list[dict[str, Any]], list[float]]:
        import asyncio

        loop = asyncio.get_running_loop()
        answers, latencies = [], []
        for item, label in enumerate(labels.tolist()):
            started = loop.time()
            answer = await app.predict([float(item)])
            latencies.append(loop.time() - started)
            await app.feedback(int(label), query_id=answer["query_id"])
            answers.append(answer)
        await asyncio.sleep(1.0)  # let the late calls finish
        return answers, latencies

    answers, latencies = run(serve())
    correct = [a["output"] == t and not a["default"] for a, t in zip(answers, labels, strict=True)]
    missing = [len(a.get("missing", [])) / size for a in answers]
    ms = np.asarray(latencies) * 1e3
    return {"size": size, "deadline": deadline, "slo_ms": slo_ms if deadline else None,
            "seed": seed, "queries": queries,
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "accuracy": float(np.mean(correct)), "missing": float(np.mean(missing)),
            "defaults": int(sum(a["default"] for a in answers))}  # fmt: skip


def median_spread(values: Sequence[float]) -> dict[str, float]:
    data = sorted(values)
    return {"median": statistics.median(data), "min": data[0], "max": data[-1], "n": len(data)}
