"""What a reducer does with an event it cannot fold: policies are values."""

from __future__ import annotations

import attrs


@attrs.frozen
class Fail:
    """Stop folding at the bad event: the state stays at the event before it, queries are
    answered from it with the failure attached, and nothing past it is folded until a
    rebuild (after a fix) is requested."""


@attrs.frozen
class Skip:
    """Log the error, count the event as skipped and fold on past it."""


@attrs.frozen
class RetryThenFail:
    """Re-read and re-fold the event up to ``attempts`` more times (a storage hiccup may
    pass), then behave as `Fail`."""

    attempts: int = attrs.field(default=3, validator=attrs.validators.ge(1))


FailurePolicy = Fail | Skip | RetryThenFail
