"""Result tokens (bot.engine.result_tokens): bound to one request and one person, expiring, unforgeable,
and whatever is presented as one is a verdict, never an exception."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from bot.engine.result_tokens import issue_token, token_key, verify_token
from bot.principals import slack_user
from bot.tools import tool

KEY = token_key("signing-secret")
BOB = slack_user("T1", "U0BOB")


def test_a_token_names_its_person_for_its_request_until_it_expires() -> None:
    token = issue_token(KEY, "r1", BOB, now=1000, ttl_s=60)
    claims = verify_token(KEY, token, "r1", now=1059)
    assert claims is not None and claims.principal == BOB
    assert verify_token(KEY, token, "r1", now=1060) is None  # expired
    assert verify_token(KEY, token, "r2", now=1000) is None  # another request
    assert verify_token(token_key("another secret"), token, "r1", now=1000) is None  # another bot


def test_changing_who_it_names_breaks_it() -> None:
    import base64

    payload, mac = issue_token(KEY, "r1", BOB, now=1000).split(".")
    raw = base64.urlsafe_b64decode(payload + "==").replace(b"U0BOB", b"U0EVE")
    forged = base64.urlsafe_b64encode(raw).decode().rstrip("=") + "." + mac
    assert verify_token(KEY, forged, "r1", now=1000) is None


@given(st.text(max_size=300))
def test_anything_presented_as_a_token_is_refused_without_raising(junk: str) -> None:
    assert verify_token(KEY, junk, "r1", now=0) is None


def test_no_secret_no_tokens() -> None:
    assert token_key(None) is None and token_key("") is None


def test_external_and_result_go_together() -> None:
    class Out(BaseModel):
        ok: bool

    with pytest.raises(ValueError, match="external=True and result="):
        tool(lambda args: None, name="x", external=True)
    with pytest.raises(ValueError, match="can't be shown"):
        class Bad(BaseModel):
            where: dict[str, str]

        tool(lambda args: None, name="y", external=True, result=Bad)
    assert tool(lambda args: None, name="z", external=True, result=Out).external


def test_the_mac_is_an_hmac_sha256_of_the_payload_under_a_key_derived_from_the_secret() -> None:
    import hashlib
    import hmac

    payload, mac = issue_token(KEY, "r1", BOB, now=1000).split(".")
    assert KEY == hmac.new(b"signing-secret", b"hitl-result-token-v1", hashlib.sha256).digest()
    assert mac == hmac.new(KEY, payload.encode(), hashlib.sha256).hexdigest()


def test_the_mac_is_compared_in_constant_time_and_never_with_equality() -> None:
    import ast
    import inspect

    from bot.engine import result_tokens

    tree = ast.parse(inspect.getsource(result_tokens.verify_token))
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "hmac.compare_digest" in calls
    compared = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare) and "mac" in ast.unparse(n)]
    assert compared == [], f"the MAC is compared with an operator that can leak its length or prefix: {compared}"


def test_a_revocation_voids_the_tokens_issued_until_then_only() -> None:
    token = issue_token(KEY, "r1", BOB, now=1000.5)
    claims = verify_token(KEY, token, "r1", now=1001)
    assert claims is not None and claims.issued_ms == 1_000_500
    assert claims.revoked_by(1_000_500) and claims.revoked_by(2_000_000)
    assert not claims.revoked_by(1_000_499) and not claims.revoked_by(None)
