"""The session's rules: its state as a fold of its stream, the commands it takes and the
decisions it returns. Pure (no Thespian, I/O or clock), stacked without cycles:
``state`` < ``commands`` < ``refusals``, ``views`` < ``goals`` < ``gate`` < ``turns``,
``records`` < ``decide``; ``translation`` maps the host protocol onto commands."""
