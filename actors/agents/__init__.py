"""Agents: the per-turn agent and its factory, the providers per wire format, the stream
accumulators and the tools.

Pure parts (`wire`, `accumulate`, `formats`, `tools`) hold the rules and are tested as
tables; `http` and `loop` are the effects (HTTP streams on the provider loop).
"""

from ..spec import AgentSpec, TurnInput
from .base import Agent, AgentError, AgentFactory, TurnOutput
from .factory import ModelFactory, ScriptedFactory
from .loop import ModelAgent, Provider, provider_loop
from .scripted import ScriptedProvider
from .tools import CALCULATOR, CLOCK, Tool, ToolError, ToolRegistry, builtin_tools, calculate
from .wire import Message, ModelRequest, ToolCall, ToolSpec

__all__ = [
    "CALCULATOR",
    "CLOCK",
    "Agent",
    "AgentError",
    "AgentFactory",
    "AgentSpec",
    "Message",
    "ModelAgent",
    "ModelFactory",
    "ModelRequest",
    "Provider",
    "ScriptedFactory",
    "ScriptedProvider",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolRegistry",
    "ToolSpec",
    "TurnInput",
    "TurnOutput",
    "builtin_tools",
    "calculate",
    "provider_loop",
]
