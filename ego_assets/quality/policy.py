"""The export policy: which metric verdicts block which exports (``policy.toml``).

A `Policy` is a list of `Rule`s. A rule matches a metric when the metric's verdict equals
the rule's ``level`` and its name (or ``<scope>/<name>`` key) is listed, ``"*"`` matching
every metric; it then blocks the rule's exports (``"*"``: all). A verdict that no rule
matches never blocks. The packaged default blocks every export on any ``fail`` and never
on ``warn``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ego_assets.exports.registry import policy_keys

POLICY_FILE = "policy.toml"
ANY = "*"
LEVELS = ("warn", "fail")


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: metrics at ``level`` block ``exports``.

    Attributes:
        level: ``"warn"`` or ``"fail"``.
        metrics: metric names or ``<scope>/<name>`` keys; ``("*",)`` = every metric.
        exports: export names (`registry.policy_keys`); ``("*",)`` = every export.
    """

    level: str
    metrics: tuple[str, ...]
    exports: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"policy rule: level {self.level!r} is not one of {LEVELS}")
        if not self.metrics or not self.exports:
            raise ValueError("policy rule: metrics and exports must not be empty")
        known = policy_keys()
        unknown = sorted(set(self.exports) - {ANY, *known})
        if unknown:
            raise ValueError(f"policy rule: unknown exports {unknown}; known: {list(known)}")

    def matches(self, name: str, key: str, status: str) -> bool:
        """Whether a metric (``name``, ``key`` = scope/name) at verdict ``status`` matches."""
        return status == self.level and (
            ANY in self.metrics or name in self.metrics or key in self.metrics
        )

    @property
    def blocked_exports(self) -> tuple[str, ...]:
        return policy_keys() if ANY in self.exports else self.exports


@dataclass(frozen=True, slots=True)
class Policy:
    """The export policy: its ``version`` and rules, in file order."""

    version: int
    rules: tuple[Rule, ...]

    def blocks(self, name: str, key: str, status: str) -> tuple[str, ...]:
        """Exports blocked by one metric verdict (empty: it blocks nothing), `policy_keys` order."""
        blocked = {e for r in self.rules if r.matches(name, key, status) for e in r.blocked_exports}
        return tuple(e for e in policy_keys() if e in blocked)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        """Build from the parsed TOML document (ValueError naming the bad key)."""
        try:
            rules = tuple(
                Rule(str(r["level"]), tuple(map(str, r["metrics"])), tuple(map(str, r["exports"])))
                for r in data.get("rules", [])
            )
            return cls(version=int(data["version"]), rules=rules)
        except KeyError as exc:
            raise ValueError(f"policy: missing key {exc.args[0]!r}") from exc


@cache
def default_policy() -> Policy:
    """The packaged ``ego_assets/quality/policy.toml`` (read once per process)."""
    text = resources.files("ego_assets.quality").joinpath(POLICY_FILE).read_text("utf-8")
    return Policy.from_dict(tomllib.loads(text))
