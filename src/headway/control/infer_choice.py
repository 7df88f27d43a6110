"""The next INFER on a worker: which loaded model, whether to wait for more rows, which batch.

The model is the one whose head request is the most urgent among those the worker holds. The
batch starts with the queue's head (its most urgent request) and takes requests in queue
order up to the target size: from the profiles (`largest_batch`) under Headway's policy, AIMD's
limit under the baseline's. A request further back with an earlier deadline (a lower priority
level, or FIFO order) joins only if the bigger batch still meets that deadline.
"""

from __future__ import annotations

from collections.abc import Mapping

from headway.control.admission.drops import latest_start
from headway.control.batching import largest_batch
from headway.control.jobs import Job
from headway.control.predictions import Predictions
from headway.control.scheduling_policy import SchedulingPolicy
from headway.control.slots import ModelSlot, WorkerSlot


def most_urgent(
    worker: WorkerSlot, models: Mapping[str, ModelSlot], waiting: set[str]
) -> ModelSlot | None:
    """The model on `worker` with queued requests whose head request is the most urgent."""
    best: ModelSlot | None = None
    best_key: tuple[int, float, int] | None = None
    candidates = (
        waiting & worker.models
        if len(worker.models) > len(waiting)
        else {k for k in worker.models if k in waiting}
    )
    for key in candidates:
        model = models[key]
        head_key = model.queue.head_key()
        if head_key is not None and (best_key is None or head_key < best_key):
            best, best_key = model, head_key
    return best


def full_batch_ahead(
    worker: WorkerSlot,
    models: Mapping[str, ModelSlot],
    waiting: set[str],
    predictions: Predictions,
) -> ModelSlot | None:
    """The model whose next batch `worker`, busy with one action, should be sent before it is
    free: its most urgent model, when a full batch of it is queued, it is profiled, and that
    batch is predicted to meet its head's deadline starting when the worker is free. Waiting
    would add nothing to a full batch, and the worker need not wait for the frontend's turn."""
    if len(worker.inflight) != 1 or worker.control or not worker.alive:
        return None
    model = most_urgent(worker, models, waiting)
    if model is None or model.queue.rows < model.max_batch:
        return None
    if not predictions.estimator.profiled(model.key):
        return None
    service = predictions.service_time(model.key, model.max_batch)
    head = model.queue.peek()
    if head is None or service is None or worker.free_at + service > head.deadline:
        return None
    return model


def hold_until(model: ModelSlot, now: float, predictions: Predictions) -> float | None:
    """When to look again if `model`'s small batch should wait for more rows (its
    `batch_delay`), else None: never past the moment a queued request would have to be dropped
    (the queue is short here: fewer than max_batch rows)."""
    head = model.queue.peek()
    if head is None or not model.batch_delay or model.queue.rows >= model.max_batch:
        return None
    ready_at = head.arrival + model.batch_delay
    if now < ready_at and ready_at < min(latest_start(predictions, model, r) for r in model.queue):
        return ready_at
    return None


def take_batch(
    model: ModelSlot, start: float, *, predictions: Predictions, policy: SchedulingPolicy
) -> tuple[list[Job], int]:
    """Pop the batch to run at `start` from `model`'s (non-empty) queue: (requests, rows)."""
    head = model.queue.peek()
    assert head is not None
    if policy.profile_batching:
        target = largest_batch(
            predictions.estimator,
            model.key,
            budget=head.deadline - start,
            cap=min(model.max_batch, model.queue.rows),  # no batch is larger than the queue
            aimd=model.aimd,
            overhead=predictions.overhead,
        )
    else:
        target = min(model.max_batch, model.aimd.size)
    requests = [model.queue.pop()]
    rows = requests[0].rows
    deadline = head.deadline
    while model.queue:
        nxt = model.queue.peek()
        assert nxt is not None
        if rows + nxt.rows > target:
            break
        if policy.early_reject and nxt.deadline < deadline:
            service = predictions.service_time(model.key, rows + nxt.rows)
            if service is not None and service > nxt.deadline - start:
                break
            deadline = nxt.deadline
        requests.append(model.queue.pop())
        rows += nxt.rows
    return requests, rows


def start_alone(
    models: Mapping[str, ModelSlot],
    request: Job,
    now: float,
    predictions: Predictions,
    workers: Mapping[int, WorkerSlot],
) -> tuple[ModelSlot, WorkerSlot, float] | None:
    """Where to run `request` alone at once, and its predicted service time: when its model
    has nothing queued and is profiled, has been idle for at least half as long as the
    request takes to run, a worker holding it is idle, and it is predicted to meet its
    deadline; else None (it goes through the queue). A model that finished a batch more
    recently than that is likely in a wave of requests (clients answered together send again
    together): those are queued, to be batched. (Half: one client's own turnaround, answer to
    next request, is about one run of a small model.) So is a request that may have arrived
    no later than the last one started alone (`Job.arrival`: read in the same turn of
    the loop): both were waiting at once. Reading one request can take longer than half a
    run, so the idle time alone would let each of a turn's requests run alone, one run each,
    and never batch them, once the size-1 estimate is low (measured at low load)."""
    model = models.get(request.model)
    if model is None or model.queue or not model.replicas:
        return None
    if request.arrival <= model.alone_since:
        return None
    if not predictions.estimator.profiled(model.key):
        return None
    service = predictions.service_time(model.key, request.rows)
    if service is None or now + service > request.deadline:
        return None  # the queue's path says why
    if now - model.finished_at < service / 2:
        return None
    for worker_id in sorted(model.replicas):
        worker = workers.get(worker_id)
        if worker is not None and worker.alive and not worker.inflight and not worker.control:
            return model, worker, service
    return None
