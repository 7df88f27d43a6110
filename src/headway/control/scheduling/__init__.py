"""Scheduling: which action runs where next.

`scheduler.Scheduler` ties it together on each poll: drops what admission says can no longer
make it, then gives each available worker its next action: a queued LOAD or UNLOAD, the batch
of its most urgent model (`choices`, which also turns a choice into its action), or a LOAD of
a queued model no worker holds (`demand`) or one to measure (`probes`). `queued_work` keeps the
drop times and cold models in step with the queues; `outcomes` learns from each ended action.
"""
