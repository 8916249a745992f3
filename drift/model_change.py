"""The model-change protocol (SPEC section 5): detection, disclosure, re-attunement, escalation.

At ``session_start`` a changed model triple opens the protocol (:func:`detect`);
at the re-attunement checkpoint the disclosure is checked
(:func:`check_disclosure`) and the session's re-attunement is scored
(:func:`reattune`), which also drives the sustained-low escalation.
"""

from __future__ import annotations

from drift.baseline import UserBaselines, derive_id
from drift.checkpoint import StepContext, checkpoint, feature_layout
from drift.composite import semantic_drift
from drift.evolve import evolve
from drift.governance import violation
from drift.model import ModelTriple
from drift.outputs import (
    Action,
    BaselineRef,
    Escalation,
    EscalationKind,
    ModelChangeDetail,
    Offer,
    Output,
    Posture,
    ReattuneDetail,
    Reattunement,
    ReattuneQualityScore,
    Response,
    Rule,
)
from drift.reattune import Rows
from drift.state import ModelChangeProgress, UserState

OFFERS = (Offer.RESET_SESSION_ONLY, Offer.CONTINUE_CONSERVATIVE)
ROUTE = "continuity_review"


def _response(state: UserState, action: Action, ctx: StepContext,
              detail: ModelChangeDetail | ReattuneDetail) -> Response:
    assert state.session is not None
    session_id = state.session.session_id
    return Response(derive_id("response", action.value, state.user_id, session_id, ctx.event_id),
                    state.user_id, session_id, ctx.ts_s, action, ctx.event_id, detail)


def detect(state: UserState, baselines: UserBaselines, model: ModelTriple, ctx: StepContext
           ) -> tuple[UserState, tuple[Output, ...]]:
    """At session start: a model other than the baselines' opens the protocol."""
    prior = baselines.model()
    session = state.session
    if prior is None or prior == model or session is None:
        return state, ()
    session = evolve(session, model_change=ModelChangeProgress(detected=True))
    state = evolve(state, session=session, reattune_required=True)
    detail = ModelChangeDetail(True, prior, model)
    return state, tuple(_response(state, action, ctx, detail)
                        for action in (Action.MODEL_CHANGE_NOTICE, Action.POSTURE_DOWNGRADE))


def notice_shown(state: UserState) -> UserState:
    session = state.session
    assert session is not None
    return evolve(state, session=evolve(
        session, model_change=evolve(session.model_change, notice_shown=True)))


def check_disclosure(state: UserState, ctx: StepContext) -> tuple[UserState, tuple[Output, ...]]:
    """Once per changed session: no notice shown by now is ``model_change_undisclosed``."""
    session = state.session
    assert session is not None
    progress = session.model_change
    if not progress.detected or progress.disclosure_checked:
        return state, ()
    state = evolve(state, session=evolve(
        session, model_change=evolve(progress, disclosure_checked=True)))
    if progress.notice_shown:
        return state, ()
    return state, (violation(state.user_id, Rule.MODEL_CHANGE_UNDISCLOSED, "notice_not_shown",
                             ctx, session.session_id),)


def turn_reached(state: UserState, baselines: UserBaselines, ctx: StepContext
                 ) -> tuple[UserState, tuple[Output, ...]]:
    """What the turn just added to the open session's log reaches: a checkpoint (tagged with
    the turn's number), and at the re-attunement turn the disclosure check and the
    re-attunement. The reference fold (:func:`drift.fold.step`) and the compiled kernel's
    caller both score turns here."""
    session = state.session
    assert session is not None
    config, n = ctx.config, session.turns.n_turns
    outputs: tuple[Output, ...] = ()
    if n >= config.checkpoint_turn and (n - config.checkpoint_turn) % config.checkpoint_every == 0:
        state, outputs = checkpoint(state, baselines, ctx, f"turn_{n}")
    if n == config.reattune_checkpoint_turn:
        state, disclosed = check_disclosure(state, ctx)
        state, reattuned = reattune(state, baselines, ctx)
        outputs += disclosed + reattuned
    return state, outputs


def reattune(state: UserState, baselines: UserBaselines, ctx: StepContext
             ) -> tuple[UserState, tuple[Output, ...]]:
    """Score how the session re-joins the prior late profile; respond and track the streak."""
    session = state.session
    assert session is not None
    config = ctx.config
    progress = evolve(session.model_change, reattune_done=True)
    base = baselines.attunement
    layout = (feature_layout(session.mode.value, base.features)
              if base is not None and base.late_profile else None)
    early: Rows = ()
    if layout is not None and layout.features:
        early = ([[row[c] for c in layout.cols] for row in session.turns.early_rows]
                 if ctx.early is None else ctx.early(layout.cols))
    if layout is None or not len(early):
        return evolve(state, session=evolve(session, model_change=progress)), ()
    assert base is not None
    feats, base_idx = layout.features, layout.base_idx
    late = [base.late_profile[i] for i in base_idx]
    turn_sd = base.turn_sd() if ctx.turn_sd is None else ctx.turn_sd(base)
    sd = [turn_sd[i] for i in base_idx]
    sem = semantic_drift(session.referenced) if baselines.semantic is not None else None
    trust_index = feats.index("trust") if "trust" in feats else None
    result = Reattunement(ctx.reattune(early, late, sd, trust_index, sem, config),
                          config.reattune_threshold,
                          derive_id("reattune", state.user_id, session.session_id, ctx.event_id),
                          BaselineRef.of(base.meta))
    passed = result.passed
    required = state.reattune_required
    out: Output
    if progress.detected:
        progress = evolve(progress, reattune_completed=passed)
        if passed:
            out = _response(state, Action.REATTUNE_COMPLETED, ctx,
                            ReattuneDetail(Posture.RESTORED, (), result))
            required = False
        else:
            out = _response(state, Action.REATTUNE_FAILED, ctx,
                            ReattuneDetail(Posture.CONSERVATIVE, OFFERS, result))
    else:
        out = ReattuneQualityScore(result.reattune_id, state.user_id, session.session_id,
                                   ctx.ts_s, session.turns.n_turns, ctx.event_id, result)
    session = evolve(session, model_change=progress, reattune_quality=result.score.quality)
    state, escalations = sustained_low(
        evolve(state, session=session, reattune_required=required), result, ctx)
    return state, (out, *escalations)


def sustained_low(state: UserState, result: Reattunement, ctx: StepContext
                  ) -> tuple[UserState, tuple[Output, ...]]:
    """Count consecutive scored sessions below the threshold; escalate once per streak."""
    if result.passed:
        return evolve(state, low_streak=0, escalated=False), ()
    streak = state.low_streak + 1
    if streak < ctx.config.sustained_low_sessions or state.escalated:
        return evolve(state, low_streak=streak), ()
    session = state.session
    assert session is not None
    kind = EscalationKind.SUSTAINED_LOW_REATTUNE
    escalation = Escalation(
        derive_id("escalation", kind.value, state.user_id, ctx.event_id), state.user_id,
        session.session_id, ctx.ts_s, kind, ROUTE, streak, result.score.quality,
        result.threshold, ctx.event_id)
    return evolve(state, low_streak=streak, escalated=True), (escalation,)
