"""The plan in force as `GET /apps/{app}` shows it for a flow app (`apps.registry.unsized`)."""

from __future__ import annotations

from headway.apps.registry import unsized


def test_a_planned_flow_stage_the_app_did_not_size_is_shown_not_applied() -> None:
    stages = [
        {"stage": "m", "model": "m", "flow_stage": False, "applied": ["replicas"],
         "not_applied": {}},
        {"stage": "w", "model": "(flow f stage w)", "flow_stage": True, "applied": ["replicas"],
         "not_applied": {}},
        {"stage": "v", "model": "(flow f stage v)", "flow_stage": True, "applied": ["replicas"],
         "not_applied": {}},
    ]  # fmt: skip
    shown = unsized({"app": "a", "stages": stages}, {"(flow f stage w)"})["stages"]
    assert [s["applied"] for s in shown] == [["replicas"], ["replicas"], []]
    assert "no worker stage planned under this name" in shown[2]["not_applied"]["replicas"]
