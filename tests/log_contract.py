"""The log contract suite moved to the public module `spine.testing`; this name stays so
that test modules written against it keep importing."""

from spine.testing import *  # noqa: F403
from spine.testing import __all__  # noqa: F401
