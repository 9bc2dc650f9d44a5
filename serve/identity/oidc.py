"""Who is asking: an API key (serve/identity/keys.py), or a bearer token from the organisation's
identity provider (OIDC: a JWT signed with one of the keys the issuer publishes).

A token is checked by PyJWT against the issuer's JWKS (found through its discovery document,
``<issuer>/.well-known/openid-configuration``, unless ``jwks_url`` is set), which PyJWT caches
and fetches again when a token names a key id it does not know (key rotation). Only the
asymmetric algorithms of ``algorithms`` are accepted: ``alg: none`` and HMAC (a token "signed"
with the issuer's public key as a shared secret) are refused before any key is looked at. The
claims give the tenant, the user, the groups and the scopes; the identity is then used exactly
as a key is (budgets and usage under ``oidc:<user>``). Every refusal is a 401 that says why.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from index.errors import AuthenticationError, GroundedError
from index.store.tenants import validate_tenant
from serve.identity.keys import PREFIX, SCOPES, ApiKey, KeyStore

ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC"}  # the JWK key type each algorithm needs


class OidcConfig(BaseModel):
    """Bearer tokens from an identity provider (OIDC / JWT), beside API keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str = Field(description="The issuer URL; a token's iss must equal it.")
    audience: str = Field(description="A token's aud must name it (Grounded's client id).")
    jwks_url: str | None = Field(
        None, description="Where the signing keys are; default: the discovery document's."
    )
    algorithms: tuple[str, ...] = Field(("RS256", "ES256"), min_length=1)
    tenant_claim: str = Field("tenant", description="The claim that names the tenant.")
    tenant: str | None = Field(
        None, description="The tenant of every token without a tenant claim (one-tenant IdPs)."
    )
    tenants: tuple[str, ...] | None = Field(
        None,
        description="The tenants this issuer may sign for; others are refused (this or "
        "tenant is required).",
    )
    user_claim: str = "sub"
    groups_claim: str = "groups"
    scopes_claim: str = Field("scope", description="A space-separated string or a list.")
    scope_map: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Claim values to Grounded scopes ({'rag-readers': ['query']}); values "
        "named query, ingest or admin count as themselves.",
    )
    leeway_s: float = Field(30.0, ge=0, description="Clock skew allowed on exp and nbf.")
    jwks_cache_s: int = Field(300, gt=0, description="How long fetched keys are trusted.")
    jwks_refetch_s: float = Field(
        30.0,
        ge=0,
        description="A token naming an unknown key id fetches the keys again at "
        "most this often (rotation is picked up; a flood of made-up ids is not a flood of "
        "fetches).",
    )

    @model_validator(mode="after")
    def _names_its_tenants(self) -> OidcConfig:
        if self.tenant is None and not self.tenants:
            raise ValueError(
                "name the tenants this issuer may sign for: tenants: [acme, ...] (or tenant: "
                "acme for an identity provider of one tenant); without either, a token could "
                "name any tenant"
            )
        return self

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, algorithms: tuple[str, ...]) -> tuple[str, ...]:
        refused = [a for a in algorithms if a not in ASYMMETRIC]
        if refused:
            raise ValueError(
                f"{refused} not accepted: only asymmetric algorithms ({', '.join(ASYMMETRIC)}); "
                "a shared-secret or unsigned token could be forged by anyone with the public key"
            )
        return algorithms


class AuthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    oidc: OidcConfig | None = Field(None, description="Accept the IdP's tokens (off: keys only).")


class Authenticator:
    """The caller's identity from an ``Authorization: Bearer ...`` header: a Grounded API key
    (``gk-...``), else, when ``oidc`` is configured, the identity provider's token."""

    def __init__(self, keys: KeyStore, oidc: OidcConfig | None = None) -> None:
        self.keys, self.oidc = keys, oidc

    def authenticate(self, authorization: str | None) -> ApiKey:
        _, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if self.oidc is None or token.startswith(PREFIX) or not token:
            return self.keys.authenticate(authorization)
        return self._identity(self._claims(token))

    @cached_property
    def _jwks(self):
        import jwt

        url = self.oidc.jwks_url or _discover(self.oidc.issuer)
        return jwt.PyJWKClient(url, cache_keys=True, lifespan=self.oidc.jwks_cache_s, timeout=10,
                               cooldown_duration=self.oidc.jwks_refetch_s)  # fmt: skip

    def _claims(self, token: str) -> dict[str, Any]:
        import jwt

        oidc = self.oidc
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:  # not JSON, a kid that is not a string, crit
            raise AuthenticationError(f"not an API key nor a valid JWT ({exc})") from exc
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in oidc.algorithms:
            raise AuthenticationError(
                f"token refused: algorithm {algorithm!r} is not accepted "
                f"(auth.oidc.algorithms: {', '.join(oidc.algorithms)})"
            )
        try:
            key = self._jwks.get_signing_key(header.get("kid"))
        except jwt.PyJWKClientConnectionError as exc:
            raise _unavailable(oidc.issuer, exc) from exc
        except jwt.PyJWKClientError as exc:
            raise AuthenticationError(
                f"token refused: signed with a key {oidc.issuer} does not publish "
                f"(kid {header.get('kid')!r})"
            ) from exc
        if KEY_TYPES[algorithm[:2]] != key.key_type:  # else PyJWT fails on the key's format
            raise AuthenticationError(
                f"token refused: algorithm {algorithm} does not fit the key it names "
                f"(kid {header.get('kid')!r} is an {key.key_type} key)"
            )
        try:
            return jwt.decode(
                token, key.key, algorithms=list(oidc.algorithms), audience=oidc.audience,
                issuer=oidc.issuer, leeway=oidc.leeway_s,
                options={"require": ["exp", "iss", "aud"]},
            )  # fmt: skip
        except (TypeError, ValueError) as exc:  # a key PyJWT cannot use for this token
            raise AuthenticationError(f"token refused: it cannot be verified ({exc})") from exc
        except jwt.ExpiredSignatureError as exc:
            raise AuthenticationError("token refused: it has expired; sign in again") from exc
        except jwt.ImmatureSignatureError as exc:
            raise AuthenticationError("token refused: it is not valid yet (nbf/iat)") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthenticationError(f"token refused: its issuer is not {oidc.issuer}") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthenticationError(
                f"token refused: its audience does not include {oidc.audience}"
            ) from exc
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"token refused: {exc}") from exc

    def _identity(self, claims: dict[str, Any]) -> ApiKey:
        oidc = self.oidc
        tenant = claims.get(oidc.tenant_claim, oidc.tenant)
        if not isinstance(tenant, str) or not tenant:
            raise AuthenticationError(
                f"token refused: no {oidc.tenant_claim!r} claim names its tenant "
                "(or set auth.oidc.tenant)"
            )
        try:
            validate_tenant(tenant)
        except GroundedError as exc:
            raise AuthenticationError(f"token refused: {exc.message}") from exc
        if oidc.tenants is not None and tenant not in oidc.tenants:
            raise AuthenticationError(
                f"token refused: it names tenant {tenant!r}, which {oidc.issuer} may not "
                "sign for (auth.oidc.tenants)"
            )
        user = claims.get(oidc.user_claim)
        if not isinstance(user, str) or not user:
            raise AuthenticationError(f"token refused: no {oidc.user_claim!r} claim names the user")
        return ApiKey(
            id=f"oidc:{user}", tenant=tenant, scopes=self._scopes(claims.get(oidc.scopes_claim)),
            sha256="", name=oidc.issuer, user=user, groups=_strings(claims.get(oidc.groups_claim)),
        )  # fmt: skip

    def _scopes(self, claimed: Any) -> tuple[str, ...]:
        values = claimed.split() if isinstance(claimed, str) else _strings(claimed)
        scopes: list[str] = []
        for value in values:
            scopes += self.oidc.scope_map.get(value, (value,) if value in SCOPES else ())
        return tuple(dict.fromkeys(scopes))


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def _discover(issuer: str) -> str:
    """The issuer's JWKS URL, from its discovery document."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            document = json.load(response)
    except (OSError, ValueError) as exc:
        raise _unavailable(issuer, exc) from exc
    if document.get("issuer", "").rstrip("/") != issuer.rstrip("/") or "jwks_uri" not in document:
        raise AuthenticationError(
            f"{url} is not {issuer}'s discovery document (its issuer or jwks_uri is wrong)"
        )
    return document["jwks_uri"]


class IdentityProviderUnavailableError(GroundedError):
    """The issuer's discovery document or keys cannot be fetched: nobody's token can be
    checked until they can (503, not the caller's fault)."""

    status = 503
    type = "service_unavailable"
    retry_after = 5


def _unavailable(issuer: str, exc: Exception) -> GroundedError:
    return IdentityProviderUnavailableError(
        f"cannot fetch the signing keys of {issuer} ({exc}); retry shortly"
    )
