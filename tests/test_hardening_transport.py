"""The actor transport: a peer that cannot prove it holds the data directory's secret runs
nothing, and every client reaches exactly the daemon of its data directory."""

from __future__ import annotations

import hmac
import json
import os
import pathlib
import pickle
import socket
import stat
import struct
import time
from collections.abc import Iterator

import pytest
from cli_support import Daemon, run
from conftest import descendants

from actors import Host, WrongDaemon
from actors._runtime import transport_auth as ta
from actors._runtime.system import processes_in_session

NOBODY = 65534


class Marker:
    """Unpickling this creates the file ``path``: code run by whoever unpickles it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


def listening_ports(pids: list[int]) -> set[int]:
    """The TCP ports the processes ``pids`` listen on (their socket fds in /proc/net/tcp)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = pathlib.Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # State 0A is LISTEN.
            if f[3] == "0A" and f[9] in inodes:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def daemon_pids(d: Daemon) -> list[int]:
    assert d.proc is not None
    info = json.loads((d.data / "daemon.json").read_text())
    return sorted(
        {d.proc.pid, *descendants(d.proc.pid), *processes_in_session(info["system_session"])}
    )


def payloads(marker: str) -> list[bytes]:
    """What an attacker sends: a bare pickle, a pickle in Thespian's frame, and a pickle in
    a frame shaped like an authenticated one (a made-up key id and MAC)."""
    bare = pickle.dumps(Marker(marker))
    envelope = pickle.dumps((None, Marker(marker)))
    forged = b"VTA1" + os.urandom(8) + struct.pack(">Q", time.time_ns()) + os.urandom(32) + envelope
    return [bare, b"%d>" % len(envelope) + envelope, b"%d>" % len(forged) + forged]


def attack_as_nobody(ports: set[int], marker: str, secret: pathlib.Path) -> int:
    """Fork, drop to uid 65534, send every payload to every port on its own connection;
    return the child's exit status (0: it ran as nobody, could not read the secret, and
    connected to every port; 2: it could read the secret; 3: it failed; 4: a port refused
    every connection)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            assert os.getuid() == NOBODY
            try:
                secret.read_bytes()
                code = 2  # the secret is readable by another user: the test is void
            except PermissionError:
                code = 0
            reached = set()
            for port in sorted(ports):
                for data in payloads(marker):
                    try:
                        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                            reached.add(port)
                            s.settimeout(2.0)
                            s.sendall(data)
                            # Thespian answers a complete frame (an ack) or closes: either
                            # way it has read it. A bare pickle may just be waited on.
                            s.recv(100)
                    except OSError:
                        continue
            if reached != ports:
                code = 4
        except BaseException:
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.fixture
def daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path / "data")
    try:
        yield d
    finally:
        d.stop()
        d.check_no_leftovers()


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="dropping to another user (uid 65534) needs root, as in CI",
)
def test_a_crafted_pickle_from_another_local_user_runs_nothing_on_any_listener(
    daemon: Daemon, tmp_path: pathlib.Path
) -> None:
    """An unprivileged local user sends code-running pickles to every listening port of the
    daemon's processes: nothing runs, the frames are refused, and the daemon serves on."""
    daemon.start()
    assert run(daemon.data, "send", "victim", "--create", "hello").returncode == 0
    pids = daemon_pids(daemon)
    ports = listening_ports(pids)
    # The serve process, the admin, the guardian, the Runner, the projection and a session.
    assert len(ports) >= 5, (pids, ports)
    marker = tmp_path / "marker"
    assert attack_as_nobody(ports, str(marker), daemon.data / ta.SECRET_FILE) == 0
    assert not marker.exists(), "a pickle from another user ran code in the daemon"
    assert run(daemon.data, "send", "victim", "still serving").returncode == 0
    out = run(daemon.data, "history", "victim")
    assert out.returncode == 0 and "still serving" in out.stdout
    log = (daemon.data / "vertebra.log").read_text()
    assert "failed authentication" in log


def test_the_actor_secret_is_created_owner_only_and_an_unsafe_one_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    """The first start creates ``actor.key`` 0600; a secret others can read is refused
    with a message naming the file; a damaged one too."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    secret = ta.load_secret(data)
    path = data / ta.SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ta.load_secret(data) == secret and len(secret) == 32
    path.chmod(0o644)
    with pytest.raises(ta.SecretError, match="readable by other users"):
        ta.load_secret(data)
    path.chmod(0o600)
    path.write_text("not hex\n")
    with pytest.raises(ta.SecretError, match="damaged"):
        ta.load_secret(data)


def test_frames_are_refused_unless_their_mac_key_and_time_check_out() -> None:
    """A frame opens only under a known key with a matching MAC inside the time window;
    any other is the data-error word and is counted, and nothing in it is unpickled."""
    secret = os.urandom(32)
    kid = ta.use_secret(secret)
    body = pickle.dumps(("from", {"x": 1}))
    good = ta._frame(kid, body)
    assert ta._open(good) == ("from", {"x": 1})
    before = ta.rejected()
    flipped = bytearray(good)
    flipped[-3] ^= 1
    stranger = os.urandom(32)
    head = b"VTA1" + ta.key_id(stranger) + struct.pack(">Q", time.time_ns())
    other = head + hmac.digest(stranger, head + body, "sha256") + body
    stale = bytearray(good)
    stale[12:20] = struct.pack(">Q", time.time_ns() - int((ta.WINDOW + 5) * 1e9))
    for bad in (bytes(flipped), other, bytes(stale), body, good[:30], b"VTC1\x00ACK"):
        assert ta._open(bad) == "ACK+DATAERR"
    assert ta.rejected() == before + 6
    assert ta._open(ta._control("ACK")) == "ACK"


def test_a_host_attaches_to_exactly_the_daemon_it_names_and_again_after_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    """One process attaches to daemon A, closes, attaches to daemon B: the session it
    creates is in B's data directory only; after B restarts on a new port the same process
    attaches again and finds it."""
    a, b = Daemon(tmp_path / "a"), Daemon(tmp_path / "b")
    try:
        a.start()
        b.start()
        port_a = json.loads((a.data / "daemon.json").read_text())["admin_port"]
        with Host(a.data, attach=True, admin_port=port_a) as h:
            h.create("in-a")
        port_b = json.loads((b.data / "daemon.json").read_text())["admin_port"]
        with Host(b.data, attach=True, admin_port=port_b) as h:
            h.create("in-b")
            assert {s.session_id for s in h.sessions()} == {"in-b"}
        with Host(a.data, attach=True, admin_port=port_a) as h:
            assert {s.session_id for s in h.sessions()} == {"in-a"}
        b.stop()
        b.start()
        new_port = json.loads((b.data / "daemon.json").read_text())["admin_port"]
        assert new_port != port_b
        with Host(b.data, attach=True, admin_port=new_port) as h:
            assert h.get("in-b").session_id == "in-b"
            ack = h.send("in-b", "after the restart")
            assert h.wait_turn("in-b", after_seq=ack.seq) is not None
    finally:
        for d in (a, b):
            d.stop()
            d.check_no_leftovers()


def test_attaching_with_another_directory_s_secret_reaches_nothing_of_that_daemon(
    tmp_path: pathlib.Path,
) -> None:
    """A Host on directory C attaches to the port of daemon A: without A's secret it gets
    no answer; with A's secret copied in, A's guardian names another directory and the
    Host refuses with `WrongDaemon`. A's data is untouched either way."""
    a = Daemon(tmp_path / "a")
    c = tmp_path / "c"
    c.mkdir(mode=0o700)
    try:
        a.start()
        port = json.loads((a.data / "daemon.json").read_text())["admin_port"]
        with pytest.raises(Exception) as wrong_key:
            Host(c, attach=True, admin_port=port, timeout=3)
        assert not isinstance(wrong_key.value, WrongDaemon)
        (c / ta.SECRET_FILE).write_bytes((a.data / ta.SECRET_FILE).read_bytes())
        (c / ta.SECRET_FILE).chmod(0o600)
        with pytest.raises(WrongDaemon, match="another data directory"):
            Host(c, attach=True, admin_port=port, timeout=10)
        with Host(a.data, attach=True, admin_port=port) as h:
            assert h.sessions() == []
    finally:
        a.stop()
        a.check_no_leftovers()
