"""Control: when and where to compute. Pure logic with an injected clock; no sockets.

Callers cross one seam (`request`): an `InferenceRequest` through the controller's two doors,
`Controller.screen` and `Controller.submit`, and its answer back through a `Receiver`; they
read what it did in frozen records (`snapshots`, `Controller.statistics`). Applications and
flows see it through one narrow protocol (`doors.Serving`). Behind the seam, packages by who
decides what, each importing only those before it:

- `request`, `jobs`, `actions`, `engine`, `model_stats`, `policy`, `snapshots`: the records
  shared by all (the seam, the scheduler's jobs and actions, the contract with the runtime,
  the counts and their frozen copies);
- `estimates`: how long an action will take;
- `placement`: what is where (workers, models, queues, memory);
- `admission`: what is refused before it runs, and why;
- `scheduling`: which action runs where next;
- `models`: what is loaded where, and the runs that measure a model;
- `dispatch`: the decisions carried out through the engine, replies turned into answers;
- `cache`, `controller`, `doors`: the prediction cache, the doors, and their protocol.
"""
