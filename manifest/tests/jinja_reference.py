"""Renders chat templates as Hugging Face transformers' `apply_chat_template` does: the reference
of horos-manifest's conformance test (manifest/tests/conformance.rs).

The environment is transformers' `_compile_jinja_template` (transformers/utils/chat_template_utils.py):
an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension;
`tojson` as json.dumps with ensure_ascii=False; `raise_exception` and `strftime_now` as globals.
The variables are those `render` is given there: messages, tools, documents,
add_generation_prompt, and the special tokens and extra kwargs.

Input (the file named as the first argument, else stdin): a JSON list of cases, each
{"template": TEXT, "context": {VARIABLES}}.
stdout: a JSON list, one result per case: {"ok": PROMPT}, {"raised": MESSAGE} (raise_exception),
or {"error": "TYPE: MESSAGE"} (any other failure).
"""

import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, case):
    try:
        template = env.from_string(case["template"])
        return {"ok": template.render(**case["context"])}
    except Raised as e:
        return {"raised": str(e)}
    except jinja2.TemplateError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # a template's TypeError, KeyError, ... is a failure to render
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    env = environment()
    if len(sys.argv) > 1:
        with open(sys.argv[1], encoding="utf-8") as f:
            cases = json.load(f)
    else:
        cases = json.load(sys.stdin)
    json.dump([render(env, c) for c in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
