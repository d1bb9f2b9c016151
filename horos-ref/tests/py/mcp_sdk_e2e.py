"""Drives `horos-ref mcp` with the official MCP Python SDK (`mcp` from PyPI), as a client would.

Usage: mcp_sdk_e2e.py BIN CONFIG --queue Q --pdf PDF --outside PATH

Spawns `BIN --config CONFIG mcp` over stdio (`stdio_client`), initializes a `ClientSession`, lists
the tools and calls each one with real arguments, plus calls that must fail as tool errors
(`isError` results, not protocol errors). Prints one JSON object with what it observed on its
last stdout line; horos-ref/tests/mcp_python_sdk.rs asserts on it. Exits non-zero only when the
session itself fails (the server cannot be started or initialized).
"""

import argparse
import json
import sys
from importlib.metadata import version

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def outcome(result):
    """What a tools/call result says: isError, structuredContent, the text blocks."""
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "text": "\n".join(texts),
    }


async def call(session, name, arguments):
    """A tool call's outcome, or the exception a protocol error raised."""
    try:
        return outcome(await session.call_tool(name, arguments))
    except Exception as e:  # a JSON-RPC error: recorded, the test decides
        return {
            "exception": {
                "type": type(e).__name__,
                "message": str(e),
                "code": getattr(getattr(e, "error", None), "code", None),
            }
        }


async def drive(args):
    server = StdioServerParameters(command=args.bin, args=["--config", args.config, "mcp"])
    seen = {}
    with anyio.fail_after(args.timeout_s):
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                seen["protocol_version"] = init.protocol_version
                seen["server_name"] = init.server_info.name
                seen["server_version"] = init.server_info.version
                seen["has_tools_capability"] = init.capabilities.tools is not None
                seen["instructions"] = init.instructions

                listed = await session.list_tools()
                seen["tools"] = sorted(t.name for t in listed.tools)
                seen["required"] = {
                    t.name: sorted(t.input_schema.get("required", [])) for t in listed.tools
                }

                calls = {}
                calls["submit"] = await call(
                    session, "submit", {"queue": args.queue, "prompt": "hello from the SDK", "priority": 3}
                )
                job = (calls["submit"].get("structured") or {}).get("id")
                calls["status"] = await call(session, "status", {"id": job if job is not None else -1})
                calls["stats"] = await call(session, "stats", {})
                calls["dead"] = await call(session, "dead", {"queue": args.queue, "limit": 5})
                calls["ingest"] = await call(session, "ingest", {"path": args.pdf})
                doc = (calls["ingest"].get("structured") or {}).get("document")
                calls["document"] = await call(session, "document", {"id": doc if doc is not None else -1})
                calls["search"] = await call(session, "search", {"query": 'C++ "unbalanced AND (', "k": 3})
                calls["models"] = await call(session, "models", {"action": "list"})
                # Mistakes: tool errors (isError) with a message, not protocol errors.
                calls["submit_unknown_lane"] = await call(
                    session, "submit", {"queue": "no-such-lane", "prompt": "x"}
                )
                calls["status_missing"] = await call(session, "status", {"id": 987654321})
                calls["ingest_outside"] = await call(session, "ingest", {"path": args.outside})
                calls["models_bad_action"] = await call(session, "models", {"action": "explode"})
                calls["search_bad_mode"] = await call(session, "search", {"query": "x", "mode": "sideways"})
                calls["unknown_tool"] = await call(session, "no_such_tool", {})
                seen["calls"] = calls
                # The session still answers after the failures.
                seen["ping_after"] = (await session.send_ping()) is not None
    return seen


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("config")
    p.add_argument("--queue", required=True)
    p.add_argument("--pdf", required=True)
    p.add_argument("--outside", required=True)
    p.add_argument("--timeout-s", type=float, default=45.0)
    args = p.parse_args()
    seen = anyio.run(drive, args)
    seen["sdk_version"] = version("mcp")
    sys.stdout.write(json.dumps(seen) + "\n")


if __name__ == "__main__":
    main()
