"""Where a generative model's sequences are: waiting for a slot, or running on a worker.

A generative model's worker keeps each running sequence's state (its key/value cache) between
steps, up to the model's `max_sequences` at once: the memory bound (vLLM's `max_num_seqs`).
Here is the controller's account of them: per worker, the sequences running there and the
step in flight; the sequences withdrawn since, to be stopped (their state freed) with the next
step. The sequences waiting for a slot are the model's queue (`ModelSlot.queue`), in
(priority, deadline) order: a slot that frees goes to the most urgent.
"""

from __future__ import annotations

from headway.control.actions import Dispatch
from headway.control.jobs import Sequence
from headway.repository import Generation


class SequenceSlots:
    """One generative model's running sequences, by worker (see the module docstring)."""

    def __init__(self, key: str, generation: Generation) -> None:
        self.key = key
        self.generation = generation
        #: The sequences each worker holds (running, or starting in the step in flight).
        self.running: dict[int, list[Sequence]] = {}
        #: The step in flight on each worker: a model's steps on a worker run one at a time,
        #: each one's parts deciding the next.
        self.stepping: dict[int, Dispatch] = {}
        #: When the last step on each worker ended (its parts then go to their receivers
        #: before the next step is sent).
        self.ended: dict[int, float] = {}
        #: Sequences withdrawn while running, by worker: stopped with the next step there.
        self.stops: dict[int, list[int]] = {}

    @property
    def capacity(self) -> int:
        """Sequences one worker may hold at once (`Generation.max_sequences`)."""
        return self.generation.max_sequences

    def on(self, worker: int) -> list[Sequence]:
        """The sequences `worker` holds (a list kept here: changed in place)."""
        held = self.running.get(worker)
        if held is None:
            held = self.running[worker] = []
        return held

    def total(self) -> int:
        """Sequences held on every worker."""
        return sum(len(held) for held in self.running.values())

    def start(self, worker: int, sequence: Sequence) -> None:
        sequence.worker = worker
        self.on(worker).append(sequence)

    def end(self, sequence: Sequence) -> None:
        """`sequence` ended (its last part, an error, or withdrawn): its slot is free."""
        held = self.running.get(sequence.worker)
        if held is not None and sequence in held:
            held.remove(sequence)

    def withdraw(self, sequence: Sequence) -> None:
        """Stop `sequence` at its worker's next step; its slot is free from now."""
        if sequence.worker >= 0 and not sequence.stopping:
            sequence.stopping = True
            self.end(sequence)
            self.stops.setdefault(sequence.worker, []).append(sequence.number)

    def take_stops(self, worker: int) -> list[int]:
        return self.stops.pop(worker, [])

    def lose(self, worker: int) -> list[Sequence]:
        """`worker` died: the sequences it held (their state is gone with it)."""
        self.stepping.pop(worker, None)
        self.stops.pop(worker, None)
        self.ended.pop(worker, None)
        return self.running.pop(worker, [])

    def busy(self, worker: int) -> bool:
        """Whether `worker` has a step of this model in flight."""
        return worker in self.stepping
