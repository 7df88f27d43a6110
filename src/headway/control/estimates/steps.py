"""How long a generative model's step will take, from a profile of its measured steps.

A step advances every sequence in it by one part: its cost grows with how many sequences it
holds (the batched layers), with their total length (attention reads each one's cache), and
with the inputs of the sequences it starts (their prefill). So a step's duration is predicted
as a line in those three, `fixed + per_sequence * n + per_unit * context + per_prefill *
prefill`, fitted by least squares to the model's last measured steps (Orca and vLLM size a
step the same way, from the batch and the tokens in it). A share of the errors is added, so
that a prediction is rarely below what the step takes: the steps after a first part are what a
stream's per-part target is held to, and admission rests on them. The share is taken over the
window and over its last few steps alone, whichever is higher: when the machine slows (a
neighbour's burst), the last steps say so long before they are a share of the window, and a
sequence admitted on the window's older, faster steps would wait past its first part's
deadline (Clockwork's estimates follow the last few runs for the same reason).

A sum of many steps (a wait for a slot) is predicted from the typical step instead
(`StepProfile.typical`: the line times the mean of the last few ratios, so it follows the
machine too): a stall may hit any one step, not each, and the sum of many steps' tail
estimates refuses what would have been served. The tail of such a wait is admission's
margin on the whole of it (`scheduling.steps`), never less than the window's spread
(`StepProfile.spread`: its high percentile over the typical step).
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: Measured steps kept per model: enough to cover each batch size the model runs.
STEP_WINDOW = 256
#: Steps measured before predictions are trusted (a model's warm-up runs more).
MIN_STEPS = 8
#: The share of measured steps a prediction covers: each is the fitted line times the ratio
#: of measured to fitted that this share of the window stays under.
COVERED = 0.9
#: The last this many steps also set the stretch on their own (see the module docstring).
RECENT_STEPS = 32
#: No prediction is stretched by more than this ratio, however noisy the window.
MAX_STRETCH = 3.0
#: The percentile of the window's steps that `StepProfile.spread` holds to the typical one.
SPREAD_QUANTILE = 0.99
#: Steps measured between two fits of the line, unless one runs slower than the fit covers
#: (then at once): a fit is a least-squares solve and three percentiles, asked for between
#: every two steps, while the line moves little from one step to the next.
REFIT_EVERY = 16


class StepProfile:
    """One model's measured steps, and the line fitted to them (see the module docstring)."""

    def __init__(self, window: int = STEP_WINDOW, min_steps: int = MIN_STEPS) -> None:
        self.min_steps = min_steps
        #: (sequences, total context, prefill units, seconds) of the last steps measured
        self.steps: deque[tuple[int, int, int, float]] = deque(maxlen=window)
        self._fit: tuple[np.ndarray, float, float, float] | None = None
        #: Steps measured since the fit in use.
        self._unfitted = 0

    def __len__(self) -> int:
        return len(self.steps)

    def observe(self, sequences: int, context: int, prefill: int, seconds: float) -> None:
        """Keep a measured step. The line is fitted again after REFIT_EVERY of them, or at
        once when this one took longer than the fit's predictions cover: a machine that slows
        is followed from its first slow step."""
        self.steps.append((sequences, context, prefill, seconds))
        self._unfitted += 1
        fit = self._fit
        if fit is None:
            return
        predicted = float(fit[0] @ np.array([1.0, sequences, context, prefill])) * fit[1]
        if self._unfitted >= REFIT_EVERY or seconds > predicted:
            self._fit = None

    def predict(self, sequences: int, context: int, prefill: int = 0) -> float | None:
        """Seconds a step of `sequences` sequences, `context` units long in all, starting
        sequences of `prefill` units, is predicted to take; None until `min_steps` steps
        were measured."""
        return self._predict(sequences, context, prefill, typical=False)

    def typical(self, sequences: int, context: int, prefill: int = 0) -> float | None:
        """What such a step takes on average lately (no share of the errors added): for a sum
        of many steps (see the module docstring); None as for `predict`."""
        return self._predict(sequences, context, prefill, typical=True)

    def spread(self) -> float | None:
        """How much longer than typical the slow steps of the window are: the SPREAD_QUANTILE
        of their ratios to the typical step, at least 1 (None as for `predict`)."""
        fit = self._fitted()
        return None if fit is None else fit[3]

    def _predict(
        self, sequences: int, context: int, prefill: int, *, typical: bool
    ) -> float | None:
        fit = self._fitted()
        if fit is None:
            return None
        coefficients, stretch, mean, _ = fit
        line = float(coefficients @ np.array([1.0, sequences, context, prefill]))
        return max(line, 0.0) * (mean if typical else stretch)

    def _fitted(self) -> tuple[np.ndarray, float, float, float] | None:
        if len(self.steps) < self.min_steps:
            return None
        if self._fit is None:
            self._fit = self._refit()
            self._unfitted = 0
        return self._fit

    def _refit(self) -> tuple[np.ndarray, float, float, float]:
        data = np.array(self.steps, dtype=np.float64)
        features = np.column_stack([np.ones(len(data)), data[:, :3]])
        seconds = data[:, 3]
        coefficients = nonnegative_fit(features, seconds)
        fitted = features @ coefficients
        ratios = seconds[fitted > 0] / fitted[fitted > 0]
        stretch = mean = tail = 1.0
        if ratios.size:
            recent = ratios[-RECENT_STEPS:]
            stretch = max(float(np.quantile(ratios, COVERED)), float(np.quantile(recent, COVERED)))
            mean = float(np.mean(recent))
            tail = float(np.quantile(ratios, SPREAD_QUANTILE))
        stretch = min(max(stretch, 1.0), MAX_STRETCH)
        mean = min(max(mean, 1.0 / MAX_STRETCH), stretch)
        return coefficients, stretch, mean, min(max(tail / mean, 1.0), MAX_STRETCH)


def nonnegative_fit(features: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient at least 0 (a cost never falls as a step grows):
    a coefficient the plain fit makes negative is set to 0 and the rest fitted again. A
    feature that never varies in the window (all steps of one size) gets 0, the constant
    takes its share."""
    active = [i for i in range(features.shape[1]) if i == 0 or np.ptp(features[:, i]) > 0]
    coefficients = np.zeros(features.shape[1])
    while active:
        solution, *_ = np.linalg.lstsq(features[:, active], values, rcond=None)
        negative = [i for i, c in zip(active, solution, strict=True) if c < 0]
        if not negative:
            coefficients[active] = solution
            break
        active = [i for i in active if i not in negative]
    return coefficients


class StepEstimates:
    """Every generative model's `StepProfile`, by model key."""

    def __init__(self, window: int = STEP_WINDOW, min_steps: int = MIN_STEPS) -> None:
        self.window = window
        self.min_steps = min_steps
        self.profiles: dict[str, StepProfile] = {}

    def profile(self, key: str) -> StepProfile:
        profile = self.profiles.get(key)
        if profile is None:
            profile = self.profiles[key] = StepProfile(self.window, self.min_steps)
        return profile

    def observe(self, key: str, sequences: int, context: int, prefill: int, seconds: float) -> None:
        self.profile(key).observe(sequences, context, prefill, seconds)

    def predict(self, key: str, sequences: int, context: int, prefill: int = 0) -> float | None:
        profile = self.profiles.get(key)
        return None if profile is None else profile.predict(sequences, context, prefill)

    def typical(self, key: str, sequences: int, context: int, prefill: int = 0) -> float | None:
        profile = self.profiles.get(key)
        return None if profile is None else profile.typical(sequences, context, prefill)

    def spread(self, key: str) -> float | None:
        profile = self.profiles.get(key)
        return None if profile is None else profile.spread()

    def forget(self, key: str) -> None:
        self.profiles.pop(key, None)
