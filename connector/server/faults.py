"""Fault injection, so clients are tested against real failures over real sockets.

    fail_rate              500 before doing anything
    throttle_rate          429 with Retry-After before doing anything
    latency_ms             every request waits this long first
    fail_after_write_rate  a write commits, then the answer is a 500 (ambiguous failure)
    drop_rate              the connection is cut mid-response (after committing, for writes)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Faults:
    """Probabilities (0..1) and a delay; all zero means a well-behaved server."""

    fail_rate: float = 0.0
    throttle_rate: float = 0.0
    latency_ms: float = 0.0
    fail_after_write_rate: float = 0.0
    drop_rate: float = 0.0
    seed: int | None = None
    _rng: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("fail_rate", "throttle_rate", "fail_after_write_rate", "drop_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if self.latency_ms < 0:
            raise ValueError(f"latency_ms must be >= 0, got {self.latency_ms}")
        object.__setattr__(self, "_rng", random.Random(self.seed))

    def hit(self, rate: float) -> bool:
        """True with probability `rate`."""
        return rate > 0.0 and self._rng.random() < rate
