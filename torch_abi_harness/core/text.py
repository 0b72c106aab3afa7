"""Text that leaves the harness for a human: control bytes and escapes stripped, Markdown escaped, ids sorted
the way people count."""

from __future__ import annotations

import html
import re

# ANSI escape sequences (a coloured compiler error: ESC [ 3 1 m) and the C0/C1 control characters
# besides tab and newline. XML 1.0 allows none of them: one in a reason made junit.xml unparseable.
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]|~])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def plain_text(text: str) -> str:
    """Text from a cell (a compiler's error, a test's message) without escape sequences or control characters."""
    return CONTROL.sub("", ANSI_ESCAPE.sub("", text))


def md_text(text: str) -> str:
    """Text from a cell as one line of markdown that renders as written: HTML (`<header>`) as text, markdown's
    punctuation escaped, control characters dropped."""
    one_line = " ".join(plain_text(text).replace("\r", "\n").split("\n"))
    escaped = html.escape(one_line, quote=False)
    return MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(0), escaped)


def md_code(text: str) -> str:
    """Text from a cell as a markdown code span: no backtick or line break can end it early."""
    return "`" + " ".join(plain_text(text).replace("`", "'").split()) + "`"


def natural_key(text: str) -> tuple[str | int, ...]:
    """Ids in the order people read them: numbers by value (r2.9.1 before r2.10.0), the rest as text."""
    return tuple(int(part) if n % 2 else part for n, part in enumerate(re.split(r"(\d+)", text)))


# userinfo in a URL: scheme://user:secret@host or scheme://token@host (a token alone is the secret).
URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]+)(?::(?P<secret>[^@/\s]*))?@")


def redact(text: str) -> str:
    """Every URL in text with its secret replaced by ****, as pip and uv print them: user:****@host, ****@host."""

    def hide(match: re.Match[str]) -> str:
        if match["secret"] is None:
            return f"{match['scheme']}****@"
        return f"{match['scheme']}{match['user']}:****@"

    return URL_USERINFO.sub(hide, text)
