"""Scoring at a checkpoint: the three components, the composite, and the response ladder.

:func:`checkpoint` is called at the early-session checkpoint and every later one;
:func:`rate` turns the components of any score (also the safety check at
``session_start``) into a :class:`~drift.outputs.DriftScore` and the tighten-only
responses it climbs to.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drift import ladder
from drift.attunement import AttunementScore, AttunementTest, score_attunement_drift
from drift.baseline import AttunementBaseline, Baseline, UserBaselines, Window, derive_id
from drift.composite import composite, safety_drift, semantic_drift
from drift.evolve import evolve, fast_init
from drift.model import FEATURES, MODE_FEATURES, BaselineKind, DriftConfig, Mode
from drift.outputs import (
    Attribution,
    BaselineRef,
    Components,
    DriftScore,
    LadderDetail,
    Output,
    Response,
)
from drift.reattune import ReattuneScoring, Rows, score_reattunement
from drift.state import Row, SessionState, TurnLog, UserState

AttunementTestOf = Callable[[SessionState, UserBaselines, DriftConfig], AttunementTest | None]
"""A checkpoint's attunement test of an open session (:attr:`StepContext.attunement`)."""
SessionNumbers = Callable[[SessionState, list[int]], tuple["array[float]", tuple[float, ...]]]
"""What a closing session folds into its attunement version, over the features at the
indices given (:func:`drift.rebaseline.session_numbers`)."""


@fast_init
@dataclass(frozen=True, slots=True)
class StepContext:
    """The cause of what a step does: the event (or timer) id, its session and event time."""

    event_id: str
    session_id: str
    ts_s: float
    config: DriftConfig
    score: AttunementScore = score_attunement_drift
    """How the attunement statistic is computed: the reference's function, or one a caller
    of :func:`drift.fold.step` holds equal to it (the compiled batch kernel's)."""
    event_ts_s: float | None = None
    """The event's own time (``ts_s`` is it held at the user's clock); None for a timer."""
    reattune: ReattuneScoring = score_reattunement
    """How a re-attunement is scored: the reference's function, or the compiled kernel's
    twin."""
    attunement: AttunementTestOf | None = None
    """The checkpoint's attunement test of the turns since the last look: None to read them
    in the session's turn log (:func:`attunement_test`), or a function that reads them where
    the compiled kernel holds them."""
    session_numbers: SessionNumbers | None = None
    """What a closing session folds into its attunement version: None to read it in the
    session's turn log (:func:`drift.rebaseline.session_numbers`), or a function that reads
    it where the compiled kernel holds it."""
    turn_sd: Callable[[AttunementBaseline], tuple[float, ...]] | None = None
    """The pooled standard deviations a re-attunement reads: None for the baseline's own
    (:meth:`drift.baseline.AttunementBaseline.turn_sd`), or a function held equal to it (the
    compiled kernel's, which reads them from the baseline's table)."""
    early: Callable[[list[int]], Rows] | None = None
    """The open session's early rows, over the features at the given :data:`FEATURES`
    indices, that a re-attunement reads: None to read them in the session's turn log, or a
    function that reads them where the compiled kernel holds them (as an array, which the
    kernel's twin of the re-attunement reads where it is)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a mode's features sit: in the baseline's stats (``base_idx``) and in a turn's
    row (``cols``, :data:`FEATURES` order); ``whole`` when both are every column in order."""

    features: tuple[str, ...]
    base_idx: list[int]
    cols: list[int]
    whole: bool


@functools.lru_cache(maxsize=64)
def feature_layout(mode: str, available: tuple[str, ...]) -> Layout:
    """The baseline's features that ``mode`` may use, in the baseline's order, and where they
    sit. Cached per (mode, feature set), of which there are a handful: every checkpoint and
    re-attunement reads it.

    >>> layout = feature_layout(Mode.LIGHT.value, ("trust", "friction", "latency_ms"))
    >>> layout.features, layout.base_idx, layout.cols, layout.whole
    (('friction', 'latency_ms'), [1, 2], [3, 5], False)
    """
    allowed = MODE_FEATURES.get(Mode(mode), ())
    feats = tuple(f for f in available if f in allowed)
    base_idx = [available.index(f) for f in feats]
    cols = [FEATURES.index(f) for f in feats]
    return Layout(feats, base_idx, cols, feats == available == FEATURES)


Inputs = tuple[Layout, Window, tuple[tuple[float, ...], int], int, int]
"""What a checkpoint's attunement statistic reads besides the rows: the features' layout,
the baseline's window, its pooled squares and degrees of freedom, the look and the window."""


def attunement_inputs(session: SessionState, baselines: UserBaselines, config: DriftConfig,
                      n_rows: int) -> Inputs | None:
    """What the attunement statistic of ``n_rows`` turns since the last look reads besides
    them; None where there is no statistic (no baseline, no rows, no shared feature, too few
    baseline turns or degrees of freedom)."""
    base = baselines.attunement
    if base is None or not n_rows:
        return None
    layout = feature_layout(session.mode.value, base.features)
    if not layout.features:
        return None
    looks = session.turns.looks
    w = min(looks, config.windows - 1)
    found = base.window(w, config.recency_decay)
    if found.turns() < config.min_baseline_turns:
        return None
    pooled = base.pooled
    if pooled[1] < 2:
        return None
    return layout, found, pooled, looks + 1, w


def attunement_test(session: SessionState, baselines: UserBaselines, config: DriftConfig,
                    score: AttunementScore = score_attunement_drift) -> AttunementTest | None:
    """The attunement statistic of the turns since the last look, or None without a baseline."""
    rows_now = session.turns.current_rows
    inputs = attunement_inputs(session, baselines, config, len(rows_now))
    return None if inputs is None else score_inputs(rows_now, inputs, score, config)


def score_inputs(rows_now: Sequence[Row], inputs: Inputs, score: AttunementScore,
                 config: DriftConfig) -> AttunementTest:
    """The statistic of ``rows_now`` (every feature, :data:`FEATURES` order) with what
    :func:`attunement_inputs` found: over the features the mode tests."""
    layout, found, (m2_all, df), look, w = inputs
    feats = layout.features
    if layout.whole:
        return score(rows_now, feats, found, (m2_all, df), look, w, config)
    base_idx, cols = layout.base_idx, layout.cols
    windows = [(s.restrict(base_idx), wt) for s, wt in found]
    rows = [[row[c] for c in cols] for row in rows_now]
    pooled = (tuple(m2_all[i] for i in base_idx), df)
    return score(rows, feats, windows, pooled, look, w, config)


def checkpoint(state: UserState, baselines: UserBaselines, ctx: StepContext, tag: str
               ) -> tuple[UserState, tuple[Output, ...]]:
    """Score the open session now (a full checkpoint) and walk the response ladder."""
    session = state.session
    assert session is not None
    att = (attunement_test(session, baselines, ctx.config, ctx.score) if ctx.attunement is None
           else ctx.attunement(session, baselines, ctx.config))
    sem = semantic_drift(session.referenced) if baselines.semantic is not None else None
    saf = (safety_drift(baselines.safety.fields(), session.safety)
           if baselines.safety is not None else None)
    return rate(state, baselines, ctx, tag, att, sem, saf, session.turns.looked())


def rate(state: UserState, baselines: UserBaselines, ctx: StepContext, tag: str,
         att: AttunementTest | None, sem: float | None, saf: float | None,
         looked: TurnLog | None = None) -> tuple[UserState, tuple[Output, ...]]:
    """The score of these components, and the responses the ladder climbs to; ``looked``
    is the session's turn log after a checkpoint's look (the session's is kept if None)."""
    session = state.session
    assert session is not None
    config = ctx.config
    turns = session.turns if looked is None else looked
    att_drift = att.drift if att else None
    comp = composite(att_drift, sem, saf, config)
    if comp is None:
        if looked is not None:
            state = evolve(state, session=evolve(session, turns=looked))
        return state, ()
    kinds = hold_kinds(att_drift, sem, saf, config)
    score_id = derive_id("score", state.user_id, session.session_id, tag, ctx.event_id)
    climbed = ladder.step(state.ladder, comp.tier, kinds, score_id)
    effective = climbed.effective_tier
    refs = (_ref(baselines.attunement), _ref(baselines.semantic), _ref(baselines.safety))
    score = DriftScore(
        id=score_id, user_id=state.user_id, session_id=session.session_id, ts_s=ctx.ts_s,
        turn=session.turns.n_turns, checkpoint=tag, mode=session.mode, baselines=refs,
        components=Components(att_drift, sem, saf), score=comp.score, tier=comp.tier,
        effective_tier=effective,
        attribution=_attribution(comp.driver, att, sem, saf, refs, config),
        weights=(config.weight_attunement, config.weight_semantic, config.weight_safety),
        thresholds=(config.threshold_medium, config.threshold_high),
        drift_policy_id=config.drift_policy_id, source_event_id=ctx.event_id,
    )
    responses: tuple[Response, ...] = ()
    if climbed.actions:  # most scores climb nowhere: no detail to build
        held = tuple(sorted(climbed.state.hold_kinds, key=lambda k: k.value)) \
            if climbed.state.hold else ()
        detail = LadderDetail(score_id, comp.score, comp.tier, effective, held)
        responses = tuple(
            Response(derive_id("response", action.value, state.user_id, session.session_id,
                               ctx.event_id),
                     state.user_id, session.session_id, ctx.ts_s, action, ctx.event_id, detail)
            for action in climbed.actions)
    session = evolve(session, turns=turns, scores=session.scores + 1,
                      max_tier=max(session.max_tier, effective))
    return evolve(state, ladder=climbed.state, session=session), (score, *responses)


def _ref(b: Baseline | None) -> BaselineRef | None:
    return BaselineRef.of(b.meta) if b is not None else None


def hold_kinds(att: float | None, sem: float | None, saf: float | None,
               config: DriftConfig) -> frozenset[BaselineKind]:
    """The kinds a HOLD raised by this score must be re-confirmed for.

    Every component at medium or above (any safety mismatch); when the tier came
    from components that each stayed below medium, every component that added to it.

    >>> sorted(k.value for k in hold_kinds(0.45, 0.4, 0.0, DriftConfig()))
    ['attunement', 'semantic']
    >>> sorted(k.value for k in hold_kinds(0.9, 0.1, 0.0, DriftConfig()))
    ['attunement']
    """
    medium = config.threshold_medium
    strong = _KINDS[(att is not None and att >= medium)
                    + 2 * (sem is not None and sem >= medium)
                    + 4 * (saf is not None and (saf >= medium or saf > 0))]
    return strong if strong else _KINDS[bool(att) + 2 * bool(sem) + 4 * bool(saf)]


#: The kinds of each subset of (attunement, semantic, safety), by its bits 1, 2 and 4: every
#: score asks for one, so they are made once.
_KINDS = tuple(frozenset(k for bit, k in ((1, BaselineKind.ATTUNEMENT), (2, BaselineKind.SEMANTIC),
                                          (4, BaselineKind.SAFETY)) if mask & bit)
               for mask in range(8))


def _attribution(driver: str, att: AttunementTest | None, sem: float | None,
                 saf: float | None, refs: tuple[BaselineRef | None, ...], config: DriftConfig
                 ) -> Attribution:
    """What drove the score; ``refs`` are the attunement, semantic and safety versions."""
    if driver == "attunement" and att is not None:
        return Attribution(BaselineKind.ATTUNEMENT, refs[0], test=att,
                           alpha_medium=config.alpha_medium, alpha_high=config.alpha_high)
    if driver == "semantic":
        return Attribution(BaselineKind.SEMANTIC, refs[1], value=sem)
    return Attribution(BaselineKind.SAFETY, refs[2], value=saf)
