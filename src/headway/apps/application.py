"""One application serving queries: select models, ask them, answer at the deadline, learn.

Clipper's selection layer over the controller: what arrived by the application's deadline is
combined, late answers are not waited for (nor cancelled), and every answered query is logged
so that feedback can be joined with what it judges. docs/selection.md describes the behaviour.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from headway.apps.config import AppConfig
from headway.apps.records import Latencies, ModelCalls, QueryLog, QueryRecord
from headway.apps.tensors import input_digest, model_inputs, selection_output
from headway.control.doors import Serving
from headway.control.models.states import READY, ModelState
from headway.control.request import InferenceRequest
from headway.errors import HeadwayError, InvalidInput, ModelError, ModelNotFound
from headway.selection import NO_ANSWER, StateRegistry
from headway.selection.losses import plain

log = logging.getLogger("headway.apps")


class UnknownQuery(ModelNotFound):
    """Feedback names a query id that the query log does not hold (any more)."""


@dataclass(frozen=True)
class FeedbackResult:
    query_id: str | None
    user: str | None
    output: Any
    losses: dict[str, float]
    updates: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SelectionApplication:
    """An application that selects among its models, over a controller (a flow app is
    `flows.serving.FlowApplication`); its learned state is `registry` (a StateRegistry).

    `predict` asks the policy which models to query, calls each through the controller at once,
    and waits with `asyncio.wait` until the application's deadline (`slo_ms` after arrival). What
    arrived by then is combined by the selection layer; with nothing good enough, the default output
    is answered, flagged, with the reason. A model call that misses the deadline is *not*
    cancelled: it finishes in the background under the model's own deadline (so its answer still
    lands in the prediction cache for models with `cache: true`), and its lateness is counted.

    A model call's deadline is the application's where the model shares a worker with other
    models: the scheduler orders it by the app's deadline, and refuses at once a call that cannot
    make it, which would otherwise hold up the other models' calls behind it. Where the model has
    its workers to itself, the call gets the later of the model's `slo_ms` and the application's:
    being late for this query wastes nobody's time, and its answer fills the cache.

    Every answered query is kept in a bounded query log (query id -> selection, answers in time,
    output, user, input digest) so that feedback can be joined with what it judges, by query id or
    by the same input and user. Feedback for a query no longer in the log is judged against the
    models' answers now (repeats are cheap: they come from the cache)."""

    def __init__(
        self,
        config: AppConfig,
        controller: Serving,
        registry: StateRegistry | None = None,
        *,
        rng: random.Random | None = None,
        query_log: QueryLog | None = None,
        late: set[asyncio.Task[Any]] | None = None,
    ) -> None:
        self.config = config
        self.controller = controller
        self.registry = registry or StateRegistry(
            config.build_policy(), personalize=config.personalize
        )
        self.rng = rng or random.Random()
        self.log = query_log if query_log is not None else QueryLog()
        self.late = late if late is not None else set()  # keeps late calls referenced
        self.refs = {ref.key: ref for ref in config.refs}
        self.calls = {model: ModelCalls() for model in self.refs}
        self.latency = Latencies()
        self.dirty = False
        self.dirty_users: set[str] = set()
        self._serve_versions()

    @property
    def name(self) -> str:
        return self.config.name

    # -- queries -------------------------------------------------------------------------------
    async def predict(
        self, value: Any, user: str | None = None, spans: Any = None
    ) -> dict[str, Any]:
        """Answer one input row by the deadline (see `SelectionApplication`). `spans`, when the
        transport traces the query, takes a span per model call (`api.tracing.Trace.span`)."""
        started = self.controller.clock.now()
        return await self._answer(value, self._convert(value), user, started, spans)

    async def predict_many(
        self, values: list[Any], user: str | None = None, spans: Any = None
    ) -> list[dict[str, Any]]:
        """One answer per input row; all rows are checked before any model is called."""
        started = self.controller.clock.now()
        prepared = [self._convert(value) for value in values]
        answers = await asyncio.gather(
            *(
                self._answer(v, b, user, started, spans)
                for v, b in zip(values, prepared, strict=True)
            )
        )
        return list(answers)

    def ready_models(self) -> list[str]:
        """Linked models that the controller serves now: `name` its default version, and
        `name@version` exactly that version (never another one in its place)."""
        return list(self._ready())

    def _ready(self) -> dict[str, ModelState]:
        ready = {}
        for key in self.refs:
            model = self._served(key)
            if model is not None and model.state == READY:
                ready[key] = model
        return ready

    def _served(self, key: str) -> ModelState | None:
        """The controller's state for a linked model (its pinned version, when pinned)."""
        ref = self.refs.get(key)
        if ref is None:
            return None
        if ref.version is None:
            return self.controller.served(ref.name)
        return self.controller.served(ref.name, ref.version)

    def _serve_versions(self) -> None:
        """Ask the controller to serve each pinned version now (registered and loading), so
        that it is ready before the first query rather than on it."""
        for ref in self.refs.values():
            if ref.version is not None:
                try:
                    self.controller.model(ref.name, str(ref.version))
                except HeadwayError as exc:
                    log.warning(
                        "app %s: model %s cannot be served: %s", self.name, ref.key, _message(exc)
                    )

    def _convert(self, value: Any) -> dict[str, dict[str, np.ndarray]]:
        """The input as each ready model takes it; InvalidInput if it does not fit one of them."""
        return {
            key: model_inputs(key, value, model.config.inputs)
            for key, model in self._ready().items()
        }

    async def _answer(
        self,
        value: Any,
        batches: dict[str, dict[str, np.ndarray]],
        user: str | None,
        started: float,
        spans: Any = None,
    ) -> dict[str, Any]:
        """The decision for one converted row; the deadline counts from `started` (arrival)."""
        clock = self.controller.clock
        selection = self.registry.select(self.rng, user=user, ready=batches)
        answers, errors, late = await self._ask(
            selection.models, batches, started + self.config.slo_ms / 1000.0, spans
        )
        if (
            errors
            and not answers
            and not late
            and all(isinstance(e, InvalidInput) for e in errors.values())
        ):
            raise next(iter(errors.values()))  # the input itself is wrong: a 400, not a default
        try:
            decision = self.registry.combine(answers, selection, user=user)
        except ValueError as exc:  # e.g. a "regression" app whose models answer no numbers
            raise ModelError(f"app {self.name!r}: cannot combine the answers: {exc}") from None
        self.dirty = True
        query_id = uuid.uuid4().hex
        output = plain(decision.output)
        self.log.add(query_id, QueryRecord(selection, answers, output, user, input_digest(value)))
        self.latency.observe(clock.now() - started)
        response: dict[str, Any] = {
            "query_id": query_id,
            "output": output,
            "default": decision.default,
            "confidence": decision.confidence,
            "models": list(decision.models),
        }
        if decision.missing:
            response["missing"] = list(decision.missing)
        if decision.default:
            explanation = decision.explanation
            if decision.reason == NO_ANSWER and errors:
                detail = "; ".join(f"{m}: {_message(e)}" for m, e in errors.items())
                explanation = (
                    f"{explanation} ({detail})" if late else f"no model answered ({detail})"
                )
            response["default_explanation"] = explanation
        return response

    async def _ask(
        self,
        models: Iterable[str],
        batches: Mapping[str, dict[str, np.ndarray]],
        deadline: float | None,
        spans: Any = None,
    ) -> tuple[dict[str, Any], dict[str, BaseException], list[str]]:
        """Call the models at once; (answers in time, errors, late models) at the deadline."""
        tasks = {m: asyncio.ensure_future(self._call(m, batches[m], spans)) for m in models}
        if not tasks:
            return {}, {}, []
        timeout = None if deadline is None else max(0.0, deadline - self.controller.clock.now())
        done, _ = await asyncio.wait(tasks.values(), timeout=timeout)
        answers: dict[str, Any] = {}
        errors: dict[str, BaseException] = {}
        late: list[str] = []
        for model, task in tasks.items():
            if task not in done or task.cancelled():
                late.append(model)
                self.calls[model].late += 1
                self.late.add(task)
                task.add_done_callback(self._late_done)
            elif (error := task.exception()) is not None:
                errors[model] = error
            else:
                self.calls[model].in_time += 1
                answers[model] = task.result()
        return answers, errors, late

    async def _call(self, model: str, inputs: dict[str, np.ndarray], spans: Any = None) -> Any:
        ref = self.refs[model]
        calls = self.calls[model]
        clock = self.controller.clock
        started = clock.now()
        outcome = "failed"
        try:
            served = self.controller.model(ref.name)
            timeout = self._call_timeout(ref.name, served.config.slo_ms)
            version = None if ref.version is None else str(ref.version)
            request = InferenceRequest(ref.name, version=version, timeout=timeout, inputs=inputs)
            prediction = await self.controller.infer(request)
            answer = selection_output(prediction.outputs, self.config.task)
            outcome = "answered"
        except Exception:
            calls.failed += 1
            raise
        finally:
            if spans is not None:  # a late model's span ends when it answers, after the query's
                spans.span(
                    f"model {model}", started, clock.now(),
                    **{"headway.model": ref.name, "outcome": outcome},
                )  # fmt: skip
        calls.latency.observe(clock.now() - started)
        return answer

    def _call_timeout(self, model: str, model_slo_ms: float) -> float:
        """Seconds a call of `model` may take: the app's SLO, where the model shares a worker
        with other models (a run that cannot meet the app's deadline is refused at once, not
        run late while their calls wait behind it); else the longer of the app's SLO and the
        model's, so that a straggler's late answer still fills the cache."""
        if self.controller.shares_workers(model):
            return self.config.slo_ms / 1000.0
        return max(model_slo_ms, self.config.slo_ms) / 1000.0

    def _late_done(self, task: asyncio.Task[Any]) -> None:
        self.late.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.debug("app %s: a late model call failed: %s", self.name, _message(error))

    # -- feedback ------------------------------------------------------------------------------
    async def feedback(
        self,
        label: Any,
        *,
        query_id: str | None = None,
        value: Any = None,
        user: str | None = None,
    ) -> FeedbackResult:
        """Learn from a query's true label, found by query id, else by input and user."""
        record = self.log.get(query_id) if query_id is not None else None
        if record is None and value is None:
            raise UnknownQuery(
                f"app {self.name!r}: unknown query id {query_id!r} (the last "
                f"{self.log.capacity} queries are kept); send the input instead"
            )
        if record is None:
            found = self.log.find(input_digest(value), user)
            if found is not None:
                query_id, record = found
            else:
                query_id, record = None, await self._replay(value, user)
        user = user if user is not None else record.user
        linked = set(self.registry.policy.models)
        selection = record.selection.only(linked)
        answers = {m: a for m, a in record.answers.items() if m in linked}
        try:
            losses = self.registry.observe(label, answers, selection, user=user)
        except (ValueError, TypeError) as exc:
            raise InvalidInput(f"app {self.name!r}: label {label!r:.80}: {exc}") from None
        self.dirty = True
        if user is not None and self.registry.personalizing:
            self.dirty_users.add(user)
        updates = self.registry.state_for(user).updates
        return FeedbackResult(query_id, user, record.output, losses, updates)

    async def _replay(self, value: Any, user: str | None) -> QueryRecord:
        """Judge an input whose query is not in the log: ask the policy's models now."""
        batches = self._convert(value)
        state = self.registry.state_for(user)
        selection = self.registry.draw(self.rng, user=user, ready=batches)
        answers, _, _ = await self._ask(selection.models, batches, None)
        output = plain(self.registry.policy.combine(state, answers, selection).output)
        return QueryRecord(selection, answers, output, user, input_digest(value))

    # -- changes and reporting -----------------------------------------------------------------
    def add_model(self, model: str) -> None:
        """Link a model at run time: it starts at the mean weight (fixed: with no traffic)."""
        self.config = self.config.with_model(model)
        self.refs = {ref.key: ref for ref in self.config.refs}
        self.calls.setdefault(model, ModelCalls())
        self.registry.add_model(model)
        self._serve_versions()
        self.mark_all_dirty()

    def mark_all_dirty(self) -> None:
        self.dirty = True
        self.dirty_users.update(self.registry.users)

    def take_dirty(self) -> dict[str, dict[str, Any]]:
        """The state rows changed since the last call: `''` (app-wide, with statistics) and users."""
        rows: dict[str, dict[str, Any]] = {}
        if self.dirty:
            rows[""] = {
                "state": self.registry.app.to_dict(),
                "stats": self.registry.stats.to_dict(),
            }
        for user in self.dirty_users:
            state = self.registry.users.get(user)
            if state is not None:
                rows[user] = state.to_dict()
        self.dirty, self.dirty_users = False, set()
        return rows

    def statistics(self) -> dict[str, Any]:
        """Per model: weight, selection share, accuracy, calls; per app: defaults and latency."""
        stats = self.registry.statistics()
        models = []
        for model in stats.models:
            calls = self.calls.get(model.model) or ModelCalls()
            served = self._served(model.model)
            models.append({
                **asdict(model),
                "state": served.state if served is not None else "UNKNOWN",
                "in_time": calls.in_time,
                "late": calls.late,
                "failed": calls.failed,
                "latency": calls.latency.summary(),
            })  # fmt: skip
        return {
            "selections": stats.selections,
            "decisions": stats.decisions,
            "defaults": stats.defaults,
            "default_rate": stats.default_rate,
            "default_reasons": stats.default_reasons,
            "feedback": stats.feedback,
            "users": len(self.registry.users),
            "latency": self.latency.summary(),
            "models": models,
        }

    def user_view(self, user: str) -> dict[str, Any]:
        """The state that serves `user`: their own once they have given feedback."""
        state = self.registry.state_for(user)
        return {
            "app": self.name,
            "user": user,
            "personalized": self.registry.personalizing and user in self.registry.users,
            "weights": self.registry.policy.weights(state),
            "updates": state.updates,
        }


def _message(error: BaseException) -> str:
    return error.message if isinstance(error, HeadwayError) else f"{type(error).__name__}: {error}"
