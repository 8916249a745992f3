"""New baseline versions: a finished session folded in, or a re-confirmation by the user.

:func:`fold_session` runs when a session closes; :func:`reconfirm` applies
``baseline_reconfirmed``, the only event that lifts a HOLD or moves the safety
baseline. Both return the user's new baselines and the versions to store.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping

from drift import ladder
from drift.baseline import (
    Baseline,
    BaselineMeta,
    SafetyBaseline,
    SemanticBaseline,
    UserBaselines,
    derive_id,
    fold_attunement,
    next_meta,
    window_table,
)
from drift.checkpoint import StepContext
from drift.evolve import evolve
from drift.model import FEATURES, MODE_FEATURES, BaselineKind, ModelTriple
from drift.outputs import Action, ReleaseDetail, Response
from drift.state import SessionState, UserState
from drift.sums import column_means

MAX_SEMANTIC_ITEMS = 256


def _meta(prev: Baseline | None, kind: BaselineKind, state: UserState, session: SessionState,
          model: ModelTriple, ctx: StepContext) -> BaselineMeta:
    return next_meta(prev.meta if prev is not None else None, state.user_id, kind, ctx.ts_s,
                     session.session_id, model, session.mode, ctx.config)


def _semantic(prev: SemanticBaseline | None, items: Mapping[str, str], state: UserState,
              session: SessionState, model: ModelTriple, ctx: StepContext) -> SemanticBaseline:
    kept = tuple(items.items())[-MAX_SEMANTIC_ITEMS:]
    return SemanticBaseline(_meta(prev, BaselineKind.SEMANTIC, state, session, model, ctx), kept)


def session_numbers(session: SessionState, idx: list[int]
                    ) -> tuple[array[float], tuple[float, ...]]:
    """What a closing session folds into its attunement version, over the features at
    ``idx``: its windows' statistics as the baseline's table holds them
    (:func:`~drift.baseline.window_table`), and its late profile."""
    windows = tuple(acc.stats(idx) for acc in session.turns.windows)
    late = column_means(session.turns.late_rows)
    return window_table(windows, len(idx)), tuple(late[i] for i in idx)


def fold_session(state: UserState, baselines: UserBaselines, ctx: StepContext
                 ) -> tuple[UserState, UserBaselines, tuple[Baseline, ...]]:
    """Fold the closing session into new attunement and semantic versions (and a first safety).

    Nothing folds from an ephemeral session, one under HOLD, one whose baselines were
    erased while it was open, or one without turns. After a failed re-attunement the
    versions keep the model the continuity was established with.
    """
    session = state.session
    assert session is not None
    if (session.ephemeral or not session.foldable or state.ladder.hold
            or session.turns.n_turns == 0):
        return state, baselines, ()
    model = session.model
    if session.model_change.detected and not session.model_change.reattune_completed:
        model = baselines.model() or model
    feats = MODE_FEATURES[session.mode]
    idx = [FEATURES.index(f) for f in feats]
    table, late = (ctx.session_numbers or session_numbers)(session, idx)
    previous = baselines.attunement
    att = fold_attunement(
        None if state.rebaseline_attunement else previous,
        _meta(previous, BaselineKind.ATTUNEMENT, state, session, model, ctx),
        feats, table, late, ctx.config)
    items = dict(baselines.semantic.items) if baselines.semantic else {}
    items.update(session.affirmed)
    sem = _semantic(baselines.semantic, items, state, session, model, ctx)
    writes: tuple[Baseline, ...] = (att, sem)
    new = evolve(baselines, attunement=att, semantic=sem)
    if baselines.safety is None:
        safety = SafetyBaseline(_meta(None, BaselineKind.SAFETY, state, session, model, ctx),
                                *session.safety)
        writes += (safety,)
        new = evolve(new, safety=safety)
    return evolve(state, rebaseline_attunement=False), new, writes


def reconfirm(state: UserState, baselines: UserBaselines, kinds: frozenset[BaselineKind],
              ctx: StepContext
              ) -> tuple[UserState, UserBaselines, tuple[Baseline, ...], tuple[Response, ...]]:
    """Apply ``baseline_reconfirmed`` for ``kinds``.

    A HOLD lifts when ``kinds`` covers it (``hold_released``, citing this event).
    In the open baselining session: the attunement baseline starts over at the
    session's end, the safety baseline takes the session's fields, and the
    semantic baseline drops the commitments the session broke.
    """
    held, lifted = ladder.reconfirm(state.ladder, kinds)
    state = evolve(state, ladder=held)
    released: tuple[Response, ...] = ()
    if lifted:
        action = Action.HOLD_RELEASED
        released = (Response(
            derive_id("response", action.value, state.user_id, ctx.session_id, ctx.event_id),
            state.user_id, ctx.session_id, ctx.ts_s, action, ctx.event_id,
            ReleaseDetail(tuple(sorted(kinds, key=lambda k: k.value)), ctx.event_id)),)
    session = state.open_session(ctx.session_id)
    if session is None or not session.mode.keeps_baselines or session.ephemeral:
        return state, baselines, (), released
    model = baselines.model() or session.model
    writes: tuple[Baseline, ...] = ()
    if BaselineKind.ATTUNEMENT in kinds:
        state = evolve(state, rebaseline_attunement=True)
    if BaselineKind.SAFETY in kinds:
        safety = SafetyBaseline(
            _meta(baselines.safety, BaselineKind.SAFETY, state, session, model, ctx),
            *session.safety)
        writes += (safety,)
        baselines = evolve(baselines, safety=safety)
    if BaselineKind.SEMANTIC in kinds and baselines.semantic is not None:
        broken = {c for c, s in session.referenced.items() if s != "affirm"}
        items = {c: k for c, k in baselines.semantic.items if c not in broken}
        semantic = _semantic(baselines.semantic, items, state, session, model, ctx)
        writes += (semantic,)
        baselines = evolve(baselines, semantic=semantic)
        referenced = {c: s for c, s in session.referenced.items() if c not in broken}
        state = evolve(state, session=evolve(session, referenced=referenced))
    return state, baselines, writes, released
