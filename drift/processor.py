"""The per-user fold: one FHR event in, the user's new state and its effects out.

:func:`step` updates a :class:`UserState` in place and returns the
:class:`~drift.outputs.Effects` the shell must carry out (publish, store, erase).
The shell stores the state; the core never touches I/O, a clock or a global
random generator, so replaying the same events over the same baselines and
configuration gives the same effects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from drift import ladder
from drift.baseline import (
    AttunementBaseline,
    BaselineMeta,
    SafetyBaseline,
    SemanticBaseline,
    UserBaselines,
    derive_id,
    fold_attunement,
    next_meta,
    restrict_features,
)
from drift.model import (
    ATTUNEMENT_CATEGORIES,
    FEATURES,
    LIGHT_CATEGORIES,
    MODE_FEATURES,
    SEMANTIC_CATEGORIES,
    BaselineKind,
    BaselineReconfirmed,
    DriftConfig,
    FhrEvent,
    MemoryErase,
    MemoryWrite,
    Mode,
    ModeChanged,
    ModelTriple,
    NoticeShown,
    Semantic,
    SessionEnd,
    SessionStart,
    Tier,
    Turn,
)
from drift.outputs import (
    Effects,
    ErasureCommand,
    Output,
    OutputKind,
    baseline_ref,
    envelope,
)
from drift.reattune import ReattuneScore, score_reattunement
from drift.scoring import (
    AttunementTest,
    WindowStats,
    composite,
    safety_drift,
    score_attunement_drift,
    semantic_drift,
    transform,
)

MAX_SEMANTIC_ITEMS = 256
BLOCKING_SEVERITIES = frozenset({"med", "high"})


@dataclass
class WindowAccumulator:
    """Running sums of one turn window, on the transformed scale, for all features."""

    n: int = 0
    total: list[float] = field(default_factory=lambda: [0.0] * len(FEATURES))
    squares: list[float] = field(default_factory=lambda: [0.0] * len(FEATURES))

    def add(self, row: tuple[float, ...]) -> None:
        self.n += 1
        for j, x in enumerate(row):
            self.total[j] += x
            self.squares[j] += x * x

    def stats(self, idx: list[int]) -> WindowStats | None:
        if self.n == 0:
            return None
        mean = tuple(self.total[j] / self.n for j in idx)
        m2 = tuple(max(0.0, self.squares[j] - self.n * m * m) for j, m in zip(idx, mean))
        return WindowStats(self.n, mean, m2)


@dataclass
class SessionState:
    session_id: str
    mode: Mode
    started_s: float
    last_s: float
    model: ModelTriple
    safety: tuple[str, str, str]
    ephemeral: bool = False
    foldable: bool = True
    n_turns: int = 0
    looks: int = 0
    windows: list[WindowAccumulator] = field(default_factory=list)
    current_rows: list[tuple[float, ...]] = field(default_factory=list)
    early_rows: list[tuple[float, ...]] = field(default_factory=list)
    late_rows: list[tuple[float, ...]] = field(default_factory=list)
    referenced: dict[str, str] = field(default_factory=dict)
    affirmed: dict[str, str] = field(default_factory=dict)
    blocking: tuple[str, ...] = ()
    high_res_streak: int = 0
    high_res_block: bool = False
    model_change: bool = False
    notice_shown: bool = False
    reattune_done: bool = False
    reattune_completed: bool = False
    undisclosed_checked: bool = False


@dataclass
class UserState:
    """Everything the service keeps about one user between events (bounded in size)."""

    user_id: str
    mode: Mode | None = None
    pending_mode: Mode | None = None
    clock_s: float = 0.0
    last_used_s: float = 0.0
    recent_ids: dict[str, None] = field(default_factory=dict)
    session: SessionState | None = None
    ladder: ladder.LadderState = field(default_factory=ladder.initial)
    reattune_required: bool = False
    low_streak: int = 0
    escalated: bool = False
    durable: bool = False
    rebaseline_attunement: bool = False

    @property
    def persistable(self) -> bool:
        """Whether anything about this user may be written to disk (SPEC section 3).

        Only users in a baselining mode who have had a session that was not
        ephemeral; never while an ephemeral session is open.
        """
        if not self.durable or self.mode is None or not self.mode.keeps_baselines:
            return False
        return self.session is None or not self.session.ephemeral


@dataclass(frozen=True, slots=True)
class StepContext:
    event: FhrEvent
    ts_s: float
    config: DriftConfig


# --------------------------------------------------------------------------- helpers


def _features_for(mode: Mode, available: tuple[str, ...]) -> tuple[str, ...]:
    allowed = MODE_FEATURES.get(mode, ())
    return tuple(f for f in available if f in allowed)


def _transform_row(turn: Turn) -> tuple[float, ...]:
    return tuple(transform(f, x) for f, x in zip(FEATURES, turn.features()))


def _score_id(user_id: str, session_id: str, tag: str, cause: str) -> str:
    return derive_id("score", user_id, session_id, tag, cause)


def _response(
    effects: Effects, user_id: str, session_id: str, action: str, cause: str, ts_s: float,
    **extra: Any,
) -> None:
    out_id = derive_id("response", action, user_id, session_id, cause)
    payload = envelope(out_id, user_id, session_id, ts_s)
    payload.update(action=action, cause_event_id=cause, **extra)
    effects.outputs.append(Output(OutputKind.RESPONSE, user_id, payload))


def _violation(effects: Effects, event: FhrEvent, rule: str, reason: str, ts_s: float,
               session_id: str | None = None) -> None:
    out_id = derive_id("violation", rule, event.user_id, event.event_id)
    payload = envelope(out_id, event.user_id, session_id or event.session_id, ts_s)
    payload.update(rule=rule, reason=reason, event_id=event.event_id)
    effects.outputs.append(Output(OutputKind.VIOLATION, event.user_id, payload))


# --------------------------------------------------------------------------- scoring


def _attunement(session: SessionState, baselines: UserBaselines, config: DriftConfig
                ) -> AttunementTest | None:
    base = baselines.attunement
    if base is None or not session.current_rows:
        return None
    feats = _features_for(session.mode, base.features)
    if not feats:
        return None
    look = session.looks + 1
    w = min(session.looks, config.windows - 1)
    base_idx = [base.features.index(f) for f in feats]
    windows = [(_restrict(s, base_idx), wt) for s, wt in base.window(w, config.recency_decay)]
    if sum(s.n for s, _ in windows) < config.min_baseline_turns:
        return None
    m2_all, df = base.pooled()
    if df < 2:
        return None
    cols = [FEATURES.index(f) for f in feats]
    rows = np.asarray(session.current_rows)[:, cols]
    pooled = (tuple(m2_all[i] for i in base_idx), df)
    return score_attunement_drift(rows, feats, windows, pooled, look, w, config)


def _restrict(stats: WindowStats, idx: list[int]) -> WindowStats:
    if idx == list(range(len(stats.mean))):
        return stats
    return WindowStats(stats.n, tuple(stats.mean[i] for i in idx), tuple(stats.m2[i] for i in idx))


def _checkpoint(state: UserState, baselines: UserBaselines, ctx: StepContext,
                effects: Effects, tag: str) -> None:
    """Score the session now (a full checkpoint) and walk the response ladder."""
    session = state.session
    assert session is not None
    config = ctx.config
    att = _attunement(session, baselines, config)
    sem = (semantic_drift({k: v for k, v in session.referenced.items()})
           if baselines.semantic is not None else None)
    saf = (safety_drift(baselines.safety.fields(), session.safety)
           if baselines.safety is not None else None)
    session.looks += 1
    session.current_rows = []
    _publish_score(state, baselines, ctx, effects, tag, att, sem, saf)


def _publish_score(
    state: UserState, baselines: UserBaselines, ctx: StepContext, effects: Effects, tag: str,
    att: AttunementTest | None, sem: float | None, saf: float | None,
) -> None:
    session = state.session
    assert session is not None
    config = ctx.config
    comp = composite(att.drift if att else None, sem, saf, config)
    if comp is None:
        return
    kinds = _hold_kinds(att.drift if att else None, sem, saf, config)
    score_id = _score_id(state.user_id, session.session_id, tag, ctx.event.event_id)
    climbed = ladder.step(state.ladder, comp.tier, kinds, score_id)
    state.ladder = climbed.state
    payload = envelope(score_id, state.user_id, session.session_id, ctx.ts_s)
    payload.update(
        score_kind="continuity_drift",
        turn=session.n_turns,
        checkpoint=tag,
        mode=session.mode.value,
        baselines={
            "attunement": baseline_ref(baselines.attunement.meta if baselines.attunement else None),
            "semantic": baseline_ref(baselines.semantic.meta if baselines.semantic else None),
            "safety": baseline_ref(baselines.safety.meta if baselines.safety else None),
        },
        components={
            "attunement_drift": att.drift if att else None,
            "semantic_drift": sem,
            "safety_drift": saf,
        },
        continuity_drift_score=comp.score,
        tier=comp.tier.label,
        effective_tier=climbed.effective_tier.label,
        attribution=_attribution(comp.driver, att, sem, saf, baselines, config),
        weights={"attunement": config.weight_attunement, "semantic": config.weight_semantic,
                 "safety": config.weight_safety},
        thresholds={"medium": config.threshold_medium, "high": config.threshold_high},
        drift_policy_id=config.drift_policy_id,
        source_event_id=ctx.event.event_id,
    )
    effects.outputs.append(Output(OutputKind.SCORE, state.user_id, payload))
    for action in climbed.actions:
        _response(effects, state.user_id, session.session_id, action, ctx.event.event_id,
                  ctx.ts_s, score_id=score_id, score=comp.score, tier=comp.tier.label,
                  effective_tier=climbed.effective_tier.label,
                  hold_kinds=sorted(k.value for k in climbed.state.hold_kinds)
                  if climbed.state.hold else [])


def _hold_kinds(att: float | None, sem: float | None, saf: float | None,
                config: DriftConfig) -> frozenset[BaselineKind]:
    """The kinds a HOLD raised by this score must be re-confirmed for.

    Every component at medium or above (any safety mismatch); when the tier came
    from components that each stayed below medium, every component that added to it.

    >>> sorted(k.value for k in _hold_kinds(0.45, 0.4, 0.0, DriftConfig()))
    ['attunement', 'semantic']
    >>> sorted(k.value for k in _hold_kinds(0.9, 0.1, 0.0, DriftConfig()))
    ['attunement']
    """
    values = {BaselineKind.ATTUNEMENT: att, BaselineKind.SEMANTIC: sem,
              BaselineKind.SAFETY: saf}
    strong = {k for k, v in values.items() if v is not None
              and (v >= config.threshold_medium or (k is BaselineKind.SAFETY and v > 0))}
    if strong:
        return frozenset(strong)
    return frozenset(k for k, v in values.items() if v)


def _attribution(
    driver: str, att: AttunementTest | None, sem: float | None, saf: float | None,
    baselines: UserBaselines, config: DriftConfig,
) -> dict[str, Any]:
    out: dict[str, Any] = {"component": driver}
    if driver == "attunement" and att is not None:
        out["features"] = [
            {"feature": f.feature, "z": round(f.z, 4), "p_value": f.p_value,
             "direction": "up" if f.delta > 0 else "down"}
            for f in att.features[:3]
        ]
        out["statistic"] = {"name": "pooled_t_chi2", "p_value": att.p_value,
                            "p_adjusted": att.p_adjusted, "look": att.look,
                            "window": att.window, "turns": att.turns}
        out["threshold"] = {"alpha_medium": config.alpha_medium,
                            "alpha_high": config.alpha_high}
        meta = baselines.attunement.meta if baselines.attunement else None
    elif driver == "semantic":
        out["statistic"] = {"name": "share_contradicted", "value": sem}
        out["threshold"] = {"medium": config.threshold_medium, "high": config.threshold_high}
        meta = baselines.semantic.meta if baselines.semantic else None
    else:
        out["statistic"] = {"name": "share_fields_changed", "value": saf}
        out["threshold"] = {"any_mismatch": "high"}
        meta = baselines.safety.meta if baselines.safety else None
    out["baseline"] = baseline_ref(meta)
    return out


# --------------------------------------------------------------------------- re-attunement


def _reattune(state: UserState, baselines: UserBaselines, ctx: StepContext,
              effects: Effects) -> ReattuneScore | None:
    session = state.session
    assert session is not None
    session.reattune_done = True
    base = baselines.attunement
    config = ctx.config
    if base is None or not session.early_rows or not base.late_profile:
        return None
    feats = _features_for(session.mode, base.features)
    if not feats:
        return None
    base_idx = [base.features.index(f) for f in feats]
    cols = [FEATURES.index(f) for f in feats]
    early = np.asarray(session.early_rows)[:, cols]
    late = np.asarray(base.late_profile)[base_idx]
    sd = base.turn_sd()[base_idx]
    sem = (semantic_drift(session.referenced) if baselines.semantic is not None else None)
    trust_index = feats.index("trust") if "trust" in feats else None
    score = score_reattunement(early, late, sd, trust_index, sem, config)
    passed = score.quality >= config.reattune_threshold
    reattune_id = derive_id("reattune", state.user_id, session.session_id, ctx.event.event_id)
    detail = {"reattune_quality_score": score.quality,
              "reattune_turns_to_baseline": score.turns_to_baseline,
              "components": {"convergence": score.convergence,
                             "semantic_consistency": score.semantic_consistency,
                             "trust_continuity": score.trust_continuity},
              "threshold": config.reattune_threshold,
              "reattune_id": reattune_id,
              "baseline": baseline_ref(base.meta)}
    if session.model_change:
        session.reattune_completed = passed
        if passed:
            state.reattune_required = False
            _response(effects, state.user_id, session.session_id, "reattune_completed",
                      ctx.event.event_id, ctx.ts_s, posture="restored", **detail)
        else:
            _response(effects, state.user_id, session.session_id, "reattune_failed",
                      ctx.event.event_id, ctx.ts_s,
                      offers=["reset_session_only", "continue_conservative"],
                      posture="conservative", **detail)
    else:
        payload = envelope(reattune_id, state.user_id, session.session_id, ctx.ts_s)
        payload.update(score_kind="reattune_quality", turn=session.n_turns,
                       source_event_id=ctx.event.event_id, **detail)
        effects.outputs.append(Output(OutputKind.SCORE, state.user_id, payload))
    _sustained_low(state, passed, ctx, effects, score)
    return score


def _sustained_low(state: UserState, passed: bool, ctx: StepContext, effects: Effects,
                   score: ReattuneScore) -> None:
    if passed:
        state.low_streak = 0
        state.escalated = False
        return
    state.low_streak += 1
    if state.low_streak >= ctx.config.sustained_low_sessions and not state.escalated:
        state.escalated = True
        session = state.session
        assert session is not None
        out_id = derive_id("escalation", "sustained_low_reattune", state.user_id,
                           ctx.event.event_id)
        payload = envelope(out_id, state.user_id, session.session_id, ctx.ts_s)
        payload.update(kind="sustained_low_reattune", route="continuity_review",
                       sessions=state.low_streak, last_quality=score.quality,
                       threshold=ctx.config.reattune_threshold,
                       cause_event_id=ctx.event.event_id)
        effects.outputs.append(Output(OutputKind.ESCALATION, state.user_id, payload))


def _check_disclosure(state: UserState, ctx: StepContext, effects: Effects) -> None:
    session = state.session
    assert session is not None
    if session.model_change and not session.undisclosed_checked:
        session.undisclosed_checked = True
        if not session.notice_shown:
            _violation(effects, ctx.event, "model_change_undisclosed", "notice_not_shown",
                       ctx.ts_s, session.session_id)


# --------------------------------------------------------------------------- erasure


def _erase(state: UserState, baselines: UserBaselines, kinds: tuple[BaselineKind, ...],
           reason: str, request_id: str, ctx: StepContext, effects: Effects,
           keep_features: tuple[str, ...] | None = None) -> UserBaselines:
    """Ask the shell to erase ``kinds``; the open session no longer folds into a baseline."""
    replacement = None
    if keep_features is not None and baselines.attunement is not None:
        att = baselines.attunement
        meta = next_meta(att.meta, state.user_id, BaselineKind.ATTUNEMENT, ctx.ts_s,
                         att.meta.source_session, att.meta.model, Mode.LIGHT, ctx.config)
        replacement = restrict_features(att, keep_features, meta)
    effects.erasures.append(ErasureCommand(
        state.user_id, ctx.event.session_id, kinds, reason, request_id, ctx.event.event_id,
        ctx.ts_s, replacement))
    if state.session is not None and keep_features is None:
        state.session.foldable = False
    remaining = baselines.without(frozenset(kinds))
    if replacement is not None:
        remaining = replace(remaining, attunement=replacement)
    return remaining


def _downgrade(state: UserState, baselines: UserBaselines, new_mode: Mode, ctx: StepContext,
               effects: Effects) -> UserBaselines:
    old = state.mode
    if old is None or new_mode.rank >= old.rank or not old.keeps_baselines:
        return baselines
    request_id = derive_id("mode_downgrade", state.user_id, ctx.event.event_id)
    if new_mode.keeps_baselines:
        return _erase(state, baselines, (BaselineKind.ATTUNEMENT,), "mode_downgrade",
                      request_id, ctx, effects, keep_features=MODE_FEATURES[new_mode])
    return _erase(state, baselines, tuple(BaselineKind), "mode_downgrade", request_id, ctx,
                  effects)


def erase_kinds_for(erase: MemoryErase) -> tuple[BaselineKind, ...]:
    """Which baselines a ``memory_erase`` reaches (relational memory only).

    >>> erase_kinds_for(MemoryErase("relational", "all", "user_request", "r1"))
    (<BaselineKind.ATTUNEMENT: 'attunement'>, <BaselineKind.SEMANTIC: 'semantic'>)
    >>> erase_kinds_for(MemoryErase("relational", "topic", "user_request", "r1"))
    (<BaselineKind.SEMANTIC: 'semantic'>,)
    >>> erase_kinds_for(MemoryErase("explicit", "all", "user_request", "r1"))
    ()
    """
    if erase.memory_class != "relational":
        return ()
    kinds = []
    if erase.scope == "all" or erase.scope in ATTUNEMENT_CATEGORIES:
        kinds.append(BaselineKind.ATTUNEMENT)
    if erase.scope == "all" or erase.scope in SEMANTIC_CATEGORIES:
        kinds.append(BaselineKind.SEMANTIC)
    return tuple(kinds)


# --------------------------------------------------------------------------- session end


def _end_session(state: UserState, baselines: UserBaselines, ctx: StepContext,
                 effects: Effects, tag: str) -> UserBaselines:
    session = state.session
    assert session is not None
    if session.mode.keeps_baselines:
        if session.looks == 0 and (session.n_turns > 0 or session.referenced):
            _checkpoint(state, baselines, ctx, effects, tag)
        if not session.reattune_done and session.n_turns > 0:
            _reattune(state, baselines, ctx, effects)
        _check_disclosure(state, ctx, effects)
        baselines = _fold_baselines(state, baselines, ctx, effects)
    state.session = None
    return baselines


def _fold_baselines(state: UserState, baselines: UserBaselines, ctx: StepContext,
                    effects: Effects) -> UserBaselines:
    session = state.session
    assert session is not None
    config = ctx.config
    if (session.ephemeral or not session.foldable or state.ladder.hold
            or session.n_turns == 0):
        return baselines
    model = session.model
    if session.model_change and not session.reattune_completed:
        prior = baselines.model()
        model = prior if prior is not None else model
    feats = MODE_FEATURES[session.mode]
    idx = [FEATURES.index(f) for f in feats]

    def meta(prev: BaselineMeta | None, kind: BaselineKind) -> BaselineMeta:
        return next_meta(prev, state.user_id, kind, ctx.ts_s, session.session_id, model,
                         session.mode, config)

    windows = tuple(acc.stats(idx) for acc in session.windows)
    late = np.asarray(session.late_rows)[:, idx].mean(axis=0)
    previous = baselines.attunement
    att = fold_attunement(
        None if state.rebaseline_attunement else previous,
        meta(previous.meta if previous else None, BaselineKind.ATTUNEMENT),
        feats, windows, tuple(float(x) for x in late), config)
    state.rebaseline_attunement = False
    items = dict(baselines.semantic.items) if baselines.semantic else {}
    items.update(session.affirmed)
    sem = SemanticBaseline(
        meta(baselines.semantic.meta if baselines.semantic else None, BaselineKind.SEMANTIC),
        tuple(list(items.items())[-MAX_SEMANTIC_ITEMS:]))
    new = replace(baselines, attunement=att, semantic=sem)
    effects.baseline_writes.extend([att, sem])
    if baselines.safety is None:
        safety = SafetyBaseline(meta(None, BaselineKind.SAFETY), *session.safety)
        effects.baseline_writes.append(safety)
        new = replace(new, safety=safety)
    return new


# --------------------------------------------------------------------------- the fold


def expired_kinds(state: UserState, baselines: UserBaselines, now_s: float,
                  config: DriftConfig) -> tuple[BaselineKind, ...]:
    """Kinds whose baseline went unused for longer than its mode's TTL (event time).

    >>> from drift.model import ModelTriple
    >>> m = next_meta(None, "u", BaselineKind.SAFETY, 0.0, "s", ModelTriple("a", "b", "c"),
    ...               Mode.LIGHT, DriftConfig())
    >>> b = UserBaselines(safety=SafetyBaseline(m, "g", "p", "c"))
    >>> expired_kinds(UserState("u"), b, 29 * 86400.0, DriftConfig())
    ()
    >>> expired_kinds(UserState("u"), b, 31 * 86400.0, DriftConfig())
    (<BaselineKind.SAFETY: 'safety'>,)
    """
    out = []
    for meta in baselines.metas():
        used = max(meta.created_at_s, state.last_used_s)
        if now_s - used > config.ttl_s(meta.mode):
            out.append(meta.kind)
    return tuple(out)


def close_idle(state: UserState, baselines: UserBaselines, now_s: float, config: DriftConfig
               ) -> tuple[Effects, UserBaselines]:
    """Close the open session as ``idle_timeout`` if it has had no event for the idle timeout.

    The close happens at event time ``last event + idle timeout``, so a replay closes
    it identically whether a timer or a later event noticed first.
    """
    effects = Effects()
    session = state.session
    if session is None or session.last_s + config.idle_timeout_s > now_s:
        return effects, baselines
    at = session.last_s + config.idle_timeout_s
    cause = FhrEvent(derive_id("idle", state.user_id, session.session_id), "session_end", at,
                     state.user_id, session.session_id, session.ephemeral,
                     SessionEnd(session.n_turns, "idle_timeout"))
    ctx = StepContext(cause, at, config)
    baselines = _end_session(state, baselines, ctx, effects, "idle_timeout")
    return effects, baselines


def step(state: UserState, event: FhrEvent, baselines: UserBaselines, config: DriftConfig
         ) -> tuple[Effects, UserBaselines]:
    """Apply one event to one user's state; returns the effects and the user's baselines after.

    Duplicated event ids are ignored. Event time never moves backwards: an older
    ``ts`` is processed with the user's clock held where it was.
    """
    effects = Effects()
    if event.event_id in state.recent_ids:
        effects.duplicate = True
        return effects, baselines
    state.recent_ids[event.event_id] = None
    while len(state.recent_ids) > config.recent_event_ids:
        del state.recent_ids[next(iter(state.recent_ids))]
    ts = max(event.ts_s, state.clock_s)
    state.clock_s = ts
    ctx = StepContext(event, ts, config)

    expired = expired_kinds(state, baselines, ts, config)
    if expired:
        request_id = derive_id("ttl_expired", state.user_id, *(k.value for k in expired),
                               *(m.baseline_id for m in baselines.metas()))
        baselines = _erase(state, baselines, expired, "ttl_expired", request_id, ctx, effects)

    idle, baselines = close_idle(state, baselines, ts, config)
    effects.extend(idle)

    body = event.body
    session = state.session
    if session is not None and session.session_id == event.session_id:
        session.last_s = max(session.last_s, ts)
        session.ephemeral = session.ephemeral or event.ephemeral

    handler = _HANDLERS.get(type(body))
    if handler is not None:
        baselines = handler(state, body, baselines, ctx, effects)
    return effects, baselines


def _open_session(state: UserState, ctx: StepContext, effects: Effects) -> SessionState | None:
    session = state.session
    if session is None or session.session_id != ctx.event.session_id:
        effects.orphan = True
        return None
    return session


def _on_session_start(state: UserState, body: Any, baselines: UserBaselines,
                      ctx: StepContext, effects: Effects) -> UserBaselines:
    assert isinstance(body, SessionStart)
    if state.session is not None:
        if state.session.session_id == ctx.event.session_id:
            return baselines
        baselines = _end_session(state, baselines, ctx, effects, "superseded")
    baselines = _downgrade(state, baselines, body.mode, ctx, effects)
    state.mode = body.mode
    state.pending_mode = None
    state.ladder = ladder.new_session(state.ladder)
    session = SessionState(
        ctx.event.session_id, body.mode, ctx.ts_s, ctx.ts_s, body.model,
        (body.gate_config_id, body.drift_policy_id, body.consent_state_id),
        ephemeral=ctx.event.ephemeral,
        windows=[WindowAccumulator() for _ in range(ctx.config.windows)],
    )
    state.session = session
    if not body.mode.keeps_baselines:
        state.durable = False
        return baselines
    if not session.ephemeral:
        state.durable = True
    if baselines.metas():
        state.last_used_s = ctx.ts_s
    if baselines.safety is not None:
        saf = safety_drift(baselines.safety.fields(), session.safety)
        if saf > 0:
            _publish_score(state, baselines, ctx, effects, "session_start", None, None, saf)
    prior = baselines.model()
    if prior is not None and prior != body.model:
        session.model_change = True
        state.reattune_required = True
        common = {"previous_model": _model_dict(prior), "model": _model_dict(body.model)}
        for action in ("model_change_notice", "posture_downgrade"):
            _response(effects, state.user_id, session.session_id, action, ctx.event.event_id,
                      ctx.ts_s, reattune_required=True, **common)
    return baselines


def _model_dict(model: ModelTriple) -> dict[str, Any]:
    return {"model_version": model.model_version, "tokenizer_id": model.tokenizer_id,
            "precision_tag": model.precision_tag, "adapter_id": model.adapter_id}


def _on_turn(state: UserState, body: Any, baselines: UserBaselines, ctx: StepContext,
             effects: Effects) -> UserBaselines:
    assert isinstance(body, Turn)
    session = _open_session(state, ctx, effects)
    if session is None:
        return baselines
    config = ctx.config
    blocking = []
    if body.ae_severity in BLOCKING_SEVERITIES:
        blocking.append("ae_active")
    for name in ("care_override", "care_cooloff", "crisis", "legal_hold"):
        if getattr(body, name):
            blocking.append(name)
    if body.reflection:
        session.high_res_streak = 0
        session.high_res_block = False
    elif body.resonance_depth >= config.high_resonance:
        session.high_res_streak += 1
        if session.high_res_streak >= config.high_resonance_turns:
            session.high_res_block = True
    else:
        session.high_res_streak = 0
    session.blocking = tuple(blocking)
    if not session.mode.keeps_baselines:
        return baselines
    row = _transform_row(body)
    session.n_turns += 1
    w = min((session.n_turns - 1) // config.checkpoint_every, config.windows - 1)
    session.windows[w].add(row)
    session.current_rows.append(row)
    if session.n_turns <= config.reattune_checkpoint_turn:
        session.early_rows.append(row)
    session.late_rows.append(row)
    if len(session.late_rows) > config.late_profile_turns:
        session.late_rows.pop(0)
    n = session.n_turns
    if n >= config.checkpoint_turn and (n - config.checkpoint_turn) % config.checkpoint_every == 0:
        _checkpoint(state, baselines, ctx, effects, f"turn_{n}")
    if n == config.reattune_checkpoint_turn:
        _check_disclosure(state, ctx, effects)
        _reattune(state, baselines, ctx, effects)
    return baselines


def _on_semantic(state: UserState, body: Any, baselines: UserBaselines, ctx: StepContext,
                 effects: Effects) -> UserBaselines:
    assert isinstance(body, Semantic)
    session = _open_session(state, ctx, effects)
    if session is None or not session.mode.keeps_baselines:
        return baselines
    cid = body.commitment_id
    if baselines.semantic is not None and cid in baselines.semantic.ids():
        session.referenced[cid] = body.stance
    if body.stance == "affirm":
        if cid in session.affirmed or len(session.affirmed) < MAX_SEMANTIC_ITEMS:
            session.affirmed[cid] = body.kind
    else:
        session.affirmed.pop(cid, None)
    return baselines


def _on_memory_write(state: UserState, body: Any, baselines: UserBaselines, ctx: StepContext,
                     effects: Effects) -> UserBaselines:
    assert isinstance(body, MemoryWrite)
    if body.memory_class != "relational":
        return baselines
    session = state.session if (state.session is not None
                                and state.session.session_id == ctx.event.session_id) else None
    mode = session.mode if session is not None else state.mode
    event = ctx.event
    if mode in (Mode.STATELESS, Mode.SESSION_ONLY):
        _violation(effects, event, "relational_write_mode_forbidden", f"mode_{mode.value}",
                   ctx.ts_s)
    elif mode is Mode.LIGHT and body.category not in LIGHT_CATEGORIES:
        _violation(effects, event, "relational_write_mode_forbidden",
                   "category_not_permitted_in_light", ctx.ts_s)
    if session is not None:
        reasons = list(session.blocking)
        if session.high_res_block:
            reasons.append("high_resonance_no_reflection")
        if reasons:
            _violation(effects, event, "relational_write_in_blocked_state", reasons[0], ctx.ts_s)
    if mode is Mode.FULL and not body.confirmed:
        _violation(effects, event, "relational_write_unconfirmed", "not_confirmed", ctx.ts_s)
    return baselines


def _on_memory_erase(state: UserState, body: Any, baselines: UserBaselines, ctx: StepContext,
                     effects: Effects) -> UserBaselines:
    assert isinstance(body, MemoryErase)
    kinds = erase_kinds_for(body)
    request_id = body.request_id
    return _erase(state, baselines, kinds, body.reason, request_id, ctx, effects)


def _on_mode_changed(state: UserState, body: Any, baselines: UserBaselines, ctx: StepContext,
                     effects: Effects) -> UserBaselines:
    assert isinstance(body, ModeChanged)
    if not body.retroactive:
        state.pending_mode = body.to_mode
        return baselines
    baselines = _downgrade(state, baselines, body.to_mode, ctx, effects)
    state.mode = body.to_mode
    if state.session is not None:
        state.session.mode = body.to_mode
    return baselines


def _on_notice(state: UserState, body: Any, baselines: UserBaselines, ctx: StepContext,
               effects: Effects) -> UserBaselines:
    assert isinstance(body, NoticeShown)
    session = _open_session(state, ctx, effects)
    if session is not None:
        session.notice_shown = True
    return baselines


def _on_reconfirmed(state: UserState, body: Any, baselines: UserBaselines, ctx: StepContext,
                    effects: Effects) -> UserBaselines:
    assert isinstance(body, BaselineReconfirmed)
    kinds = frozenset(body.kinds)
    state.ladder, lifted = ladder.reconfirm(state.ladder, kinds)
    session = state.session if (state.session is not None
                                and state.session.session_id == ctx.event.session_id) else None
    if lifted:
        _response(effects, state.user_id, ctx.event.session_id, ladder.HOLD_RELEASED,
                  ctx.event.event_id, ctx.ts_s, kinds=sorted(k.value for k in kinds),
                  reconfirmed_event_id=ctx.event.event_id)
    if session is None or not session.mode.keeps_baselines or session.ephemeral:
        return baselines
    config = ctx.config

    def meta(prev: BaselineMeta | None, kind: BaselineKind) -> BaselineMeta:
        return next_meta(prev, state.user_id, kind, ctx.ts_s, session.session_id,
                         baselines.model() or session.model, session.mode, config)

    if BaselineKind.ATTUNEMENT in kinds:
        state.rebaseline_attunement = True
    if BaselineKind.SAFETY in kinds:
        prev = baselines.safety.meta if baselines.safety else None
        safety = SafetyBaseline(meta(prev, BaselineKind.SAFETY), *session.safety)
        effects.baseline_writes.append(safety)
        baselines = replace(baselines, safety=safety)
    if BaselineKind.SEMANTIC in kinds and baselines.semantic is not None:
        broken = {c for c, s in session.referenced.items() if s != "affirm"}
        items = tuple((c, k) for c, k in baselines.semantic.items if c not in broken)
        semantic = SemanticBaseline(meta(baselines.semantic.meta, BaselineKind.SEMANTIC), items)
        effects.baseline_writes.append(semantic)
        baselines = replace(baselines, semantic=semantic)
        session.referenced = {c: s for c, s in session.referenced.items() if c not in broken}
    return baselines


def _on_session_end(state: UserState, body: Any, baselines: UserBaselines, ctx: StepContext,
                    effects: Effects) -> UserBaselines:
    assert isinstance(body, SessionEnd)
    if _open_session(state, ctx, effects) is None:
        return baselines
    return _end_session(state, baselines, ctx, effects, "session_end")


Handler = Callable[[UserState, Any, UserBaselines, StepContext, Effects], UserBaselines]
_HANDLERS: dict[type, Handler] = {
    SessionStart: _on_session_start,
    Turn: _on_turn,
    Semantic: _on_semantic,
    MemoryWrite: _on_memory_write,
    MemoryErase: _on_memory_erase,
    ModeChanged: _on_mode_changed,
    NoticeShown: _on_notice,
    BaselineReconfirmed: _on_reconfirmed,
    SessionEnd: _on_session_end,
}

__all__ = ["AttunementBaseline", "SessionState", "Tier", "UserState", "close_idle",
           "erase_kinds_for", "expired_kinds", "step"]
