#!/usr/bin/env python3
"""A text-to-speech worker for the HOROS model pool: OpenAI's `POST /v1/audio/speech` served by
eSpeak NG (Debian's `espeak-ng`, a real formant speech synthesiser that runs on any CPU), with
`GET /health` (200 once the synthesiser answered) and `GET /v1/models`. Python standard library
only.

Usage: tts_worker.py --port PORT --model NAME [--voice DEFAULT_VOICE] [--espeak BINARY]

A request is OpenAI's: `input` (the text, at most 4096 characters), `voice` (an espeak-ng
language or voice file as `espeak-ng --voices` lists them, e.g. `en`, `en-us`, `gmw/en-US`,
optionally with a variant, `en-us+f3`; or one of OpenAI's voice names, mapped to an English
voice), `response_format` and `speed` (0.25 to 4.0: 175 words per minute times `speed`, at
least espeak-ng's 80).

Formats: `wav` (16-bit mono PCM at espeak-ng's 22050 Hz, its header's sizes set to the real
length, so the answer is whole before it is sent: espeak-ng writes a header of unknown length
when it writes to a pipe); `pcm` (the raw 16-bit little-endian samples, streamed as espeak-ng
produces them); `flac` through sox, and `mp3`, `opus`, `aac`, `flac` through ffmpeg, each only
where that converter is installed (streamed as it converts). Any other format is a 400 naming
the formats this machine serves. An unknown voice is a 400 with `param: "voice"`.
"""

import argparse
import json
import re
import shutil
import struct
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer

from worker_http import base_handler, error

MAX_BODY = 1 << 20
MAX_INPUT = 4096
BASE_WPM = 175
MIN_WPM = 80
CHUNK = 8192

CONTENT_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
}

# OpenAI's voice names, so that a client written for OpenAI gets speech rather than a 400.
OPENAI_VOICES = {
    "alloy": "en-us",
    "ash": "en-us+m3",
    "ballad": "en-gb+m2",
    "coral": "en-us+f2",
    "echo": "en-us+m1",
    "fable": "en-gb",
    "nova": "en-us+f3",
    "onyx": "en-us+m7",
    "sage": "en-gb+f4",
    "shimmer": "en-us+f4",
}


def run_text(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def read_voices(espeak):
    """The names `-v` accepts: languages (also the other languages a voice speaks, `(en 2)`)
    and voice files, and the variants' names."""
    voices, variants = set(), set()
    for line in run_text([espeak, "--voices"]).splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 5:
            voices.add(cols[1].lower())
            voices.add(cols[4].lower())
            voices.update(re.findall(r"\(([^ )]+) \d+\)", " ".join(cols[5:]).lower()))
    for line in run_text([espeak, "--voices=variant"]).splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 5:
            variants.add(cols[4].lower().removeprefix("!v/"))
    return voices, variants


def converters():
    """Which formats each installed converter writes: the command that turns a WAV on stdin
    into the format on stdout."""
    conv = {}
    if shutil.which("sox"):
        conv["flac"] = ["sox", "-q", "-t", "wav", "-", "-t", "flac", "-"]
    if shutil.which("ffmpeg"):
        base = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "wav", "-i", "pipe:0"]
        conv["mp3"] = base + ["-f", "mp3", "pipe:1"]
        conv["opus"] = base + ["-c:a", "libopus", "-f", "ogg", "pipe:1"]
        conv["aac"] = base + ["-c:a", "aac", "-f", "adts", "pipe:1"]
        conv["flac"] = base + ["-f", "flac", "pipe:1"]
    return conv


class Engine:
    def __init__(self, espeak, default_voice):
        self.espeak = espeak
        self.default_voice = default_voice
        self.voices, self.variants = read_voices(espeak)
        self.converters = converters()
        self.formats = ["wav", "pcm"] + sorted(self.converters)

    def voice(self, name):
        """The espeak-ng voice of `name`, or None when espeak-ng has none such."""
        name = OPENAI_VOICES.get(name.lower(), name)
        base, _, variant = name.partition("+")
        if base.lower() not in self.voices:
            return None
        if variant and variant.lower() not in self.variants:
            return None
        return name

    def synthesise(self, text, voice, wpm):
        """espeak-ng writing a WAV to a pipe (its header's sizes are placeholders)."""
        p = subprocess.Popen(
            [self.espeak, "--stdout", "-v", voice, "-s", str(wpm)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        # The text on stdin, never on the command line: a text starting with `-` is no option.
        threading.Thread(target=feed, args=(p.stdin, text.encode()), daemon=True).start()
        return p


def feed(pipe, data):
    try:
        pipe.write(data)
    finally:
        pipe.close()


def read_exact(stream, n):
    buf = b""
    while len(buf) < n:
        more = stream.read(n - len(buf))
        if not more:
            break
        buf += more
    return buf


def wav_header(fmt_chunk, data_len):
    """A RIFF header with its real sizes around a `fmt ` chunk's body."""
    return (
        b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt_chunk) + 8 + data_len) + b"WAVE"
        + b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk
        + b"data" + struct.pack("<I", data_len)
    )


def read_header(stream):
    """Reads a streamed WAV's chunks up to its `data` chunk: the `fmt ` body (or None)."""
    if read_exact(stream, 12)[:4] != b"RIFF":
        return None
    fmt_chunk = None
    while True:
        head = read_exact(stream, 8)
        if len(head) < 8:
            return None
        tag, size = head[:4], struct.unpack("<I", head[4:])[0]
        if tag == b"data":
            return fmt_chunk
        body = read_exact(stream, size)
        if tag == b"fmt ":
            fmt_chunk = body


def make_handler(state, model):
    class Handler(base_handler("tts_worker", state, "engine", model, "/v1/audio/speech", MAX_BODY)):
        def do_POST(self):
            got = self.read_post()
            if got is None:
                return
            engine, raw = got
            try:
                req = json.loads(raw)
                if not isinstance(req, dict):
                    raise ValueError("the body must be a JSON object")
            except ValueError as e:
                return error(self, 400, f"bad request: {e}")
            text = req.get("input")
            if not isinstance(text, str) or not text.strip():
                return error(self, 400, "`input` must be a non-empty string", "input")
            if len(text) > MAX_INPUT:
                return error(self, 400, f"`input` is longer than {MAX_INPUT} characters", "input")
            name = req.get("voice") or engine.default_voice
            voice = engine.voice(name) if isinstance(name, str) else None
            if voice is None:
                return error(
                    self, 400,
                    f"unknown voice `{name}`: an espeak-ng voice (`espeak-ng --voices`: en, en-us, "
                    f"fr, gmw/en-US, ..., optionally +variant) or one of {', '.join(sorted(OPENAI_VOICES))}",
                    "voice",
                )
            fmt = req.get("response_format") or "wav"
            if fmt not in engine.formats:
                return error(
                    self, 400,
                    f"response_format `{fmt}` is not served here: this worker serves "
                    f"{', '.join(engine.formats)} (mp3, opus and aac need ffmpeg)",
                    "response_format",
                )
            try:
                speed = float(req.get("speed", 1.0))
            except (TypeError, ValueError):
                speed = -1.0
            if not 0.25 <= speed <= 4.0:
                return error(self, 400, "`speed` must be a number from 0.25 to 4.0", "speed")
            wpm = max(MIN_WPM, round(BASE_WPM * speed))
            self.speak(engine, text, voice, wpm, fmt)

        def speak(self, engine, text, voice, wpm, fmt):
            p = engine.synthesise(text, voice, wpm)
            try:
                if fmt == "wav":
                    return self.whole_wav(p)
                if fmt == "pcm":
                    fmt_chunk = read_header(p.stdout)
                    if fmt_chunk is None:
                        return self.failed(p)
                    return self.stream(CONTENT_TYPES[fmt], p.stdout)
                conv = subprocess.Popen(
                    engine.converters[fmt], stdin=p.stdout, stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
                p.stdout.close()  # the converter holds the pipe now
                try:
                    first = conv.stdout.read1(CHUNK) if hasattr(conv.stdout, "read1") else conv.stdout.read(CHUNK)
                    if not first:
                        conv.wait()
                        return self.failed(p)
                    self.stream(CONTENT_TYPES[fmt], conv.stdout, first)
                finally:
                    conv.stdout.close()
                    conv.wait()
            finally:
                if p.stdout and not p.stdout.closed:
                    p.stdout.close()
                p.wait()

        def whole_wav(self, p):
            fmt_chunk = read_header(p.stdout)
            data = p.stdout.read() if fmt_chunk is not None else b""
            if fmt_chunk is None or p.wait() != 0:
                return self.failed(p)
            body = wav_header(fmt_chunk, len(data)) + data
            self.send_response(200)
            self.send_header("content-type", CONTENT_TYPES["wav"])
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def stream(self, content_type, source, first=b""):
            """The bytes as they come, chunked."""
            self.send_response(200)
            self.send_header("content-type", content_type)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            chunk = first
            while True:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                chunk = source.read1(CHUNK)
                if not chunk:
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def failed(self, p):
            p.wait()
            why = p.stderr.read().decode(errors="replace").strip() if p.stderr else ""
            error(self, 500, f"espeak-ng failed: {why or 'no audio'}")

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--voice", default="en", help="the voice of a request that names none")
    p.add_argument("--espeak", default="espeak-ng", help="the espeak-ng executable")
    a = p.parse_args()
    state = {}
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(state, a.model))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    espeak = shutil.which(a.espeak)
    if espeak is None:
        sys.exit(f"tts_worker: `{a.espeak}` not found (scripts/setup_tts.sh installs espeak-ng)")
    engine = Engine(espeak, a.voice)
    if engine.voice(a.voice) is None:
        sys.exit(f"tts_worker: the default voice `{a.voice}` is not an espeak-ng voice")
    state["engine"] = engine
    sys.stderr.write(
        f"tts_worker: {a.model} ready on 127.0.0.1:{a.port} (formats {', '.join(engine.formats)})\n"
    )
    threading.Event().wait()


if __name__ == "__main__":
    main()
