"""The machine room (private): the Thespian plumbing and the performance tricks under the
actors: the actor system's start and child hook, forking, the mailslot, Thespian's
logging, the authenticated transport frame, the guarded actor base, the log format and
the latency histogram. Nothing outside ``actors`` imports it; embedders use ``actors``."""
