"""The names spans carry: the OpenTelemetry GenAI semantic conventions' attribute names,
ours for what they have no name for, span event names, and OTLP's span kinds and statuses.

The attribute names are our own constants: the upstream Python ones are deprecated and
moving between releases.
"""

from __future__ import annotations

from collections.abc import Mapping

# The GenAI semantic conventions' attribute names.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
MCP_METHOD_NAME = "mcp.method.name"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
# Ours, for what the conventions have no name for.
VERTEBRA_SEQ = "vertebra.seq"
VERTEBRA_TURN = "vertebra.turn"
VERTEBRA_TURN_OUTCOME = "vertebra.turn.outcome"
VERTEBRA_STOP_REASON = "vertebra.turn.stop_reason"
VERTEBRA_REASON = "vertebra.reason"
VERTEBRA_CALL = "vertebra.governance.call"
VERTEBRA_DECISION = "vertebra.governance.decision"
VERTEBRA_FAULT = "vertebra.governance.fault"
VERTEBRA_TRUST = "vertebra.governance.trust"
VERTEBRA_APPROVED = "vertebra.governance.approved"
VERTEBRA_EGRESS_HOST = "vertebra.egress.host"
VERTEBRA_EGRESS_ALLOWED = "vertebra.egress.allowed"
VERTEBRA_CHILD_ID = "vertebra.child.id"
VERTEBRA_GOAL = "vertebra.goal"
VERTEBRA_LINK = "vertebra.link"
VERTEBRA_MCP_SERVER = "vertebra.mcp.server"
# Span event names.
EVENT_APPROVAL_REQUESTED = "vertebra.approval.requested"
EVENT_APPROVAL = "vertebra.approval"
EVENT_EGRESS = "vertebra.egress"

#: Span kinds and statuses, spelled as OTLP's enums without their prefixes.
INTERNAL = "INTERNAL"
CLIENT = "CLIENT"
UNSET = "UNSET"
ERROR = "ERROR"

#: The ``gen_ai.provider.name`` for each ``ore.model.provider``.
PROVIDER_NAMES: Mapping[str, str] = {
    "openai": "openai",
    "responses": "openai",
    "anthropic": "anthropic",
    "scripted": "vertebra.scripted",
}
