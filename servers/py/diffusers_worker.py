#!/usr/bin/env python3
"""An image-generation worker for the HOROS model pool: OpenAI's `POST /v1/images/generations`
served from a diffusers pipeline, with `GET /health` (200 once the pipeline is loaded) and
`GET /v1/models`.

Usage: diffusers_worker.py --port PORT --model NAME --pipeline PIPELINE [--steps N]

PIPELINE is a text-to-image diffusers pipeline directory (or hub name already in the local
cache), loaded with `DiffusionPipeline.from_pretrained` on the GPUs in CUDA_VISIBLE_DEVICES (CPU
without one) and called with the request's prompt, size and seed. The tests use the tiny Stable
Diffusion pipeline with random weights that scripts/make_tiny_diffusers.py builds from
configuration (no download; a fraction of a second per image on a CPU). Answers carry
`b64_json` PNGs; `size` is "WIDTHxHEIGHT" (multiples of 8).
"""

import argparse
import base64
import io
import json
import sys
import threading
import time
from http.server import ThreadingHTTPServer

from worker_http import base_handler, error

import torch

MAX_BODY = 1 << 20
MAX_SIDE = 2048
MAX_N = 4


class Worker:
    def __init__(self, pipeline, steps):
        self.lock = threading.Lock()  # one generation at a time
        self.steps = steps
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        from diffusers import DiffusionPipeline

        dtype = torch.float16 if self.device == "cuda" else torch.float32
        self.pipe = DiffusionPipeline.from_pretrained(pipeline, torch_dtype=dtype).to(self.device)
        self.pipe.set_progress_bar_config(disable=True)

    def generate(self, prompt, width, height, seed):
        g = torch.Generator(device="cpu").manual_seed(seed)
        with self.lock, torch.no_grad():
            out = self.pipe(
                prompt=prompt, width=width, height=height,
                num_inference_steps=self.steps, generator=g,
            )
            return out.images[0]


def make_handler(state, model):
    class Handler(base_handler("diffusers_worker", state, "worker", model, "/v1/images/generations", MAX_BODY)):
        def do_POST(self):
            got = self.read_post()
            if got is None:
                return
            worker, raw = got
            try:
                req = json.loads(raw)
                prompt = str(req.get("prompt", ""))
                width, height = (int(v) for v in str(req.get("size", "64x64")).lower().split("x"))
                n = int(req.get("n", 1))
                seed = int(req.get("seed", 0))
            except (ValueError, TypeError, AttributeError) as e:
                return error(self, 400, f"bad request: {e}")
            if not (8 <= width <= MAX_SIDE and 8 <= height <= MAX_SIDE) or width % 8 or height % 8:
                return error(self, 400, f"size must be WxH, multiples of 8 up to {MAX_SIDE}", "size")
            if not 1 <= n <= MAX_N:
                return error(self, 400, f"n must be 1 to {MAX_N}", "n")
            if req.get("response_format", "b64_json") != "b64_json":
                return error(self, 400, "only response_format=b64_json is served", "response_format")
            data = []
            for i in range(n):
                image = worker.generate(prompt, width, height, seed + i)
                buf = io.BytesIO()
                image.save(buf, format="PNG")
                data.append({"b64_json": base64.b64encode(buf.getvalue()).decode(), "revised_prompt": prompt})
            self.reply(200, {"created": int(time.time()), "data": data})

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--pipeline", required=True)
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()
    state = {}
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(state, a.model))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["worker"] = Worker(a.pipeline, a.steps)
    sys.stderr.write(f"diffusers_worker: {a.model} ready on 127.0.0.1:{a.port}\n")
    threading.Event().wait()


if __name__ == "__main__":
    main()
