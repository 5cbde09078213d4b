"""Serving the page: the launch arguments, the shared-server policy and Gradio's launch options, inside the
package so that the installed ``layercut`` command serves it without a checkout (``app.py`` calls it too)."""

from __future__ import annotations

import argparse
import os

from evaluation.serving import ModelSpec
from prune.core.paths import cache_root
from ui.inputs import MAX_TEXT_BYTES, Policy
from ui.page import build_page, first_screen
from ui.page.theme import CSS, THEME


def launch_options(policy: Policy | None = None) -> dict:
    """What Gradio 6 takes at launch (tests use it too): appearance, the upload limit, and on a personal
    machine the exports folder for downloads (a shared server serves each visitor's from Gradio's cache), and the MCP
    server."""
    policy = policy or Policy.from_env()
    paths = [] if policy.shared else [str(cache_root() / "exports")]
    return {"theme": THEME, "css": CSS, "allowed_paths": paths, "max_file_size": MAX_TEXT_BYTES,
            "mcp_server": True}  # ui.api's public endpoints as MCP tools, at /gradio_api/mcp/


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Serve the page on GRADIO_SERVER_NAME / _PORT (127.0.0.1:7860 unless set) until interrupted."""
    parser = argparse.ArgumentParser(prog=prog, description="LayerCut: depth-prune an LLM and compare it side by side.")
    parser.add_argument("--model", default=None, help="the model every new page opens with (default: embedded)")
    parser.add_argument("--shared", action="store_true",
                        help="a server for many visitors: uploads only, no server paths (also LAYERCUT_SHARED=1)")
    args = parser.parse_args(argv)
    policy = Policy.from_env(shared=True if args.shared else None)
    page = build_page(policy=policy, default_model=ModelSpec(args.model) if args.model else None)
    first_screen.start(page)  # beside the launch: the server answers first, pages opened meanwhile wait for it
    page.demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                     server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), **launch_options(policy))
