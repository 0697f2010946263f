"""Malformed input never corrupts stored data or hangs a caller: wrongly typed protocol
messages are answered with InvalidRequest naming the field, on a running daemon."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from actors import messages as m
from actors.errors import InvalidRequest
from actors.host import Host
from actors.validation import field_problem
from spine import history

#: Every reply to a malformed message must come within this bound (generous: 2 cores
#: shared with other suites). Today's failure is no reply at all, or one after 20 s.
ANSWER_WITHIN = 10.0

#: Public requests a fuzzed message is built from. RunnerConfig goes to the guardian
#: and SinkAck is never answered; both are checked by the same code.
FUZZED = tuple(c for c in m.REQUESTS if c not in (m.RunnerConfig, m.SinkAck))

WRONG = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.binary(max_size=8),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.tuples(st.integers(), st.text(max_size=3)),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.dictionaries(st.integers(), st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.lists(st.text(max_size=2), max_size=2), max_size=2),
)


def valid_value(tp: Any) -> Any:
    """A value of the annotated type (the fields the fuzzer leaves alone)."""
    origin = typing.get_origin(tp)
    if tp is str:
        return "fz-1"
    if tp is int:
        return 1
    if tp is bool:
        return False
    if origin is tuple:
        return ()
    return {}


def build(cls: type, wrong_field: str, wrong_value: Any) -> Any:
    """An instance of ``cls`` as an unpickled one can be: no converters, no validators."""
    hints = typing.get_type_hints(cls)
    msg = object.__new__(cls)
    for f in attrs.fields(cls):
        value = wrong_value if f.name == wrong_field else valid_value(hints[f.name])
        object.__setattr__(msg, f.name, value)
    return msg


@st.composite
def malformed(draw: st.DrawFn) -> Any:
    cls = draw(st.sampled_from(FUZZED))
    field = draw(st.sampled_from([f.name for f in attrs.fields(cls)]))
    msg = build(cls, field, draw(WRONG))
    assume(field_problem(msg) is not None)
    return msg


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    h = Host(tmp_path_factory.mktemp("fuzz") / "data", base="multiprocTCPBase", timeout=20)
    try:
        h.create("fz-1")
        yield h
    finally:
        h.close()


def test_non_string_metadata_on_create_is_refused_at_once_naming_the_field(
    daemon: Host,
) -> None:
    """`Host.create` with a non-string metadata value or key raises InvalidRequest naming
    `metadata` without waiting for a timeout, and stores nothing."""
    for metadata in ({"owner": 7}, {7: "owner"}, {"owner": ["a"]}):
        # A hang would end in HostTimeout after the Host's 20 s, not in InvalidRequest.
        with pytest.raises(InvalidRequest, match="metadata"):
            daemon.create("md-1", metadata=metadata)  # type: ignore[dict-item]
    assert daemon._log.last_seq("md-1") == 0


def test_metadata_that_is_not_a_mapping_is_refused_naming_the_field(daemon: Host) -> None:
    """`Host.create(metadata=[1, 2])` and `set_metadata` with a list or a string raise
    InvalidRequest naming `metadata` (not a raw AttributeError) and store nothing."""
    for metadata in ([1, 2], "owner=me", 7):
        with pytest.raises(InvalidRequest, match="metadata must be a mapping"):
            daemon.create("md-2", metadata=metadata)  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest, match="metadata must be a mapping"):
            daemon.set_metadata("fz-1", metadata)  # type: ignore[arg-type]
    assert daemon._log.last_seq("md-2") == 0


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
@given(msg=malformed())
def test_a_wrongly_typed_protocol_message_gets_invalid_request_naming_the_field(
    daemon: Host, msg: Any
) -> None:
    """Sent straight to the Runner, as a Thespian host would, any public request with a
    field of the wrong type is answered InvalidRequest naming that field, promptly."""
    problem = field_problem(msg)
    assert problem is not None
    named = problem.split("'")[1]
    runner = daemon._runtime.runner
    with daemon._transport.system.private() as endpoint:
        reply = endpoint.ask(runner, msg, ANSWER_WITHIN)
    assert isinstance(reply, m.RequestFailed), (msg, reply)
    assert reply.error == "InvalidRequest", reply
    assert named in reply.message, (named, reply.message)


def test_after_the_fuzzing_the_daemon_serves_and_every_stream_decodes(
    daemon: Host,
) -> None:
    """The daemon still creates, answers a turn, and every stored stream reads back."""
    sid = daemon.create(metadata={"owner": "ops"})
    ack = daemon.send(sid, "still there?")
    daemon.wait_turn(sid, ack.seq, timeout=30)
    log = daemon._log
    for info in log.streams():
        assert list(history(log, info.stream))
