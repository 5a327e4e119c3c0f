"""The export API's configuration: organizations, their bearer tokens (hashed) and captures.

A TOML file (``ego-assets serve --config FILE`` or ``EGO_API_CONFIG``)::

    [links]
    ttl_s = 300                      # lifetime of a download link (local and presigned)
    secret_env = "EGO_API_LINK_SECRET"  # HMAC key of local download links (env variable)

    [session]
    cookie_secure = "auto"           # Secure cookie: "auto" (when the request came over
                                     # https), "always" or "never"

    [organizations.holos]
    captures = ["holos-*", "hv-*"]   # capture ids of this organization (fnmatch patterns)
    [organizations.holos.tokens]
    holos-ci = "sha256:9f86d0818..."  # token id = SHA-256 of the token (`hash_token`)

Tokens are stored only as SHA-256 digests; a request's token is digested and looked up,
and logs name the token's id. A capture id matched by no pattern of the caller's
organization is answered 404, exactly like a capture that does not exist.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_ENV = "EGO_API_CONFIG"
DEFAULT_LINK_SECRET_ENV = "EGO_API_LINK_SECRET"
DEFAULT_LINK_TTL_S = 300  # a link is a bearer capability: short-lived
COOKIE_SECURE = ("auto", "always", "never")


class ConfigError(ValueError):
    """A malformed API configuration; the message names the file and the entry."""


def hash_token(token: str) -> str:
    """``sha256:<hex>`` of a bearer token: what the configuration stores."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a request: the token's id and its organization."""

    token_id: str
    organization: str


@dataclass(frozen=True, slots=True)
class Organization:
    name: str
    captures: tuple[str, ...]

    def owns(self, capture_id: str) -> bool:
        return any(fnmatch.fnmatchcase(capture_id, p) for p in self.captures)


@dataclass(frozen=True)
class ApiConfig:
    organizations: dict[str, Organization]
    # token digest (hex) -> caller
    tokens: dict[str, Caller]
    link_secret: bytes
    link_ttl_s: int = DEFAULT_LINK_TTL_S
    source: str = "<memory>"
    extra: dict[str, Any] = field(default_factory=dict)
    # the environment variable the link/session key was read from
    secret_env: str = DEFAULT_LINK_SECRET_ENV
    # when the session cookie is marked Secure (`COOKIE_SECURE`)
    cookie_secure: str = "auto"

    def caller(self, token: str) -> Caller | None:
        """The caller holding ``token`` (None for an unknown token)."""
        return self.tokens.get(hash_token(token))

    def owns(self, caller: Caller, capture_id: str) -> bool:
        return self.organizations[caller.organization].owns(capture_id)


def parse_config(
    doc: Mapping[str, Any], source: str = "<memory>", environ: Mapping[str, str] | None = None
) -> ApiConfig:
    """Check and build the configuration from a parsed TOML document."""
    environ = os.environ if environ is None else environ
    orgs_doc = doc.get("organizations")
    if not isinstance(orgs_doc, Mapping) or not orgs_doc:
        raise ConfigError(f"{source}: [organizations.<name>] needs at least one organization")
    organizations: dict[str, Organization] = {}
    tokens: dict[str, Caller] = {}
    for name, body in orgs_doc.items():
        where = f"{source}: organizations.{name}"
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: must be a table")
        unknown = sorted(set(body) - {"captures", "tokens"})
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (keys: captures, tokens)")
        captures = body.get("captures", [])
        if not isinstance(captures, list) or not all(isinstance(p, str) for p in captures):
            raise ConfigError(f"{where}.captures: must be a list of glob patterns")
        organizations[name] = Organization(name, tuple(captures))
        for token_id, digest in dict(body.get("tokens", {})).items():
            if not (isinstance(digest, str) and digest.startswith("sha256:")):
                raise ConfigError(
                    f"{where}.tokens.{token_id}: must be 'sha256:<64 hex digits>' "
                    "(ego-assets serve --hash-token prints it)"
                )
            hexdigest = digest.removeprefix("sha256:")
            if len(hexdigest) != 64 or set(hexdigest) - set("0123456789abcdef"):
                raise ConfigError(f"{where}.tokens.{token_id}: not a SHA-256 hex digest")
            if digest in tokens:
                raise ConfigError(f"{where}.tokens.{token_id}: the same token is configured twice")
            tokens[digest] = Caller(str(token_id), name)
    links = dict(doc.get("links", {}))
    ttl = int(links.get("ttl_s", DEFAULT_LINK_TTL_S))
    if ttl < 1:
        raise ConfigError(f"{source}: links.ttl_s must be >= 1")
    secret_env = str(links.get("secret_env", DEFAULT_LINK_SECRET_ENV))
    secret_text = environ.get(secret_env, "")
    # Without a configured secret, links are signed with a per-process key (valid until
    # the server restarts; set the variable when several replicas serve one deployment).
    secret = secret_text.encode() if secret_text else secrets.token_bytes(32)
    session = dict(doc.get("session", {}))
    unknown = sorted(set(session) - {"cookie_secure"})
    if unknown:
        raise ConfigError(f"{source}: session.{unknown[0]}: unknown key (keys: cookie_secure)")
    cookie_secure = session.get("cookie_secure", "auto")
    if cookie_secure not in COOKIE_SECURE:
        raise ConfigError(f"{source}: session.cookie_secure must be one of {COOKIE_SECURE}")
    return ApiConfig(
        organizations,
        tokens,
        secret,
        ttl,
        source,
        secret_env=secret_env,
        cookie_secure=cookie_secure,
    )


def load_config(path: str | Path | None = None) -> ApiConfig:
    """Read the TOML file ``path`` (default: ``$EGO_API_CONFIG``)."""
    location = path or os.environ.get(CONFIG_ENV)
    if not location:
        raise ConfigError(f"no API configuration: pass --config or set {CONFIG_ENV}")
    text = Path(location).read_text()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{location}: not TOML ({exc})") from exc
    return parse_config(doc, str(location))
