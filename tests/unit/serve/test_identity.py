"""Tokens from an identity provider (serve/identity/oidc.py) against a real issuer on 127.0.0.1:
its discovery document and JWKS served over HTTP, real RSA and EC keys, key rotation; and
every forgery the issue lists refused with a 401 that says why."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from index.errors import AuthenticationError
from serve.http.guard import RequestGuard
from serve.identity.keys import KeyStore
from serve.identity.oidc import Authenticator, OidcConfig

pytestmark = pytest.mark.unit
AUDIENCE = "grounded"


class Issuer:
    """An OIDC issuer on 127.0.0.1: /.well-known/openid-configuration and /jwks.json, with
    the keys it publishes (``publish``) and counts of JWKS fetches."""

    def __init__(self) -> None:
        self.keys: dict[str, object] = {}  # kid -> private key
        self.published: list[str] = []
        self.fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks.json"}
                elif self.path == "/jwks.json":
                    issuer.fetches += 1
                    body = {"keys": [issuer.jwk(kid) for kid in issuer.published]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def new_key(self, kid: str, kind: str = "rsa", publish: bool = True):
        key = (rsa.generate_private_key(public_exponent=65537, key_size=2048) if kind == "rsa"
               else ec.generate_private_key(ec.SECP256R1()))  # fmt: skip
        self.keys[kid] = key
        if publish:
            self.published.append(kid)
        return key

    def jwk(self, kid: str) -> dict:
        key = self.keys[kid]
        algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else (
            jwt.algorithms.ECAlgorithm)  # fmt: skip
        return {**json.loads(algorithm.to_jwk(key.public_key())), "kid": kid, "use": "sig"}

    def token(self, kid: str = "rsa-1", alg: str = "RS256", **claims) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": AUDIENCE, "sub": "alice@example.com", "tenant": "acme",
                "groups": ["hr"], "scope": "query ingest", "iat": now, "exp": now + 300,
                **claims}  # fmt: skip
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.keys[kid], algorithm=alg, headers={"kid": kid})

    def public_pem(self, kid: str) -> bytes:
        return (
            self.keys[kid]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict, claims: dict, secret: bytes | None) -> str:
    """A token written by hand: unsigned (``secret`` None) or HMAC-SHA256 with ``secret``."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    if secret is None:
        return signing_input + "."
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac)}"


@pytest.fixture
def issuer():
    issuer = Issuer()
    issuer.new_key("rsa-1", "rsa")
    issuer.new_key("ec-1", "ec")
    yield issuer
    issuer.server.shutdown()


@pytest.fixture
def auth(issuer, tmp_path):
    config = OidcConfig(issuer=issuer.url, audience=AUDIENCE, tenants=("acme", "globex"),
                        scope_map={"rag-admins": ("admin",)}, jwks_refetch_s=0)  # fmt: skip
    return Authenticator(KeyStore(tmp_path), config)


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_rsa_and_ec_tokens_give_the_identity_their_claims_name(issuer, auth):
    for kid, alg in (("rsa-1", "RS256"), ("ec-1", "ES256")):
        identity = auth.authenticate(bearer(issuer.token(kid, alg)))
        assert (identity.tenant, identity.user, identity.groups) == (
            "acme", "alice@example.com", ("hr",))  # fmt: skip
        assert identity.scopes == ("query", "ingest") and identity.id == "oidc:alice@example.com"
        assert identity.reader.principals == {"user:alice@example.com", "group:hr"}
    admin = auth.authenticate(bearer(issuer.token(scope="rag-admins")))
    assert admin.scopes == ("admin",) and admin.reader.admin


def test_api_keys_still_work_beside_tokens(issuer, tmp_path):
    keys = KeyStore(tmp_path)
    _, secret = keys.create("acme", ["query"])
    auth = Authenticator(keys, OidcConfig(issuer=issuer.url, audience=AUDIENCE, tenant="acme"))
    assert auth.authenticate(bearer(secret)).tenant == "acme"
    with pytest.raises(AuthenticationError, match="unknown or revoked API key"):
        auth.authenticate(bearer(secret + "x"))


def test_forged_and_stale_tokens_are_refused_each_with_its_reason(issuer, auth):
    now = int(time.time())
    claims = {"iss": issuer.url, "aud": AUDIENCE, "sub": "mallory", "tenant": "acme",
              "scope": "admin", "exp": now + 300}  # fmt: skip
    issuer.new_key("rsa-unpublished", "rsa", publish=False)
    attacks = {
        "has expired": issuer.token(exp=now - 120),
        "not valid yet": issuer.token(nbf=now + 600),
        "issuer is not": issuer.token(iss="http://127.0.0.1:1/evil"),
        "audience does not include": issuer.token(aud="another-app"),
        "algorithm 'none'": forged({"alg": "none", "kid": "rsa-1"}, claims, None),
        "algorithm 'HS256'": forged(
            {"alg": "HS256", "kid": "rsa-1"}, claims, issuer.public_pem("rsa-1")
        ),
        "does not publish": issuer.token("rsa-unpublished"),
        "may not sign for": issuer.token(tenant="initech"),
        "names its tenant": issuer.token(tenant=None),
        "Signature verification failed": issuer.token()[:-4] + "AAAA",
        "not an API key nor a valid JWT": "not.a.jwt",
    }
    for reason, token in attacks.items():
        with pytest.raises(AuthenticationError, match=reason) as refused:
            auth.authenticate(bearer(token))
        assert refused.value.status == 401, reason


def test_a_rotated_key_is_fetched_when_a_token_names_it(issuer, auth):
    assert auth.authenticate(bearer(issuer.token())).user == "alice@example.com"
    fetched = issuer.fetches
    auth.authenticate(bearer(issuer.token()))
    assert issuer.fetches == fetched  # cached
    issuer.new_key("rsa-2", "rsa", publish=False)
    with pytest.raises(AuthenticationError, match="does not publish"):
        auth.authenticate(bearer(issuer.token("rsa-2")))
    issuer.published = ["rsa-2"]  # the issuer rotates: the old key is gone
    assert auth.authenticate(bearer(issuer.token("rsa-2"))).tenant == "acme"
    assert issuer.fetches > fetched


def test_the_request_guard_refuses_a_bad_token_before_the_body(issuer, auth):
    guard = RequestGuard(auth, 1000)
    headers = {"authorization": bearer(issuer.token(exp=int(time.time()) - 120))}
    with pytest.raises(AuthenticationError, match="expired"):
        guard.check("POST", "/v1/chat/completions", headers)
    ok = {"authorization": bearer(issuer.token()), "content-length": "10"}
    assert guard.check("POST", "/v1/chat/completions", ok).tenant == "acme"


def signed(header: dict, claims: object, key, alg: str = "RS256") -> str:
    """A token with a header PyJWT would not write (a kid that is not a string), signed."""
    algorithm = jwt.algorithms.get_default_algorithms()[alg]
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(algorithm.sign(signing_input.encode(), key))}"


def test_tokens_that_crashed_the_checker_are_401s_with_a_reason(issuer, auth):
    """A key of one type named with another's algorithm, a kid that is not a string, a
    critical extension: each a 401 that says why, never a 500."""
    now = int(time.time())
    claims = {"iss": issuer.url, "aud": AUDIENCE, "sub": "mallory", "tenant": "acme",
              "scope": "admin", "exp": now + 300}  # fmt: skip
    rsa_key, ec_key = issuer.keys["rsa-1"], issuer.keys["ec-1"]
    attacks = {
        "RS256 does not fit the key": signed({"alg": "RS256", "kid": "ec-1"}, claims, rsa_key),
        "ES256 does not fit the key": signed(
            {"alg": "ES256", "kid": "rsa-1"}, claims, ec_key, "ES256"
        ),
        "Key ID header parameter must be a string": signed(
            {"alg": "RS256", "kid": 5}, claims, rsa_key
        ),
        "must be a string": signed({"alg": "RS256", "kid": {"k": "rsa-1"}}, claims, rsa_key),
        "must be a string ": signed({"alg": "RS256", "kid": ["rsa-1"]}, claims, rsa_key),
        "Unsupported critical extension": signed(
            {"alg": "RS256", "kid": "rsa-1", "crit": ["exp"]}, claims, rsa_key
        ),
        "algorithm \\['RS256'\\]": signed({"alg": ["RS256"], "kid": "rsa-1"}, claims, rsa_key),
        "must be a json object": signed({"alg": "RS256", "kid": "rsa-1"}, [1, 2], rsa_key),
    }
    for reason, token in attacks.items():
        with pytest.raises(AuthenticationError, match=reason.strip()) as refused:
            auth.authenticate(bearer(token))
        assert refused.value.status == 401, reason


def test_an_issuer_must_name_the_tenants_it_signs_for(issuer):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="name the tenants this issuer may sign for"):
        OidcConfig(issuer=issuer.url, audience=AUDIENCE)
    assert OidcConfig(issuer=issuer.url, audience=AUDIENCE, tenant="acme").tenant == "acme"
