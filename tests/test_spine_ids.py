"""Session ids: fresh UUIDv7s, and the caller-chosen ids the spine refuses."""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import session_ids

from spine import InvalidArgumentError, InvalidStreamIdError, new_session_id, validate_session_id


def test_a_new_session_id_is_a_version_7_rfc_4122_uuid() -> None:
    """Fresh ids are UUIDv7 with the RFC 4122 variant, in canonical text form."""
    sid = new_session_id()
    u = uuid.UUID(sid)
    assert u.version == 7
    assert u.variant == uuid.RFC_4122
    assert str(u) == sid


def test_a_new_session_id_carries_the_current_unix_milliseconds() -> None:
    """The first 48 bits are the creation time in milliseconds since the epoch."""
    before = time.time_ns() // 1_000_000
    sid = new_session_id()
    after = time.time_ns() // 1_000_000
    ms = uuid.UUID(sid).int >> 80
    # The counter may borrow a millisecond ahead when many ids share one.
    assert before <= ms <= after + 1


def test_new_session_ids_are_unique_and_strictly_increasing() -> None:
    """Ids made one after another sort in creation order, as text and as numbers."""
    ids = [new_session_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert [uuid.UUID(i).int for i in ids] == sorted(uuid.UUID(i).int for i in ids)
    assert all(validate_session_id(i) == i for i in ids[:100])


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("", "empty"),
        ("two words", "whitespace"),
        ("tab\there", "whitespace"),
        ("line\nbreak", "whitespace"),
        ("em\u2003space", "whitespace"),
        ("trailing ", "whitespace"),
        ("a.b", "dot"),
        (".", "dot"),
        ("chat-*", "wildcard '*'"),
        ("*", "wildcard '*'"),
        ("chat->", "wildcard '>'"),
        (">", "wildcard '>'"),
        ("bell\x07", "control character"),
        ("x" * 201, "longer than 200"),
    ],
)
def test_an_unusable_session_id_is_refused_with_its_reason(bad: str, problem: str) -> None:
    """Empty ids, whitespace, dots, wildcards and control characters are refused clearly."""
    with pytest.raises(InvalidStreamIdError) as info:
        validate_session_id(bad)
    assert problem in info.value.problem
    assert info.value.stream == bad
    assert isinstance(info.value, InvalidArgumentError) and isinstance(info.value, ValueError)


def test_a_session_id_must_be_a_string() -> None:
    """Non-string ids are refused rather than coerced."""
    with pytest.raises(InvalidStreamIdError, match="must be a string"):
        validate_session_id(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "good", ["chat-1", "user:42/thread_7", "0190f1c4-6a2b-7cde-8f00-123456789abc", "Ωmega"]
)
def test_ordinary_caller_chosen_ids_are_accepted_unchanged(good: str) -> None:
    """Ids without the refused characters come back as given."""
    assert validate_session_id(good) == good


def test_a_refused_id_is_refused_every_time() -> None:
    """Remembering good ids never lets a bad one through on a second try."""
    for _ in range(3):
        with pytest.raises(InvalidStreamIdError):
            validate_session_id("a b")


@given(session_ids)
def test_any_id_of_allowed_characters_is_accepted(sid: str) -> None:
    """Every id drawn from the allowed alphabet validates to itself."""
    assert validate_session_id(sid) == sid


@given(
    st.text(max_size=10), st.sampled_from([" ", ".", "*", ">", "\n", "\t"]), st.text(max_size=10)
)
def test_any_id_holding_a_refused_character_is_refused(head: str, bad: str, tail: str) -> None:
    """Wherever a whitespace, dot or wildcard sits in an id, the id is refused."""
    with pytest.raises(InvalidStreamIdError):
        validate_session_id(head + bad + tail)
