"""What the server acknowledged survives `kill -9`: feedback events and what they taught.

A real server, an Exp3 application with per-user state over two digits classifiers; feedback
events are sent one after another, each acknowledged (200) before the next, and the server is
killed with SIGKILL right after the last answer: no shutdown, no flush. The restarted server
must count every acknowledged event and hold the weights the first one reported.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from sklearn.naive_bayes import GaussianNB

from tests.integration import models
from tests.integration.models import AppClient, serve_apps, warm_models

pytestmark = pytest.mark.integration

EVENTS = 49
_, _, ROWS, LABELS = models.digits_split()


def test_acknowledged_feedback_survives_kill_9(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("durable-repository")
    models.digits_classifier(root, "digits-nb", GaussianNB())
    models.digits_classifier(root, "digits-nb-shifted", GaussianNB(), shift=3)
    tmp = tmp_path_factory.mktemp("durable")
    apps = {
        "learner": {
            "models": ["digits-nb", "digits-nb-shifted"],
            "policy": "exp3",
            "eta": 0.2,
            "personalize": True,
        }
    }

    def snapshot(api: AppClient) -> dict[str, Any]:
        return {
            "feedback": api.call("GET", "/apps/learner")["statistics"]["feedback"],
            "weights": api.weights("learner"),
            "ann": api.call("GET", "/apps/learner/users/ann")["weights"],
        }

    server = serve_apps(root, tmp, apps, "durable-1").start()
    try:
        warm_models(server.url, ["digits-nb", "digits-nb-shifted"])
        api = AppClient(server.url)
        for i in range(EVENTS):
            user = "ann" if i % 2 else "bob"
            answer = api.predict("learner", ROWS[i], user)
            api.feedback("learner", answer["query_id"], int(LABELS[i]))
        before = snapshot(api)
        api.close()
        assert server.process is not None
        server.process.kill()  # SIGKILL: nothing runs after the last acknowledgement
        server.process.wait()
    finally:
        server.stop()
    assert before["feedback"] == EVENTS
    with sqlite3.connect(tmp / "state.db") as db:
        logged = db.execute("SELECT COUNT(*) FROM feedback WHERE app='learner'").fetchone()[0]
    assert logged == EVENTS

    with serve_apps(root, tmp, apps, "durable-2") as again:
        api = AppClient(again.url)
        after = snapshot(api)
        api.close()
    assert after["feedback"] == EVENTS
    assert after["weights"] == pytest.approx(before["weights"])
    assert after["ann"] == pytest.approx(before["ann"])
