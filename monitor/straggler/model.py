"""The straggler scores as plain data: what one look at the ranks saw, each rank's score over a
window of looks, and the rank named as the one the others wait for."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RankLook:
    """One rank at one moment: waiting inside a collective (``collective`` names it), or not."""

    rank: int
    collective: str = ""

    @property
    def waiting(self) -> bool:
        return bool(self.collective)


@dataclass(frozen=True, slots=True)
class Round:
    """Every rank looked at once (one py-spy dump each); ``taken``: seconds since the epoch."""

    taken: float
    looks: tuple[RankLook, ...]


@dataclass(frozen=True, slots=True)
class RankGpu:
    """The GPU of one rank, from the latest metrics sample (None: the driver does not say)."""

    gpu: str                               # how the metrics name it: "GPU 3"
    sm_clock_mhz: int | None = None
    utilization_percent: float | None = None
    # Active clock-event reasons that slow it (``metrics.gpu.THROTTLE_REASONS``), by name.
    throttle_reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RankScore:
    """One rank over the window: how many looks saw it, the share of them in which it waited in a
    collective, its step time (None: it prints no steps) and its GPU (None: no GPU known)."""

    rank: int
    looks: int
    wait_fraction: float | None
    step_s: float | None = None
    gpu: RankGpu | None = None


@dataclass(frozen=True, slots=True)
class SlowRank:
    """A rank the others wait for. ``wait_share``: the share of the time the others spend waiting
    for it (their mean wait fraction less its own, which the transfer itself costs every rank);
    ``z``: how far its wait fraction lies below the others' pooled one, in standard errors of the
    two shares (so a small window's noise is not taken for a slow rank)."""

    rank: int
    waiters: tuple[int, ...]
    wait_share: float
    own_wait: float
    others_wait: float
    z: float
    step_s: float | None = None
    gpu: RankGpu | None = None


@dataclass(frozen=True, slots=True)
class Scores:
    """The ranks' scores at ``taken`` over the last ``rounds`` looks (``window_s`` seconds).
    ``candidate``: the rank this window alone points at; ``slow``: the rank named, once the same
    candidate held over several windows in a row (``score.Steadiness``)."""

    taken: float = 0.0
    rounds: int = 0
    window_s: float = 0.0
    ranks: tuple[RankScore, ...] = ()
    candidate: SlowRank | None = None
    slow: SlowRank | None = None

    def wait_fractions(self) -> dict[int, float]:
        """rank -> its wait fraction, for the ranks with one."""
        return {r.rank: r.wait_fraction for r in self.ranks if r.wait_fraction is not None}
