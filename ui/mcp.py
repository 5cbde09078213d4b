"""MCP tool results an agent can parse: a tool's text content is its endpoint's JSON (``json.dumps``, never Python's
repr), the same object is its ``structuredContent``, and the tool list declares each tool's output schema (the MCP
specification's structured tool output, 2025-06-18).

Gradio 6 serves the public endpoints as MCP tools (``launch(mcp_server=True)``), but writes a dict result as
``str(dict)`` and declares no output schema. :class:`JsonToolServer` is Gradio's own MCP server with those two things
changed and nothing else; :func:`install` makes Gradio build it (Gradio reads ``gradio.mcp.GradioMCPServer`` when it
makes the app, so this runs before a launch). ``tests/ui/test_mcp.py`` drives it with the ``mcp`` package's client.
"""

from __future__ import annotations

import json

import gradio.mcp
from mcp import types

SCHEMAS: dict[str, dict] = {}  # tool name → the JSON schema of its result (filled by ui.api)


class JsonToolServer(gradio.mcp.GradioMCPServer):
    """Gradio's MCP server whose tools answer JSON: as text, and as structured content checked by their schema."""

    def postprocess_output_data(self, data, root_url: str):
        if all(isinstance(output, (dict, list)) for output in data):
            return [types.TextContent(type="text", text=json.dumps(output)) for output in data]
        return super().postprocess_output_data(data, root_url)

    def create_mcp_server(self):
        server = super().create_mcp_server()
        listing = server.request_handlers[types.ListToolsRequest]
        calling = server.request_handlers[types.CallToolRequest]

        async def list_tools(request: types.ListToolsRequest) -> types.ServerResult:
            found = await listing(request)
            for tool in found.root.tools:
                tool.outputSchema = SCHEMAS.get(tool.name)
            return found

        async def call_tool(request: types.CallToolRequest) -> types.ServerResult:
            found = await calling(request)
            result = found.root
            if request.params.name in SCHEMAS and not result.isError and len(result.content) == 1:
                result.structuredContent = json.loads(result.content[0].text)
            return found

        server.request_handlers[types.ListToolsRequest] = list_tools
        server.request_handlers[types.CallToolRequest] = call_tool
        return server


def install() -> None:
    """Make Gradio serve its MCP tools through :class:`JsonToolServer` (before the app is made)."""
    gradio.mcp.GradioMCPServer = JsonToolServer
