"""The session's shell: the actor that receives messages, the executor that carries a
decision out through ports (Thespian's in the actor, recording ones in the kit and the
warm-up), the turn worker, the outbox of news for the Runner, subscriptions, snapshots
and the auto-sealer. Everything here runs the rules in ``actors.session.rules``."""
