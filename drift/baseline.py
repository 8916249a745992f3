"""Baseline values and how a finished session folds into a new version.

A baseline version is immutable: folding a session returns a new value with
``version + 1``; the store keeps every version until erasure or expiry.
"""

from __future__ import annotations

import functools
import hashlib
import math
import operator
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from drift.evolve import fast_init
from drift.features import WindowStats
from drift.model import FEATURES, BaselineKind, DriftConfig, Mode, ModelTriple


def derive_id(*parts: str) -> str:
    """A deterministic id: the same parts always give the same id.

    >>> derive_id("score", "u1", "s1", "e9")
    'bada1e33b5a7eb836489befe733116f7'
    """
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return digest[:32]


@dataclass(frozen=True, slots=True)
class BaselineMeta:
    """What every baseline version records besides its values (SPEC section 4)."""

    user_id: str
    kind: BaselineKind
    baseline_id: str
    version: int
    created_at_s: float
    source_session: str
    model: ModelTriple
    drift_policy_id: str
    mode: Mode
    expires_at_s: float

    def __post_init__(self) -> None:
        # One policy id for every user's versions (see ModelTriple): a reference, not a copy.
        object.__setattr__(self, "drift_policy_id", sys.intern(self.drift_policy_id))


_KNOWN_FEATURES = frozenset(FEATURES)
_FEATURE_SETS: dict[tuple[str, ...], tuple[str, ...]] = {}
"""The feature tuples baselines hold, one object each (at most the subsets of FEATURES)."""


_SHAPES: dict[tuple[int, ...], tuple[int, ...]] = {}
"""The session shapes baselines hold (windows per session), one tuple object each."""
_NONE = -1.0  # the count of a window that is None


@dataclass(frozen=True)
class AttunementBaseline:
    """Recency-ordered window stats of recent sessions, and the last late-session profile.

    :attr:`sessions` ``[0]`` is the most recent session; each holds one
    :class:`WindowStats` per checkpoint window (turns 1-5, 6-10, ...), over ``features``, on
    the transformed scale of :func:`drift.features.transform`. They are held as one array of
    doubles (``table``): a block per (session, window) of the count (-1 for a window that
    is None), the means and the squared deviations of the features; ``shape`` is the number
    of windows of each session. Fifteen window objects took 3.7 KB of a user's memory, the
    array takes 1.6 (docs/performance.md, "Per-user state"). Build one with :meth:`of`.

    >>> meta = next_meta(None, "u", BaselineKind.ATTUNEMENT, 0.0, "s", ModelTriple("m", "t", "p"),
    ...                  Mode.LIGHT, DriftConfig())
    >>> b = AttunementBaseline.of(meta, ("friction",), ((WindowStats(5, (0.5,), (0.1,)), None),),
    ...                           (0.2,))
    >>> b.shape, b.table.tolist(), b.sessions[0][1], b.window(0, 0.7)[0][0].mean.tolist()
    ((2,), [5.0, 0.5, 0.1, -1.0, 0.0, 0.0], None, [0.5])
    """

    meta: BaselineMeta
    features: tuple[str, ...]
    table: array[float]
    shape: tuple[int, ...]
    late_profile: tuple[float, ...]

    def __post_init__(self) -> None:
        # Every user's baseline names the same few feature sets and shapes: one tuple of each.
        object.__setattr__(self, "features",
                           _FEATURE_SETS.setdefault(self.features, self.features)
                           if set(self.features) <= _KNOWN_FEATURES else self.features)
        object.__setattr__(self, "shape", _SHAPES.setdefault(self.shape, self.shape))

    def __hash__(self) -> int:
        return hash((self.meta, self.features, self.table.tobytes(), self.shape,
                     self.late_profile))

    @staticmethod
    def of(meta: BaselineMeta, features: tuple[str, ...],
           sessions: tuple[tuple[WindowStats | None, ...], ...],
           late_profile: tuple[float, ...]) -> AttunementBaseline:
        """The baseline of these sessions' window stats (most recent first)."""
        table = array("d")
        for windows in sessions:
            table.extend(_values(windows, len(features)))
        return AttunementBaseline(meta, features, table, tuple(len(w) for w in sessions),
                                  late_profile)

    def blocks(self) -> list[range]:
        """Where each session's window blocks start in :attr:`table`, most recent first."""
        width = 1 + 2 * len(self.features)
        at, out = 0, []
        for windows in self.shape:
            out.append(range(at, at + windows * width, width))
            at += windows * width
        return out

    @property
    def sessions(self) -> tuple[tuple[WindowStats | None, ...], ...]:
        """The window stats of each session, most recent first, as objects."""
        f, table = len(self.features), self.table
        return tuple(tuple(None if table[k] == _NONE else _stats(table, k, f) for k in starts)
                     for starts in self.blocks())

    def window(self, w: int, decay: float) -> Window:
        """Stats of window ``w`` across sessions, with recency weights ``decay**age``."""
        return Window(self, w, decay)

    @functools.cached_property
    def pooled(self) -> tuple[tuple[float, ...], int]:
        """Within-window sum of squared deviations per feature, and its degrees of freedom.

        Computed once per version (the value is immutable), not at every checkpoint.
        """
        f = len(self.features)
        width = 1 + 2 * f
        table = self.table
        m2 = [0.0] * f
        df = 0
        for at in range(0, len(table), width):
            n = table[at]
            if n > 0:
                m2 = list(map(operator.add, m2, table[at + 1 + f:at + width]))
                df += int(n) - 1
        return tuple(m2), df

    def turn_sd(self) -> tuple[float, ...]:
        """Pooled within-window standard deviation per feature (floored)."""
        m2, df = self.pooled
        return tuple(math.sqrt(max(v / max(df, 1), 1e-6)) for v in m2)


class Window(Sequence[tuple[WindowStats, float]]):
    """Window ``w`` of each of a baseline's sessions that has turns in it, most recent
    first, with its recency weight ``decay**age``: a sequence of (stats, weight) for the
    reference's statistic, whose objects are built on first reading; a compiled twin of the
    statistic may read the numbers in the baseline's table instead (``baseline``, ``w``).

    >>> meta = next_meta(None, "u", BaselineKind.ATTUNEMENT, 0.0, "s", ModelTriple("m", "t", "p"),
    ...                  Mode.LIGHT, DriftConfig())
    >>> stats = WindowStats(5, (0.5,), (0.1,))
    >>> b = AttunementBaseline.of(meta, ("friction",), ((stats, None), (stats,)), (0.2,))
    >>> found = b.window(0, 0.5)
    >>> found.turns(), [weight for _, weight in found], found[1][0] == stats, len(b.window(1, 0.5))
    (10, [1.0, 0.5], True, 0)
    """

    __slots__ = ("_pairs", "baseline", "decay", "w")

    def __init__(self, baseline: AttunementBaseline, w: int, decay: float) -> None:
        self.baseline, self.w, self.decay = baseline, w, decay
        self._pairs: list[tuple[WindowStats, float]] | None = None

    def _found(self) -> list[tuple[int, int]]:
        """The age and the block's start of each session's window ``w`` with turns in it
        (a loop over the shape, not :meth:`AttunementBaseline.blocks`: every checkpoint
        reads it)."""
        b, w = self.baseline, self.w
        width = 1 + 2 * len(b.features)
        table, at, found = b.table, 0, []
        for age, windows in enumerate(b.shape):
            if w < windows and table[at + w * width] > 0:
                found.append((age, at + w * width))
            at += windows * width
        return found

    def turns(self) -> int:
        """The turns of these windows together, read without building their objects."""
        table = self.baseline.table
        return sum([int(table[k]) for _, k in self._found()])

    def _built(self) -> list[tuple[WindowStats, float]]:
        if self._pairs is None:
            f, table = len(self.baseline.features), self.baseline.table
            self._pairs = [(_stats(table, k, f), self.decay ** age) for age, k in self._found()]
        return self._pairs

    def __len__(self) -> int:
        return len(self._built())

    @overload
    def __getitem__(self, i: int) -> tuple[WindowStats, float]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[WindowStats, float]]: ...

    def __getitem__(self, i: int | slice
                    ) -> tuple[WindowStats, float] | Sequence[tuple[WindowStats, float]]:
        return self._built()[i]

    def __iter__(self) -> Iterator[tuple[WindowStats, float]]:
        return iter(self._built())


def _values(windows: tuple[WindowStats | None, ...], f: int) -> list[float]:
    """A session's blocks, as the table holds them."""
    out: list[float] = []
    for stats in windows:
        if stats is None:
            out.append(_NONE)
            out.extend([0.0] * (2 * f))
        else:
            out.append(stats.n)
            out.extend(stats.mean)
            out.extend(stats.m2)
    return out


def _stats(table: array[float], at: int, f: int) -> WindowStats:
    """The window whose block starts at ``at`` (not a None one), over ``f`` features."""
    return WindowStats.held(int(table[at]), table[at + 1:at + 1 + f],
                            table[at + 1 + f:at + 1 + 2 * f])


@fast_init
@dataclass(frozen=True, slots=True)
class SemanticBaseline:
    """Affirmed commitments, positions and constraints: ``commitment_id -> kind``."""

    meta: BaselineMeta
    items: tuple[tuple[str, str], ...]

    def ids(self) -> frozenset[str]:
        return frozenset(cid for cid, _ in self.items)


@fast_init
@dataclass(frozen=True, slots=True)
class SafetyBaseline:
    meta: BaselineMeta
    gate_config_id: str
    drift_policy_id: str
    consent_state_id: str

    def fields(self) -> tuple[str, str, str]:
        return (self.gate_config_id, self.drift_policy_id, self.consent_state_id)


Baseline = AttunementBaseline | SemanticBaseline | SafetyBaseline


@fast_init
@dataclass(frozen=True, slots=True)
class UserBaselines:
    """The current (latest, unexpired) version of each kind for one user."""

    attunement: AttunementBaseline | None = None
    semantic: SemanticBaseline | None = None
    safety: SafetyBaseline | None = None

    def model(self) -> ModelTriple | None:
        """The model the user's continuity was established with (relational baselines only).

        The safety baseline is operational memory and outlives a relational erasure;
        with no relational baseline left there is no established continuity that a
        model change could disrupt.
        """
        for b in (self.attunement, self.semantic):
            if b is not None:
                return b.meta.model
        return None

    def metas(self) -> list[BaselineMeta]:
        return [b.meta for b in (self.attunement, self.semantic, self.safety) if b is not None]

    def without(self, kinds: frozenset[BaselineKind]) -> UserBaselines:
        return UserBaselines(
            None if BaselineKind.ATTUNEMENT in kinds else self.attunement,
            None if BaselineKind.SEMANTIC in kinds else self.semantic,
            None if BaselineKind.SAFETY in kinds else self.safety,
        )


def next_meta(
    previous: BaselineMeta | None, user_id: str, kind: BaselineKind, now_s: float,
    session_id: str, model: ModelTriple, mode: Mode, config: DriftConfig,
) -> BaselineMeta:
    """Metadata of the next version: same ``baseline_id``, ``version + 1``.

    >>> m = ModelTriple("m1", "t1", "bf16")
    >>> first = next_meta(None, "u1", BaselineKind.SAFETY, 100.0, "s1", m, Mode.FULL,
    ...                   DriftConfig())
    >>> first.version, first.expires_at_s - first.created_at_s == 90 * 86400
    (1, True)
    >>> next_meta(first, "u1", BaselineKind.SAFETY, 200.0, "s2", m, Mode.FULL,
    ...           DriftConfig()).baseline_id == first.baseline_id
    True
    """
    baseline_id = (previous.baseline_id if previous is not None
                   else derive_id("baseline", user_id, kind.value, session_id))
    version = previous.version + 1 if previous is not None else 1
    return BaselineMeta(user_id, kind, baseline_id, version, now_s, session_id, model,
                        config.drift_policy_id, mode, now_s + config.ttl_s(mode))


def window_table(windows: tuple[WindowStats | None, ...], f: int) -> array[float]:
    """A session's windows over ``f`` features as :class:`AttunementBaseline`'s table holds
    them: a block per window of its count (-1 for a window that is None), means and squared
    deviations.

    >>> window_table((WindowStats(5, (0.5,), (0.1,)), None), 1).tolist()
    [5.0, 0.5, 0.1, -1.0, 0.0, 0.0]
    """
    return array("d", _values(windows, f))


def fold_attunement(
    previous: AttunementBaseline | None, meta: BaselineMeta, features: tuple[str, ...],
    session: array[float], late_profile: tuple[float, ...], config: DriftConfig,
) -> AttunementBaseline:
    """A new attunement version with this session's windows (``session``, as
    :func:`window_table` gives them) in front.

    Only ``features`` are kept (the mode's allowed set); at most
    ``config.baseline_sessions`` sessions are held, so per-user state stays bounded.

    >>> w = window_table((WindowStats(5, (0.5,), (0.1,)),), 1)
    >>> meta = next_meta(None, "u", BaselineKind.ATTUNEMENT, 0.0, "s", ModelTriple("m", "t", "p"),
    ...                  Mode.LIGHT, DriftConfig())
    >>> b = fold_attunement(None, meta, ("friction",), w, (0.2,), DriftConfig())
    >>> for _ in range(9):
    ...     b = fold_attunement(b, meta, ("friction",), w, (0.2,), DriftConfig())
    >>> len(b.sessions), b.shape
    (5, (1, 1, 1, 1, 1))
    """
    width = 1 + 2 * len(features)
    shape: tuple[int, ...] = (len(session) // width,)
    table = session
    if previous is not None and previous.features == features and config.baseline_sessions > 1:
        kept = previous.shape[:config.baseline_sessions - 1]
        table = session + previous.table[:sum(kept) * width]
        shape += kept
    elif config.baseline_sessions < 1:
        table, shape = array("d"), ()
    return AttunementBaseline(meta, features, table, shape, late_profile)


def restrict_features(baseline: AttunementBaseline, keep: tuple[str, ...],
                      meta: BaselineMeta) -> AttunementBaseline:
    """The same baseline holding only the ``keep`` features (a mode downgrade)."""
    idx = [baseline.features.index(f) for f in keep if f in baseline.features]
    kept = tuple(baseline.features[i] for i in idx)
    sessions = tuple(tuple(None if s is None else s.restrict(idx) for s in windows)
                     for windows in baseline.sessions)
    late = tuple(baseline.late_profile[i] for i in idx)
    return AttunementBaseline.of(meta, kept, sessions, late)
