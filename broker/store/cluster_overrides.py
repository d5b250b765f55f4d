"""Cluster overrides in the database: admins create, replace and delete the rules (broker.engine.overrides); the
dispatcher and the dry run read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from broker.engine.overrides import (FIELDS, OverrideError, OverrideRule, RuleError, apply_overrides, parse_rule,
                                     rules_for)
from broker.store.db.models import Cluster, ClusterOverride, utcnow
from broker.store.errors import Conflict, Invalid, NotFound
from clusters.jobsets import member_copy


def rule_of(row: ClusterOverride) -> OverrideRule:
    return parse_rule(as_written(row))


def as_written(row: ClusterOverride) -> dict[str, Any]:
    """The rule as the admin wrote it (and the API shows it)."""
    target = {"cluster": row.cluster} if row.cluster is not None else {"selector": row.selector}
    return {"name": row.name, "order": row.apply_order, **target, **row.changes,
            **({"description": row.description} if row.description else {})}


def stored_rules(session: Session) -> list[OverrideRule]:
    return [rule_of(row) for row in session.scalars(select(ClusterOverride))]


def cluster_labels(session: Session) -> dict[str, dict[str, str]]:
    """Every cluster's labels by name: what the rules' selectors match."""
    return {name: labels or {} for name, labels in session.execute(select(Cluster.name, Cluster.labels))}


@dataclass(frozen=True)
class Preview:
    """What one placement's member would receive: the rules that rewrite it, and the JobSet or the refusal."""

    rules: tuple[str, ...]
    manifest: dict[str, Any] | None
    error: str | None


def preview(rules: list[OverrideRule], labels: Mapping[str, str], manifest: Mapping[str, Any], *, namespace: str,
            cluster: str, part: str, pod_security: str) -> Preview:
    """A dry run's view of the copy a cluster would be sent (before the broker's labels and node pins), held to the
    tenant's Pod Security level as the dispatcher holds it."""
    try:
        jobset, applied = apply_overrides(rules, cluster, labels, member_copy(manifest, namespace=namespace, part=part),
                                          pod_security)
    except OverrideError as exc:
        return Preview(tuple(r.name for r in rules_for(rules, cluster, labels)), None, str(exc))
    return Preview(applied, jobset, None)


def list_overrides(session: Session) -> list[ClusterOverride]:
    return list(session.scalars(select(ClusterOverride).order_by(ClusterOverride.apply_order, ClusterOverride.name)))


def get_override(session: Session, name: str) -> ClusterOverride:
    row = session.scalar(select(ClusterOverride).where(ClusterOverride.name == name))
    if row is None:
        raise NotFound(f"override rule {name!r} does not exist")
    return row


def _checked(raw: Mapping[str, Any]) -> OverrideRule:
    try:
        return parse_rule(raw)
    except RuleError as exc:
        raise Invalid(exc.path, exc.message) from None


def _write(row: ClusterOverride, rule: OverrideRule, raw: Mapping[str, Any]) -> None:
    row.apply_order, row.cluster = rule.order, rule.cluster
    row.selector = None if rule.cluster is not None else raw["selector"]
    row.changes = {field: raw[field] for field in FIELDS if field in rule.changes}
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        raise Invalid("description", "must be a string")
    row.description = description or None
    row.updated_at = utcnow()


def create_override(session: Session, raw: Mapping[str, Any]) -> ClusterOverride:
    rule = _checked(raw)
    if session.scalar(select(ClusterOverride.id).where(ClusterOverride.name == rule.name)) is not None:
        raise Conflict(f"override rule {rule.name!r} exists; replace it with PUT /overrides/{rule.name}")
    row = ClusterOverride(name=rule.name)
    _write(row, rule, raw)
    session.add(row)
    try:
        session.flush()
    except IntegrityError:  # a concurrent create of the same name
        raise Conflict(f"override rule {rule.name!r} exists; replace it with PUT /overrides/{rule.name}") from None
    return row


def replace_override(session: Session, name: str, raw: Mapping[str, Any]) -> ClusterOverride:
    row = get_override(session, name)
    if raw.get("name", name) != name:
        raise Invalid("name", f"the rule in the body is {raw.get('name')!r}, the path names {name!r}; a rule "
                              "keeps its name (delete it and create another to rename it)")
    rule = _checked({**raw, "name": name})
    _write(row, rule, raw)
    return row


def delete_override(session: Session, name: str) -> None:
    row = get_override(session, name)
    session.delete(row)
