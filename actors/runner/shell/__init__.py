"""The Runner's shell: the actor that carries the registry's actions out with Thespian,
its routing, membership and publishing, the sink router, and the guardian that keeps a
Runner alive."""
