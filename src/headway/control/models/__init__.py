"""Models: what is loaded where. Each served model's state (`states`), registration, loads,
unloads, replicas and the workers' comings and goings (`lifecycle`), the warm-up runs and
probes that measure a model through the scheduler (`measuring`), and a request's tensors
checked against its model's signature (`validate`).
"""
