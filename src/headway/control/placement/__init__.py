"""Placement: what is where. The workers and models the scheduler knows, which worker holds or
loads which model within its memory share (`memory`), each worker's timeline of actions in
flight, and each model's queue of jobs ordered by deadline (`queues`). State, not decisions:
admission reads it to refuse, the scheduler changes it as it decides (`slots.Placement`).
"""
