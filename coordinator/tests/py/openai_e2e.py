#!/usr/bin/env python3
"""Drives a HOROS coordinator with the official `openai` Python client.

Usage: openai_e2e.py BASE_URL SCENARIO [options]

BASE_URL is the coordinator's root (http://127.0.0.1:PORT, without /v1). Each scenario prints one
JSON object on stdout (the facts it observed) and exits 0; the Rust test that runs it
(coordinator/tests/e2e_openai_python.rs) makes the assertions. An unexpected exception exits 1
with its traceback on stderr. Every client has max_retries=0, so what the coordinator answers is
what the script sees.

Scenarios:
  chat      --model M [--prompt P] [--max-tokens N]
  stream    --model M [--prompt P] [--max-tokens N]     chunk arrival times, in order
  embed     --model M                                    default (base64) and float encodings
  errors    --model M [--failing-model F]                400, 404, 413 (and F's upstream error) as openai exceptions
  priority  --model M --low N                            a high-priority call overtakes N queued low ones
                                                         (the model's upstream must hang on its first call)
  cold      --model M --timeout-s S [--wait-s W]         503 + Retry-After, then retry until ready
  thinking  --model M                                    x_thinking on and off, whole and streamed: content
                                                         and reasoning_content
  rerank    --model M                                    POST /v1/rerank through the client's generic post
  image     --model M [--size WxH]                       images.generate (b64_json): the PNG's signature and size
  profile   --model ALIAS --client-id C                  a chat naming only an alias, as client C
  cooldown  --model M --client-id C --calls N            N chats as C: status and Retry-After of each
  gateway   --model M --task T --limited-model L --admin-key K
                                                         completions; a task whose primary is down answers
                                                         normally (fallback); L's 429 with Retry-After;
                                                         the admin API with and without the key
"""

import argparse
import base64
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import openai
from openai import OpenAI

CLIENT_ID = "py-e2e"


def client(base, timeout=60.0):
    return OpenAI(base_url=base.rstrip("/") + "/v1", api_key="e2e", max_retries=0, timeout=timeout)


def error_facts(e):
    """What a client can read from an openai exception."""
    facts = {
        "type": type(e).__name__,
        "is_api_status_error": isinstance(e, openai.APIStatusError),
        "status": getattr(e, "status_code", None),
        "code": getattr(e, "code", None),
        "param": getattr(e, "param", None),
        "error_type": getattr(e, "type", None),
        "message": str(e),
    }
    resp = getattr(e, "response", None)
    if resp is not None:
        facts["headers"] = {k.lower(): v for k, v in resp.headers.items()}
        try:
            facts["json"] = resp.json()
        except Exception:  # noqa: BLE001 - report the raw text instead
            facts["text"] = resp.text
    return facts


def get_json(base, path):
    with urllib.request.urlopen(base.rstrip("/") + path, timeout=10) as r:
        return json.loads(r.read())


def metric(base, series):
    """The value of one Prometheus series of the coordinator's /metrics (None if absent)."""
    with urllib.request.urlopen(base.rstrip("/") + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return None


def wait_for(what, pred, timeout_s=20.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise TimeoutError(f"timed out waiting for {what}")


def messages(prompt):
    return [{"role": "user", "content": prompt}]


def scenario_chat(a):
    c = client(a.base)
    r = c.chat.completions.create(
        model=a.model,
        messages=messages(a.prompt),
        max_tokens=a.max_tokens,
        temperature=0,
        extra_body={"x_client_id": CLIENT_ID, "x_priority": 1, "keep_alive": "5m"},
    )
    ch = r.choices[0]
    return {
        "models": sorted(m.id for m in c.models.list()),
        "id": r.id,
        "object": r.object,
        "model": r.model,
        "content": ch.message.content,
        "role": ch.message.role,
        "finish_reason": ch.finish_reason,
        "usage": r.usage.model_dump() if r.usage else None,
    }


def scenario_stream(a):
    c = client(a.base)
    t0 = time.monotonic()
    stream = c.chat.completions.create(
        model=a.model,
        messages=messages(a.prompt),
        max_tokens=a.max_tokens,
        temperature=0,
        stream=True,
        extra_body={"x_client_id": CLIENT_ID},
    )
    chunks = []
    for chunk in stream:
        t = time.monotonic() - t0
        if not chunk.choices:
            chunks.append({"t": t, "content": None, "finish_reason": None, "object": chunk.object})
            continue
        ch = chunk.choices[0]
        chunks.append(
            {
                "t": t,
                "content": ch.delta.content,
                "finish_reason": ch.finish_reason,
                "object": chunk.object,
            }
        )
    content = [x for x in chunks if x["content"]]
    return {
        "chunks": chunks,
        "content_chunks": len(content),
        "text": "".join(x["content"] for x in content),
        "finish_reason": next((x["finish_reason"] for x in chunks if x["finish_reason"]), None),
        "first_content_t": content[0]["t"] if content else None,
        "last_content_t": content[-1]["t"] if content else None,
        "end_t": time.monotonic() - t0,
    }


def scenario_embed(a):
    c = client(a.base)
    inputs = ["the cat sits on the mat", "a cat is sitting on a mat", "quarterly tax report"]
    # The client asks for base64 by default and decodes it; float is the other encoding.
    default = c.embeddings.create(model=a.model, input=inputs, extra_body={"x_client_id": CLIENT_ID})
    floats = c.embeddings.create(model=a.model, input=inputs, encoding_format="float")

    def cos(u, v):
        dot = sum(x * y for x, y in zip(u, v))
        nu = sum(x * x for x in u) ** 0.5
        nv = sum(x * x for x in v) ** 0.5
        return dot / (nu * nv) if nu and nv else 0.0

    vd = [d.embedding for d in default.data]
    vf = [d.embedding for d in floats.data]
    return {
        "model": default.model,
        "count": len(vd),
        "indices": [d.index for d in default.data],
        "dims": [len(v) for v in vd],
        "float_dims": [len(v) for v in vf],
        "max_abs_diff_encodings": max(abs(x - y) for u, v in zip(vd, vf) for x, y in zip(u, v)),
        "cos_similar": cos(vd[0], vd[1]),
        "cos_different": cos(vd[0], vd[2]),
        "usage": default.usage.model_dump() if default.usage else None,
    }


def scenario_errors(a):
    c = client(a.base)
    out = {}

    def expect_error(name, call):
        try:
            call()
            out[name] = {"type": None}
        except openai.APIError as e:  # the base of every API exception
            out[name] = error_facts(e)

    # A malformed extension field: the coordinator refuses it before any upstream sees it.
    expect_error(
        "bad_priority",
        lambda: c.chat.completions.create(
            model=a.model, messages=messages("hi"), extra_body={"x_priority": "high"}
        ),
    )
    expect_error(
        "unknown_model",
        lambda: c.chat.completions.create(model="no-such-model", messages=messages("hi")),
    )
    expect_error(
        "unknown_model_embeddings",
        lambda: c.embeddings.create(model="no-such-model", input="hi"),
    )
    expect_error(
        "unknown_task",
        lambda: c.chat.completions.create(model="task:nope", messages=messages("hi")),
    )
    # Bigger than the coordinator's body limit (the test configures a small one).
    expect_error(
        "too_large",
        lambda: c.chat.completions.create(model=a.model, messages=messages("x" * a.big_bytes)),
    )
    # An upstream's own error is passed through as it came (status and body).
    if a.failing_model:
        expect_error(
            "upstream_error",
            lambda: c.chat.completions.create(model=a.failing_model, messages=messages("hi")),
        )
    # The client still works after errors.
    r = c.chat.completions.create(model=a.model, messages=messages("still alive"), max_tokens=8)
    out["after"] = r.choices[0].message.content
    return out


def raw_post(base, path, body):
    """Sends a POST on a socket of its own and returns the socket, unread: closing it is a
    client that gives up (a timeout, a cancelled task)."""
    host, port = base.split("//", 1)[1].rstrip("/").split(":")
    data = json.dumps(body).encode()
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return s


def scenario_priority(a):
    """A call occupies the model's only place (the test's upstream never answers it); N
    low-priority calls queue behind it, one at a time so their order is known; then a
    high-priority call arrives. The blocking client gives up (closes its connection), which
    frees the place. Records the order in which the calls complete (with one place, the order
    in which they were admitted)."""
    c = client(a.base)
    done = []
    errors = []
    lock = threading.Lock()
    waiting = f'horos_coordinator_queue_waiting{{model="{a.model}"}}'
    running = f'horos_coordinator_model_running{{model="{a.model}"}}'

    def call(name, priority):
        try:
            r = c.chat.completions.create(
                model=a.model,
                messages=messages(name),
                extra_body={"x_priority": priority, "x_client_id": name},
            )
            with lock:
                done.append({"name": name, "content": r.choices[0].message.content, "t": time.monotonic()})
        except Exception as e:  # noqa: BLE001 - reported, the test fails on it
            with lock:
                errors.append({"name": name, "error": repr(e)})

    threads = []

    def spawn(name, priority):
        t = threading.Thread(target=call, args=(name, priority))
        t.start()
        threads.append(t)

    blocker = raw_post(
        a.base,
        "/v1/chat/completions",
        {"model": a.model, "messages": messages("blocker"), "x_priority": 5},
    )
    wait_for("the blocker to be admitted", lambda: metric(a.base, running) == 1)
    for i in range(a.low):
        spawn(f"low-{i}", 9)
        wait_for(f"low-{i} to queue", lambda n=i + 1: metric(a.base, waiting) == n)
    spawn("high", 0)
    wait_for("the high-priority call to queue", lambda: metric(a.base, waiting) == a.low + 1)
    queued = {"waiting": metric(a.base, waiting), "running": metric(a.base, running)}
    # The blocking client leaves: its place goes to the best waiter.
    blocker.close()
    for t in threads:
        t.join(timeout=60)
    return {
        "order": [d["name"] for d in done],
        "contents": [d["content"] for d in done],
        "errors": errors,
        "queued": queued,
        "after": {"waiting": metric(a.base, waiting), "running": metric(a.base, running)},
    }


def scenario_cold(a):
    """A cold model whose expected load time exceeds the call's budget: the coordinator answers
    503 at once with Retry-After; the load goes on; a retry later succeeds."""
    c = client(a.base)
    body = {"x_timeout_s": a.timeout_s, "x_client_id": CLIENT_ID}
    t0 = time.monotonic()
    first = None
    try:
        c.chat.completions.create(model=a.model, messages=messages("cold"), extra_body=body)
    except openai.APIStatusError as e:
        first = error_facts(e)
    first_s = time.monotonic() - t0

    # What the control plane shows right after the refusal (the load started by it).
    states = []

    def state():
        snap = get_json(a.base, "/api/v1/status")
        s = next((x["state"] for x in snap.get("slots", []) if x["model"] == a.model), None)
        if s and (not states or states[-1] != s):
            states.append(s)
        return s in ("LOADING", "READY")

    wait_for("the model to be loading", state, timeout_s=10)

    # Retry (as a client honouring a shorter wait than Retry-After would) until it serves.
    retries = []
    answer = None
    end = time.monotonic() + a.wait_s
    while time.monotonic() < end:
        try:
            r = c.chat.completions.create(model=a.model, messages=messages("warm now"), extra_body=body)
            answer = r.choices[0].message.content
            break
        except openai.APIStatusError as e:
            retries.append({"status": e.status_code, "retry_after": e.response.headers.get("retry-after")})
            state()
            time.sleep(0.25)
    state()
    return {
        "first": first,
        "first_s": first_s,
        "states": states,
        "retries": retries,
        "answer": answer,
    }


def admin_get(base, path, key):
    """(status, JSON body) of an admin GET, with the key as a Bearer token when given."""
    req = urllib.request.Request(base.rstrip("/") + path)
    if key is not None:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def scenario_gateway(a):
    c = client(a.base)
    out = {}
    r = c.completions.create(model=a.model, prompt="Once upon a time", max_tokens=8)
    out["completion"] = {"object": r.object, "text": r.choices[0].text, "model": r.model}
    # The task's primary refuses connections: the answer comes from the next rung, as a
    # normal answer.
    r = c.chat.completions.create(model=f"task:{a.task}", messages=messages("fall back"))
    out["fallback"] = {"content": r.choices[0].message.content, "object": r.object}
    # A rate limit whose Retry-After is beyond the call's budget comes back as it is.
    try:
        c.chat.completions.create(
            model=a.limited_model, messages=messages("hi"), extra_body={"x_timeout_s": 5}
        )
        out["rate_limited"] = {"type": None}
    except openai.APIError as e:
        out["rate_limited"] = error_facts(e)
    out["admin_without_key"] = admin_get(a.base, "/api/v1/models", None)
    out["admin_wrong_key"] = admin_get(a.base, "/api/v1/models", "nope")
    out["admin_with_key"] = admin_get(a.base, "/api/v1/models", a.admin_key)
    return out


def reasoning_of(obj):
    """`reasoning_content`, an extension field the client keeps as an extra attribute."""
    return getattr(obj, "reasoning_content", None)


def scenario_thinking(a):
    c = client(a.base)
    out = {}
    for name, on in [("on", True), ("off", False)]:
        r = c.chat.completions.create(
            model=a.model, messages=messages(a.prompt), extra_body={"x_thinking": on}
        )
        m = r.choices[0].message
        out[name] = {"content": m.content, "reasoning": reasoning_of(m)}
        stream = c.chat.completions.create(
            model=a.model, messages=messages(a.prompt), stream=True, extra_body={"x_thinking": on}
        )
        content, reasoning = [], []
        for chunk in stream:
            for ch in chunk.choices:
                if ch.delta.content:
                    content.append(ch.delta.content)
                if reasoning_of(ch.delta):
                    reasoning.append(reasoning_of(ch.delta))
        out[name + "_stream"] = {"content": "".join(content), "reasoning": "".join(reasoning)}
    return out


def scenario_rerank(a):
    c = client(a.base)
    docs = ["a blue car", "red apple pie", "an apple"]
    r = c.post(
        "/rerank",
        body={"model": a.model, "query": "red apple", "documents": docs, "top_n": 3,
              "x_client_id": CLIENT_ID},
        cast_to=object,
    )
    return {"results": r["results"], "model": r.get("model")}


def scenario_image(a):
    c = client(a.base)
    r = c.images.generate(model=a.model, prompt=a.prompt, size=a.size, response_format="b64_json", n=1)
    png = base64.b64decode(r.data[0].b64_json)
    return {
        "count": len(r.data),
        "signature": png[:8].hex(),
        "chunk": png[12:16].decode("latin-1"),
        "width": int.from_bytes(png[16:20], "big"),
        "height": int.from_bytes(png[20:24], "big"),
    }


def scenario_profile(a):
    c = client(a.base)
    r = c.chat.completions.create(
        model=a.model, messages=messages(a.prompt), extra_body={"x_client_id": a.client_id}
    )
    out = {"content": r.choices[0].message.content, "model": r.model}
    try:
        c.chat.completions.create(model=a.model, messages=messages(a.prompt))
        out["without_profile"] = {"type": None}
    except openai.APIError as e:
        out["without_profile"] = error_facts(e)
    return out


def scenario_cooldown(a):
    c = client(a.base)
    calls = []
    for _ in range(a.calls):
        try:
            c.chat.completions.create(
                model=a.model, messages=messages("hi"), extra_body={"x_client_id": a.client_id}
            )
            calls.append({"status": 200})
        except openai.APIError as e:
            calls.append(error_facts(e))
    return {"calls": calls}


SCENARIOS = {
    "thinking": scenario_thinking,
    "rerank": scenario_rerank,
    "image": scenario_image,
    "profile": scenario_profile,
    "cooldown": scenario_cooldown,
    "gateway": scenario_gateway,
    "chat": scenario_chat,
    "stream": scenario_stream,
    "embed": scenario_embed,
    "errors": scenario_errors,
    "priority": scenario_priority,
    "cold": scenario_cold,
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base")
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", default="Say hello in three words.")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--low", type=int, default=3)
    p.add_argument("--big-bytes", type=int, default=100_000)
    p.add_argument("--failing-model", default=None)
    p.add_argument("--timeout-s", type=float, default=1.0)
    p.add_argument("--wait-s", type=float, default=30.0)
    p.add_argument("--task", default=None)
    p.add_argument("--limited-model", default=None)
    p.add_argument("--admin-key", default=None)
    p.add_argument("--client-id", default=CLIENT_ID)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--size", default="64x48")
    a = p.parse_args()
    out = SCENARIOS[a.scenario](a)
    out["openai_version"] = openai.__version__
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
