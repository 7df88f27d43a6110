"""When a client tries again: a 429 (the model's queue is full) or a 503 (the deadline cannot
be met now, a model still loading, a worker restarting) means "not now", so it waits and
retries, up to `attempts` times, 0.25 s doubling or the server's `Retry-After`."""

from __future__ import annotations

from dataclasses import dataclass

#: Statuses that mean "not now".
RETRIED = (429, 503)


@dataclass(frozen=True)
class Retry:
    """How often and how patiently to retry; `Retry(attempts=1)` never retries."""

    attempts: int = 6
    backoff: float = 0.25
    #: The longest wait between two tries (a Retry-After is clipped to it too).
    max_wait: float = 5.0

    def wait(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait after failed try number `attempt` (1-based): the server's
        Retry-After (in seconds) when it sent one, else the backoff doubled per try."""
        if retry_after:
            try:
                return min(self.max_wait, max(0.0, float(retry_after)))
            except ValueError:
                pass  # an HTTP date: fall back to the backoff
        return float(min(self.max_wait, self.backoff * 2 ** (attempt - 1)))
