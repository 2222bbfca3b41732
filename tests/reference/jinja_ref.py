#!/usr/bin/env python3
"""Renders Jinja templates with Python's jinja2 as transformers renders chat templates.

The reference for strata's Jinja engine (src/jinja). The environment is the one of
transformers.utils.chat_template_utils._compile_jinja_template: an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension,
tojson as json.dumps(ensure_ascii=False, ...) without HTML escaping, raise_exception, and
strftime_now (here with a fixed date instead of the clock, so that outputs are reproducible).

usage: jinja_ref.py CASES.json
CASES.json: a list of {"template": str, "context": {...}, "now": [Y, M, D, h, m, s]}.
Prints a JSON list, one entry per case: {"ok": rendered} or {"error": message}.
Exits 77 when jinja2 is not installed.
"""
import datetime
import json
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja2 is not installed (Debian: python3-jinja2)", file=sys.stderr)
    sys.exit(77)


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} block: renders its body in place."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(
            lineno
        )

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_compiled = {}


def compile_template(source, now):
    """Compiles each (template, date) once: a chat test renders one template many times."""
    key = (source, now)
    if key not in _compiled:
        _compiled[key] = make_env(now).from_string(source)
    return _compiled[key]


def render(case):
    now = datetime.datetime(*case.get("now", [2024, 7, 26, 12, 0, 0]))
    try:
        template = compile_template(case["template"], now)
        return {"ok": template.render(**case.get("context", {}))}
    except Exception as e:  # every failure is a result to compare, not a crash of the script
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    json.dump([render(c) for c in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
