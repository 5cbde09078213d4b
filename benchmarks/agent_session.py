"""An agent's session with LayerCut, as docs/app.md shows it: ``python app.py`` started as a user starts it, then the
``mcp`` package's own client over streamable HTTP lists the tools, analyzes the embedded model, asks for the best
model under a target and benchmarks that recipe beside the original, each answer read with ``json.loads``.

Every call is timed (a fresh cache, so nothing is read back): the seconds the best-under-a-target tool states in its
description come from this run. Writes benchmarks/results/agent_session.json.

    .venv/bin/python -m benchmarks.agent_session [--target bytes=0.5] [--limit 20]
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from benchmarks import REPO, harness
from benchmarks.record import write_result
from benchmarks.space_build import wait_up


async def session(url: str, target: str, limit: int) -> dict:
    """The calls an agent makes, each answer parsed from its text and timed."""
    found = {}
    async with streamable_http_client(url + "gradio_api/mcp/") as (read, write, _):
        async with ClientSession(read, write) as client:
            await client.initialize()

            async def call(name: str, **arguments) -> dict:
                with harness.Clock() as clock:
                    result = await client.call_tool(name, arguments)
                text = result.content[0].text
                if result.isError:
                    raise SystemExit(f"{name}: {text}")
                found[name] = {"seconds": round(clock.wall, 1), "structured": result.structuredContent is not None}
                return json.loads(text)

            found["tools"] = sorted(tool.name for tool in (await client.list_tools()).tools)
            scores = await call("analyze_model", model="", method="block_influence")
            best = await call("best_under_target", model="", target=target, task="hellaswag", limit=limit)
            table = await call("compare_models", model="", recipe_a=json.dumps(best["best"]["recipe"]),
                               tasks="hellaswag", limit=limit)
    found.update(best_block_of_6=next(b for b in scores["best_blocks"] if b["layers"] == 6), target=best["target"],
                 best=best["best"], front=best["front"], verdict=best["verdict"],
                 measured=len(best["points"]),
                 hellaswag={label: column["scores"]["hellaswag acc_norm"]["value"]
                            for label, column in table["columns"].items()})
    return found


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--target", default="bytes=0.5", help="the best-under-a-target tool's target")
    parser.add_argument("--limit", type=int, default=20, help="hellaswag questions")
    args = parser.parse_args()
    port = harness.free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    server = subprocess.Popen([sys.executable, "app.py"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_up(url, server)
        found = asyncio.run(session(url, args.target, args.limit))
    finally:
        server.terminate()
        server.wait(30)
    print(json.dumps(found, indent=1))
    write_result("agent_session", found, model="SmolLM2-135M-Instruct (embedded)",
                 how=f"python app.py, then the mcp package's client over streamable HTTP; best_under_target at "
                     f"{args.target}, hellaswag limit {args.limit}, a fresh LayerCut cache")


if __name__ == "__main__":
    harness.in_fresh_cache(main)
