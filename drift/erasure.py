"""Forgetting (SPEC section 8): erasure requests, mode downgrades, TTL expiry, receipts.

Each function returns the user's baselines without what it erased and the
:class:`~drift.outputs.ErasureCommand` the shell carries out on every stored
copy; :func:`receipt` turns the store's verified result into the published receipt.
"""

from __future__ import annotations

from drift.baseline import UserBaselines, derive_id, next_meta, restrict_features
from drift.checkpoint import StepContext
from drift.evolve import evolve
from drift.model import (
    ATTUNEMENT_CATEGORIES,
    MODE_FEATURES,
    SEMANTIC_CATEGORIES,
    BaselineKind,
    DriftConfig,
    MemoryErase,
    Mode,
)
from drift.outputs import ErasureCommand, ErasureReceipt, ErasureResult
from drift.state import UserState

#: What the service checked before it calls an erasure verified.
CHECKS = ("baseline_versions re-read: none left", "database file rewritten")
TTL_EXPIRED = "ttl_expired"


def erase(state: UserState, baselines: UserBaselines, kinds: tuple[BaselineKind, ...],
          reason: str, request_id: str, ctx: StepContext,
          keep_features: tuple[str, ...] | None = None,
          ) -> tuple[UserState, UserBaselines, ErasureCommand]:
    """Erase ``kinds``; the open session no longer folds into a baseline.

    With ``keep_features`` (a downgrade that keeps a restricted attunement baseline)
    the attunement baseline is replaced by a version holding only those features,
    and the open session may still fold.
    """
    replacement = None
    if keep_features is not None and baselines.attunement is not None:
        att = baselines.attunement
        meta = next_meta(att.meta, state.user_id, BaselineKind.ATTUNEMENT, ctx.ts_s,
                         att.meta.source_session, att.meta.model, Mode.LIGHT, ctx.config)
        replacement = restrict_features(att, keep_features, meta)
    command = ErasureCommand(state.user_id, ctx.session_id, kinds, reason, request_id,
                             ctx.event_id, ctx.ts_s, replacement)
    if state.session is not None and keep_features is None:
        state = evolve(state, session=evolve(state.session, foldable=False))
    remaining = baselines.without(frozenset(kinds))
    if replacement is not None:
        remaining = evolve(remaining, attunement=replacement)
    return state, remaining, command


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


def downgrade(state: UserState, baselines: UserBaselines, new_mode: Mode, ctx: StepContext
              ) -> tuple[UserState, UserBaselines, tuple[ErasureCommand, ...]]:
    """Erase what ``new_mode`` no longer permits (SPEC section 3); nothing on an upgrade."""
    old = state.mode
    if old is None or new_mode.rank >= old.rank or not old.keeps_baselines:
        return state, baselines, ()
    request_id = derive_id("mode_downgrade", state.user_id, ctx.event_id)
    if new_mode.keeps_baselines:
        state, baselines, command = erase(state, baselines, (BaselineKind.ATTUNEMENT,),
                                          "mode_downgrade", request_id, ctx,
                                          keep_features=MODE_FEATURES[new_mode])
    else:
        state, baselines, command = erase(state, baselines, tuple(BaselineKind),
                                          "mode_downgrade", request_id, ctx)
    return state, baselines, (command,)


def expired_kinds(state: UserState, baselines: UserBaselines, now_s: float,
                  config: DriftConfig) -> tuple[BaselineKind, ...]:
    """Kinds whose baseline went unused for longer than its mode's TTL (event time).

    >>> from drift.baseline import SafetyBaseline
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


def expiry_due(state: UserState, baselines: UserBaselines, now_s: float, config: DriftConfig
               ) -> bool:
    """Whether a baseline is past its TTL by ``now_s``: :func:`expired_kinds`, after a cheap
    test of the user's last use that answers most events."""
    return now_s - state.last_used_s > min(config.ttl_light_s, config.ttl_full_s) and bool(
        expired_kinds(state, baselines, now_s, config))


def expire(state: UserState, baselines: UserBaselines, now_s: float, config: DriftConfig,
           cause: StepContext | None) -> tuple[UserState, UserBaselines, tuple[ErasureCommand, ...]]:
    """Erase the baselines that went unused past their TTL, as of event time ``now_s``.

    ``cause`` is the event that noticed; the timer passes None, and the request id
    (derived from what expired) is then the cause.
    """
    kinds = expired_kinds(state, baselines, now_s, config)
    if not kinds:
        return state, baselines, ()
    request_id = derive_id(TTL_EXPIRED, state.user_id, *(k.value for k in kinds),
                           *(m.baseline_id for m in baselines.metas()))
    if cause is None:
        session_id = state.session.session_id if state.session is not None else ""
        cause = StepContext(request_id, session_id, now_s, config)
    state, baselines, command = erase(state, baselines, kinds, TTL_EXPIRED, request_id, cause)
    return state, baselines, (command,)


def operator_erase(state: UserState, baselines: UserBaselines, request_id: str,
                   config: DriftConfig) -> tuple[UserState, UserBaselines, ErasureCommand]:
    """An operator's erase of every baseline of a user (the review API), at the user's clock."""
    ctx = StepContext(f"api:{request_id}", "", state.clock_s, config)
    return erase(state, baselines, tuple(BaselineKind), "operator", request_id, ctx)


def receipt(command: ErasureCommand, result: ErasureResult) -> ErasureReceipt:
    """The published receipt of an erasure: per-target outcomes as the store verified them."""
    replacement = command.replacement.features if command.replacement is not None else None
    return ErasureReceipt(
        derive_id("receipt", command.request_id), command.user_id, command.session_id,
        command.ts_s, command.request_id, command.reason, command.cause_event_id,
        result.outcome, result.targets, replacement, CHECKS)
