"""Estimates: how long an action will take, and so how large a batch fits.

`profiles` keeps measured INFER durations per model and batch size (`LatencyEstimator`);
`durations` turns them, the measured LOADs and the round trip into the predicted seconds every
decision compares with a deadline (`Durations`); `batch_size` sizes a batch from them, or from
Clipper's AIMD before a model is profiled. Nothing here knows of queues or workers.
"""
