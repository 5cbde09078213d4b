"""The public tools as an agent calls them: the ``mcp`` package's own client over streamable HTTP, against the app
launched as ``app.py`` launches it. Every result's text is JSON (the object the API returns), its structured content
is that object, checked by the client against the tool's output schema; bad input is a tool error in one line."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from evaluation.frontier.plan import FAMILIES
from prune.core.recipe import Recipe
from test_public_api import launched
from ui.api import PUBLIC, SCHEMAS
from ui.inputs import Policy

pytestmark = pytest.mark.slow
CUT = Recipe.block(30, 20, 26)


def session_calls(url: str, calls: list[tuple[str, dict]]):
    """(the tools listed, each call's result) from one MCP client session."""
    async def run():
        async with streamable_http_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = (await session.list_tools()).tools
                return tools, [await session.call_tool(name, arguments) for name, arguments in calls]

    return asyncio.run(run())


@pytest.fixture(scope="module")
def agent(tiny_llama_30):
    """The tools listed and the answers to a few calls on a tiny 30-layer model (its positions as wide as the
    frontier's windows), good and bad, from one session."""
    tiny_folder = tiny_llama_30
    calls = [("analyze_model", {"model": tiny_folder, "method": "angular"}),
             ("compare_models", {"model": tiny_folder, "recipe_a": json.dumps(CUT.to_json()), "limit": 3}),
             ("best_under_target", {"model": tiny_folder, "target": "bytes=0.6", "task": "arc_easy", "limit": 2,
                                    "families": "depth, block; int8; int4"}),
             ("analyze_model", {"model": tiny_folder, "method": "nope"}),
             ("best_under_target", {"model": tiny_folder, "target": "bytes=0.06", "task": "arc_easy", "limit": 2,
                                    "families": "int8"}),
             ("best_under_target", {"model": tiny_folder, "target": "bytes=0.6", "families": "depth; int4"})]
    with launched(Policy()) as (_client, url, _backend):
        return session_calls(url, calls)


def test_the_tools_are_the_three_public_endpoints_each_with_its_output_schema(agent):
    tools, _ = agent
    assert {tool.name for tool in tools} == set(PUBLIC) == set(SCHEMAS)
    for tool in tools:
        assert tool.outputSchema == SCHEMAS[tool.name]
        assert all(f'"{field}"' in tool.description for field in SCHEMAS[tool.name]["properties"])
    target = next(tool for tool in tools if tool.name == "best_under_target")
    assert "end exclusive" in next(t for t in tools if t.name == "analyze_model").description
    assert "minutes" in target.description and "families" in target.inputSchema["properties"]


def test_every_answer_is_json_text_and_the_same_object_as_structured_content(agent):
    _, (analyzed, compared, best, *_bad) = agent
    for result in (analyzed, compared, best):
        assert not result.isError and len(result.content) == 1
        assert json.loads(result.content[0].text) == result.structuredContent
    scores = analyzed.structuredContent
    assert scores["num_layers"] == 30 and len(scores["layer_scores"]) == 30
    assert all(b["end"] - b["start"] == b["layers"] for b in scores["best_blocks"])  # end exclusive
    columns = compared.structuredContent["columns"]
    assert set(columns) == {"original", "A"} and Recipe.from_json(columns["A"]["recipe"]) == CUT
    assert "arc_easy acc" in columns["A"]["scores"] and columns["original"]["recipe"] is None


def test_the_best_under_a_target_is_a_measured_point_under_it_whose_recipe_compare_models_takes(agent):
    _, (_a, _c, found, *_bad) = agent
    answer = found.structuredContent
    original = answer["points"][0]
    assert original["label"] == "original" and original["recipe"] is None
    tried = {family for point in answer["points"][1:] for family in point["families"]}
    assert tried <= {"depth, block", "int8", "int4"} and "int4" in tried
    best = answer["best"]
    assert best["weight_bytes"] <= 0.6 * original["weight_bytes"] and best["label"] in answer["front"]
    assert Recipe.from_json(best["recipe"]).steps  # the recipe compare_models' recipe_a and --recipe take
    assert best["perplexity"] == min(p["perplexity"] for p in answer["points"]
                                     if p["weight_bytes"] <= 0.6 * original["weight_bytes"] and p["recipe"])


def test_bad_input_is_a_tool_error_of_one_line(agent):
    _, (*_good, unknown, unreachable, family) = agent
    for result, words in ((unknown, "Unknown method 'nope'"), (unreachable, "No measured model is under"),
                          (family, "Unknown family 'depth'")):
        text = result.content[0].text
        assert result.isError and words in text and "\n" not in text and "Traceback" not in text
        assert result.structuredContent is None
    named = family.content[0].text
    assert all(name in named or (name.rpartition(" + ")[0] in named and "+ int4" in named) for name in FAMILIES)
