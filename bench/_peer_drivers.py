"""The three systems `bench/peers.py` runs, each behind the same small interface.

A driver opens one store (a real SQLite file at ``synchronous=NORMAL``), holds sessions
by index, and runs one turn of session ``i`` with an instant model: ``turn(i)`` from any
thread (vertebra, LangGraph) or ``await aturn(i)`` on one event loop (the Agents SDK,
whose `Runner` is asynchronous). ``long_session(n)`` makes a session already holding
about ``n`` events or messages, built straight into the store, and returns its index.

The peers' packages exist only in the benchmark's own environment, so they are imported
inside the functions that need them.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from typing import Any

ANSWER = "[instant] here is the answer to your question about the quarterly report"


# -- vertebra --------------------------------------------------------------------------


class Vertebra:
    """A `Host` on multiprocTCPBase over the embedded SQLite spine (``durability`` normal:
    the spine's ``PRAGMA synchronous = NORMAL``), its scripted agent answering at once;
    each turn's end is read from a subscription held open on the session, as in
    ``bench/actors.py``."""

    name = "vertebra"

    def __init__(self, data_dir: str, sessions: int) -> None:
        from bench.actors import WAIT, _HeldTurns, host

        self._cm = host(data_dir, durability="normal")
        self.h = self._cm.__enter__()
        self.wait = WAIT
        self.sids = [self.h.create() for _ in range(sessions)]
        self.held = _HeldTurns(self.h, self.sids)
        for i in range(sessions):
            self.held.setup(i)

    def new_session(self) -> int:
        return self.add_session(self.h.create())

    def add_session(self, sid: str) -> int:
        self.sids.append(sid)
        self.held.setup(len(self.sids) - 1)
        return len(self.sids) - 1

    def turn(self, i: int) -> None:
        self.held.turn(i)

    def close(self) -> None:
        self.held.close()
        self._cm.__exit__(None, None, None)


def vertebra_fill(data_dir: str, events: int) -> str:
    """A session id whose stream already holds ``events`` events of a conversation,
    written into the data directory's spine before any Host loads it."""
    from actors.runner import spine_path
    from bench.actors import fill, new_sid

    os.makedirs(data_dir, exist_ok=True)
    sid = new_sid()
    fill(spine_path(data_dir), sid, events)
    return sid


def vertebra_serve(data_dir: str, sid: str) -> None:
    """A fresh Host over an existing data directory serves the next turn of ``sid``."""
    from bench.actors import WAIT, host

    with host(data_dir, durability="normal") as h:
        a = h.send(sid, "after the restart")
        h.wait_turn(sid, a.seq, timeout=WAIT)


# -- LangGraph -------------------------------------------------------------------------


def _langgraph_graph(db: str) -> tuple[Any, sqlite3.Connection]:
    """A one-node graph over `SqliteSaver` on ``db``: the node appends the instant answer
    to ``messages``. The connection is the user's to make, so ``synchronous`` is set on
    it (the saver itself sets only ``journal_mode=WAL``)."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph

    conn = sqlite3.connect(db, check_same_thread=False)
    conn.execute("PRAGMA synchronous = NORMAL")

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=ANSWER)]}

    g = StateGraph(MessagesState)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    return g.compile(checkpointer=SqliteSaver(conn)), conn


class LangGraph:
    """LangGraph with `SqliteSaver`: one ``thread_id`` per session, one saver shared by
    every thread (it serialises on its own lock), checkpoints written before ``invoke``
    returns (``durability="sync"``)."""

    name = "langgraph"

    def __init__(self, db: str, sessions: int) -> None:
        self.db = db
        self.graph, self.conn = _langgraph_graph(db)
        self.threads = [uuid.uuid4().hex for _ in range(sessions)]

    def turn(self, i: int) -> None:
        from langchain_core.messages import HumanMessage

        config = {"configurable": {"thread_id": self.threads[i]}}
        self.graph.invoke({"messages": [HumanMessage(content="hello")]}, config, durability="sync")

    def new_session(self) -> int:
        self.threads.append(uuid.uuid4().hex)
        return len(self.threads) - 1

    def long_session(self, messages: int) -> int:
        """A thread holding ``messages`` messages, written as one state update."""
        from langchain_core.messages import AIMessage, HumanMessage

        history: list[Any] = []
        for k in range(messages // 2):
            history.append(HumanMessage(content=f"question {k} about the quarterly report"))
            history.append(AIMessage(content=ANSWER))
        i = self.new_session()
        config = {"configurable": {"thread_id": self.threads[i]}}
        self.graph.update_state(config, {"messages": history}, as_node="answer")
        return i

    def close(self) -> None:
        self.conn.close()


def langgraph_serve(db: str, thread_id: str) -> None:
    graph, conn = _langgraph_graph(db)
    try:
        from langchain_core.messages import HumanMessage

        config = {"configurable": {"thread_id": thread_id}}
        graph.invoke(
            {"messages": [HumanMessage(content="after the restart")]}, config, durability="sync"
        )
    finally:
        conn.close()


# -- the OpenAI Agents SDK -------------------------------------------------------------


def _sdk() -> tuple[Any, Any, Any]:
    """(an `Agent` on the instant model, the `RunConfig` without tracing, the session
    class at ``synchronous = NORMAL``)."""
    from agents import Agent, RunConfig, SQLiteSession, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)

    class InstantModel(Model):
        """The SDK's model interface, answering at once without the network."""

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            text = ResponseOutputText(type="output_text", text=ANSWER, annotations=[])
            msg = ResponseOutputMessage(
                id=f"msg_{uuid.uuid4().hex}",
                type="message",
                role="assistant",
                status="completed",
                content=[text],
            )
            return ModelResponse(output=[msg], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    class NormalSession(SQLiteSession):  # type: ignore[misc]
        """`SQLiteSession` opens a connection per thread and sets only WAL on it; the
        benchmark adds ``synchronous = NORMAL`` to the same hook."""

        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute("PRAGMA synchronous = NORMAL")

    agent = Agent(name="bench", instructions="Answer briefly.", model=InstantModel())
    return agent, RunConfig(tracing_disabled=True), NormalSession


class AgentsSDK:
    """The Agents SDK's `Runner` with one `SQLiteSession` per session on one file."""

    name = "agents-sdk"

    def __init__(self, db: str, sessions: int) -> None:
        self.agent, self.run_config, self.session_cls = _sdk()
        self.db = db
        self.sessions = [self.session_cls(uuid.uuid4().hex, db) for _ in range(sessions)]
        #: One event loop for the whole run, so its worker threads (and the session's
        #: per-thread connections) live as long as a server's would.
        self.loop = asyncio.new_event_loop()

    def new_session(self) -> int:
        self.sessions.append(self.session_cls(uuid.uuid4().hex, self.db))
        return len(self.sessions) - 1

    async def aturn(self, i: int) -> None:
        from agents import Runner

        await Runner.run(self.agent, "hello", session=self.sessions[i], run_config=self.run_config)

    def long_session(self, messages: int) -> int:
        """A session holding ``messages`` items, added in one call."""
        items: list[Any] = []
        for k in range(messages // 2):
            items.append({"role": "user", "content": f"question {k} about the quarterly report"})
            items.append({"role": "assistant", "content": ANSWER})
        i = self.new_session()
        self.loop.run_until_complete(self.sessions[i].add_items(items))
        return i

    def close(self) -> None:
        for s in self.sessions:
            s.close()
        self.loop.close()


def agents_serve(db: str, session_id: str) -> None:
    from agents import Runner

    agent, run_config, session_cls = _sdk()
    s = session_cls(session_id, db)
    try:
        asyncio.run(Runner.run(agent, "after the restart", session=s, run_config=run_config))
    finally:
        s.close()
