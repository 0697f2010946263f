"""`vertebra chat`: an interactive conversation with one session of the running daemon.

One thread reads a line (readline: line editing, a history in the data directory), sends
it, then follows the session's subscription until the turn ends, printing stored events as
written and the text deltas the daemon pushes live (a sink) as they stream. At the prompt a
watcher thread takes the subscription over and prints what other clients send and the
answers they get above the prompt (drawn again with what was typed); an action waiting for
approval is held for the reading thread, which asks about it once the line is read. The
subscription has one reader at a time, so every stored event is shown exactly once.

A line typed while a turn runs is sent when Enter ends it (`Chat.send_typed`): stored when
acknowledged, it waits for its own turn, steers this one (``chat --steer``, or the
session's ``session.busy_policy``), or is refused, as the busy policy says; the chat then
follows the turns such messages run too. Ctrl-C in a turn interrupts it (a second stops
waiting); at the prompt it asks for a second to leave; Ctrl-D leaves. Slash commands are
messages the session's interceptors answer.
Approvals (``action.pending``) arrive through the same subscription; `Chat.on_event` asks
inline (a pause for the cost budget: by how much to raise it), then the turn goes on.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from spine import Event, Kind

from ..errors import ActorsError, SessionClosed, SessionNotFound
from ..host import Host
from ._chat_render import render
from ._chat_terminal import readline_history, stdin_line
from ._daemon import EXIT_UNKNOWN_SESSION, CliError
from ._format import Style
from ._timer_commands import chat_answer, chat_prompt

ASSISTANT_DELTA = "assistant.delta"
TURN_ENDS = (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED)
HISTORY_FILE = "chat_history"
HISTORY_LENGTH = 1000
#: How long one wait for the next event lasts before deltas and Ctrl-C are looked at.
POLL = 0.05


class _Signals:
    """Ctrl-C as a counter while a turn runs, instead of an exception in a runtime call."""

    def __init__(self) -> None:
        self.count = 0

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        self.count = 0
        old = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, old)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.count += 1


class Chat:
    """One chat: a session, its subscription, and the screen."""

    def __init__(
        self,
        host: Host,
        sid: str,
        after_seq: int,
        write: Callable[[str], None],
        style: Style,
        read_line: Callable[[str], str] = input,
        terminal: bool = False,
        poll_line: Callable[[], str | None] | None = None,
        busy_mode: str = "",
    ) -> None:
        self.host = host
        self.sid = sid
        self.write = write
        self.style = style
        self.read_line = read_line
        self.signals = _Signals()
        self.sub = host.subscribe(sid, after_seq)
        self.deltas: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.own: set[int] = set()
        self._streamed = ""
        self._interrupted = False
        self._streaming = threading.Event()
        #: Events the prompt's watcher took but left to the reading thread (approvals).
        self.held: list[Event] = []
        #: On a terminal, lines printed at the prompt redraw it below them.
        self.terminal = terminal
        #: A line typed while a turn runs (None: none yet), sent at once under
        #: ``busy_mode`` (empty: the session's busy policy; ``steer``: into the turn).
        self.poll_line = poll_line
        self.busy_mode = busy_mode
        #: Messages sent while a turn ran whose own turns are still to follow.
        self.mid_turn: set[int] = set()
        host.add_sink(self._on_live, kinds=(ASSISTANT_DELTA,))

    def _on_live(self, sid: str, ev: Any, live: Any) -> None:
        # The sink pump's thread: only hand over; the chat thread prints.
        if sid == self.sid and live is not None and self._streaming.is_set():
            self.deltas.put(live[2])

    def say(self, line: str = "") -> None:
        self.write(line + "\n")

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> int:
        self.say(
            self.style.paint("bold", f"chat with {self.sid}")
            + self.style.paint(
                "dim", "  (Ctrl-C interrupts a turn, Ctrl-D leaves, /help lists commands)"
            )
        )
        armed = False  # a first Ctrl-C at the prompt was pressed
        try:
            while True:
                try:
                    if not self.show_pending():
                        self.say(self.style.paint("dim", f"session {self.sid} was closed"))
                        return 0
                    text = self.read_at_prompt(self.style.prompt("you> "))
                except KeyboardInterrupt:
                    try:
                        if armed:
                            self.say()
                            return 0
                        armed = True
                        self.say(self.style.paint("dim", "\n(Ctrl-C again or Ctrl-D to leave)"))
                    except KeyboardInterrupt:  # the second one came while saying so
                        return 0
                    continue
                except EOFError:
                    self.say()
                    return 0
                armed = False
                if text.strip() and not self.send(text):
                    return 0
        finally:
            self.sub.close()

    def show_pending(self) -> bool:
        """Print what arrived while at the prompt; False once the session is closed."""
        held, self.held = self.held, []
        for waiting in held:
            self.show(waiting)
        while (ev := self.sub.get(0)) is not None:
            self.show(ev)
        return not self.sub.closed

    def read_at_prompt(self, prompt: str) -> str:
        """Read a line while a watcher prints what other clients do meanwhile."""
        stop = threading.Event()
        watcher = threading.Thread(
            target=self._watch, args=(stop, prompt), name="chat-prompt", daemon=True
        )
        watcher.start()
        try:
            return self.read_line(prompt)
        finally:
            stop.set()
            watcher.join()

    def _watch(self, stop: threading.Event, prompt: str) -> None:
        """The prompt's watcher: the subscription's only reader until ``stop``."""
        # Ctrl-C must reach the reading thread: a SIGINT the kernel hands this thread
        # leaves readline's select asleep in the other until the next key.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        while not stop.is_set():
            ev = self.sub.get(POLL)
            if ev is None:
                if self.sub.closed:
                    return
                continue
            if stop.is_set() or ev.kind == Kind.ACTION_PENDING or self.held:
                # Asking needs the reading thread (it reads the answer), and what comes
                # after a held event waits behind it to keep the order.
                self.held.append(ev)
                if ev.kind == Kind.ACTION_PENDING and len(self.held) == 1:
                    self._above_prompt(
                        self.style.paint(
                            "yellow", f"approval needed: action {ev.call} (press Enter to answer)"
                        )
                        + "\n",
                        prompt,
                    )
                continue
            shown: list[str] = []
            write, self.write = self.write, shown.append
            try:
                self.show(ev)
            finally:
                self.write = write
            if shown:
                self._above_prompt("".join(shown), prompt)

    def _above_prompt(self, text: str, prompt: str) -> None:
        if not self.terminal:
            self.write(text)
            return
        typed = ""
        with contextlib.suppress(ImportError):
            import readline

            typed = readline.get_line_buffer()
        visible = prompt.replace("\001", "").replace("\002", "")
        # Back to the line's start, clear it, print, then draw the prompt and the typed
        # text again below: readline goes on editing the line where it was.
        self.write("\r\x1b[K" + text + visible + typed)

    def send(self, text: str) -> bool:
        """Send one line and follow its turn; False if the chat must end."""
        with self.signals.counting():
            try:
                ack = self.host.send(self.sid, text)
            except SessionClosed:
                self.say(self.style.paint("red", f"session {self.sid} is closed"))
                return False
            except ActorsError as exc:
                self.say(self.style.paint("red", f"error: {exc}"))
                return True
            if ack.seq:
                self.own.add(ack.seq)
            for severity, notice in ack.notices:
                role = {"error": "red", "warn": "yellow", "success": "green"}.get(severity, "")
                self.say(self.style.paint(role, f"[{severity}] {notice}"))
            if not ack.consumed and ack.seq:
                self.follow_turn(ack.seq)
        return True

    def follow_turn(self, after_seq: int) -> None:
        """Print the turn after ``after_seq`` as it is written, until it ends."""
        self._streamed = ""
        self._streaming.set()
        interrupted = self._interrupted = False
        follow = 0  # turns still to follow: messages typed meanwhile wait for them
        try:
            while True:
                if self.signals.count and not interrupted:
                    interrupted = self._interrupted = True
                    self.say(self.style.paint("dim", "\n^C interrupting the turn"))
                    self._streamed = ""  # its line is ended
                    with contextlib.suppress(ActorsError):
                        self.host.interrupt(self.sid, reason="interrupted from the chat")
                elif self.signals.count > 1:
                    self.say(self.style.paint("dim", "(no longer waiting for the turn)"))
                    return
                self.print_deltas()
                self.send_typed()
                ev = self.sub.get(POLL)
                if ev is None:
                    if self.sub.closed:
                        return
                    continue
                self.show(ev)
                follow += self.turns_due(ev)
                if ev.kind in TURN_ENDS and ev.seq > after_seq:
                    if follow <= 0:
                        return
                    follow -= 1
        finally:
            self._streaming.clear()
            self.print_deltas(drop=True)

    def send_typed(self) -> None:
        """Send a line typed while the turn runs, at once: stored when acknowledged, it
        waits for its own turn or steers this one, as the busy policy says."""
        text = self.poll_line() if self.poll_line is not None else None
        if not text or not text.strip():
            return
        try:
            ack = self.host.send(self.sid, text, mode=self.busy_mode)
        except ActorsError as exc:
            self.say(self.style.paint("red", f"error: {exc}"))
            return
        if ack.seq and not ack.consumed:
            self.own.add(ack.seq)
            self.mid_turn.add(ack.seq)
            self.say(self.style.paint("dim", f"  (sent while the turn runs: seq {ack.seq})"))

    def turns_due(self, ev: Event) -> int:
        """Turns ``ev`` says a message typed meanwhile will run: a queued message's own,
        or a steer's that its turn ended before taking."""
        if ev.kind == Kind.USER_MESSAGE and ev.seq in self.mid_turn:
            return 0 if ev.extra.get("steer") is True else 1
        if ev.kind == Kind.STEER_DROPPED and ev.extra.get("handed") == "next":
            return 1 if ev.extra.get("steer") in self.mid_turn else 0
        return 0

    def print_deltas(self, drop: bool = False) -> None:
        while True:
            try:
                text = self.deltas.get_nowait()
            except queue.Empty:
                return
            if not drop:
                self._streamed += text
                self.write(text)

    def show(self, ev: Event) -> None:
        self.on_event(ev)
        if ev.kind == Kind.ASSISTANT:
            # Deltas of this message may still be queued (the push and the spine are two
            # paths): take them, then show only what did not stream. Deltas arriving after
            # it are stale until the model goes on (a tool call).
            self.print_deltas()
            self._streaming.clear()
            shown, self._streamed = self._streamed, ""
            if shown and ev.text.startswith(shown):
                self.write(ev.text[len(shown) :] + "\n")
                return
            if shown:
                self.write("\n")
        elif ev.kind in (Kind.TOOL_CALL, Kind.TOOL_RESULT):
            self.print_deltas(drop=True)
            self._streaming.set()
        elif ev.kind in TURN_ENDS:
            # A cut-off answer: end the line its partial text streamed on, or show the
            # partial text the event keeps if none streamed.
            self.print_deltas()
            if self._streamed:
                self.write("\n")
            elif ev.text:
                self.say(ev.text)
            self._streamed = ""
        own = ev.seq in self.own or (ev.kind == Kind.INTERRUPT and self._interrupted)
        line = render(ev, self.style, own)
        if line is not None:
            self.say(line)

    def on_event(self, ev: Event) -> None:
        """Every stored event passes here before it is shown: an action waiting for approval
        is asked about inline (y, or a budget raise, approves; anything else rejects; a
        server's question is answered with a JSON object, an empty line declines)."""
        if ev.kind != Kind.ACTION_PENDING:
            return
        if ev.call not in {p.call for p in self.host.pending(self.sid)}:
            return  # decided meanwhile (another client, or before this chat attached)
        self.print_deltas()
        if self._streamed:
            self.write("\n")
            self._streamed = ""
        budget = ev.fault == "budget_exceeded"
        what, ask = chat_prompt(ev, budget)
        self.say(self.style.paint("yellow", what))
        try:
            answer = self.read_line(self.style.prompt(ask))
        except (EOFError, KeyboardInterrupt):
            answer = ""
        approve, raise_by, content = chat_answer(ev, answer, budget)
        note = "approved from the chat"
        try:
            if approve:
                self.host.approve(self.sid, ev.call, note=note, raise_by=raise_by, content=content)
                self.say(self.style.paint("green", f"action {ev.call} approved"))
            else:
                self.host.reject(self.sid, ev.call, reason="rejected from the chat")
                self.say(self.style.paint("red", f"action {ev.call} rejected"))
        except ActorsError as exc:
            self.say(self.style.paint("red", f"error: {exc}"))


def run_chat(
    host: Host, sid: str | None, *, create: bool, out: Any, data: str, busy_mode: str = ""
) -> int:
    if sid is None:
        sid = host.create()
        after = 0
    else:
        try:
            info = host.get(sid)
            if info.state in ("closed", "failed"):
                raise CliError(f"session {sid!r} is {info.state}: start another one")
            after = info.last_seq
        except SessionNotFound:
            if not create:
                raise CliError(
                    f"unknown session {sid!r} (pass --create to start it)", EXIT_UNKNOWN_SESSION
                ) from None
            host.create(sid)
            after = 0

    def write(text: str) -> None:
        out.stdout.write(text)
        out.stdout.flush()

    with readline_history(data):
        terminal = out.stdout.isatty() and sys.stdin.isatty()
        chat = Chat(
            host,
            sid,
            after,
            write,
            out.style,
            terminal=terminal,
            poll_line=stdin_line if terminal else None,
            busy_mode=busy_mode,
        )
        return chat.run()


__all__ = ["Chat", "render", "run_chat"]
