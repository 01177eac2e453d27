"""Agent replies: Markdown (what models write) → Slack mrkdwn, split into messages Slack accepts.

Slack's mrkdwn is not Markdown: bold is ``*x*``, italics ``_x_``, strike ``~x~``, links
``<url|text>``, no headings, no bullets, and ``& < >`` must be escaped everywhere (Slack stores
them escaped even inside code, so we do too). Code spans and fences keep their content verbatim
apart from that escaping. Mentions a model or a person wrote (``<!channel>``, ``<!here>``, ``<@U…>``,
``<!subteam^…>``) become plain names (:func:`no_pings`, the one neutralizer every builder of such text
uses): nothing they typed may ping a person or a group on the bot's behalf.

Cards are where people decide, so text a model or a tool wrote is held to stricter rules there
(:func:`decision_mrkdwn`, :func:`decision_plain`, :func:`literal_mrkdwn`): every link shows
its real host, no mention written by a model pings anyone, and characters that hide or reorder text
are dropped or shown.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict
from urllib.parse import quote, unquote

from slack_sdk.models.blocks import MarkdownTextObject, SectionBlock

from blocks.limits import (
    ELLIPSIS,
    MESSAGE_BLOCKS,
    MESSAGE_BLOCKS_TEXT,
    MESSAGE_TEXT,
    SECTION_TEXT,
    escape_mrkdwn,
    one_line,
    truncate,
    truncate_mrkdwn,
)


class Message(TypedDict):
    """Keyword arguments for chat.postMessage / chat.update: fallback ``text`` and ``blocks``."""

    text: str
    blocks: list[dict]


# --- Markdown → mrkdwn ----------------------------------------------------------------------

_FENCE_RE = re.compile(r"^[ \t]*(```|~~~)")
_CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1", re.S)
# Slack tokens a model may legitimately write in a reply: user/channel mentions, dates, links.
_SLACK_TOKEN_RE = re.compile(
    r"<(?:@[UW][A-Z0-9]+(?:\|[^<>]*)?|#C[A-Z0-9]+(?:\|[^<>]*)?|!date\^[^<>]+|(?:https?://|mailto:)[^<>\s]+)>"
)
# On a card every <…> a model wrote is looked at (labels with spaces too), none is passed on as it is.
_ANY_TOKEN_RE = re.compile(r"<([^<>\n]*)>")
_MD_LINK_RE = re.compile(
    r"!?\[([^\]\n]+)\]\(\s*<?([^()\s<>]+(?:\([^()\s]*\))?[^()\s<>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_BARE_URL_RE = re.compile(r"(?<![\w/@.])https?:[^\s<>\ue000\ue001]+", re.I)
_BOLD_ITALIC_RE = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*")
# "__" opens and closes only at a word's edge (CommonMark: "snake__case__name" stays as written); "**" may
# sit inside a word. Group 1 or 2 is the bold text.
_BOLD_RE = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)")
_STRIKE_RE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_ITALIC_STAR_RE = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_HEADING_RE = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$")
_RULE_RE = re.compile(r"^[ \t]{0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_BULLET_RE = re.compile(r"^([ \t]*)[-*+][ \t]+(.*)$")
_TASK_RE = re.compile(r"^\[([ xX])\][ \t]+")
_QUOTE_RE = re.compile(r"^[ \t]*>[ \t]?(.*)$")

# Private-use characters stand in for protected pieces while the inline rules run. The same characters in
# the text itself are dropped first: a stray "\ue0007\ue000" would pick up another piece, or none (a crash).
_HOLD = "\ue000"
_BOLD = "\ue001"
_HOLD_RE = re.compile(_HOLD + r"(\d+)" + _HOLD)
_PRIVATE_RE = re.compile(f"[{_HOLD}{_BOLD}]")
_LONE_AMP_RE = re.compile(r"&(?!amp;|lt;|gt;)")


def markdown_to_mrkdwn(md: str) -> str:
    """Convert the Markdown a model writes into Slack mrkdwn (for replies): links and dates stay tokens;
    nothing it wrote pings anyone (:func:`no_pings`)."""
    return _convert(no_pings(md), decision=False)


def decision_mrkdwn(md: str) -> str:
    """Markdown a model or a tool wrote, as mrkdwn for a card people decide on.

    Like :func:`markdown_to_mrkdwn`, but every link shows its real host (see :func:`_link_view`), no
    mention, broadcast or channel token survives (``<@U1>`` → ``@U1``, ``<!here>`` → ``@here``) and
    characters that hide or reorder text are dropped. Put it in a ``verbatim`` text object, so Slack
    adds no links or mentions of its own either."""
    return _convert(no_pings(_visible(md)), decision=True)


def _convert(md: str, *, decision: bool) -> str:
    out: list[str] = []
    fence: str | None = None
    for line in _PRIVATE_RE.sub("", md).replace("\r\n", "\n").split("\n"):
        opener = _FENCE_RE.match(line)
        if opener and fence is None and line.strip().count(opener.group(1)) >= 2:
            opener = None  # ```inline``` on one line is a code span, not a fence
        if fence is not None:
            if opener and opener.group(1) == fence and not line.strip()[3:].strip("`~"):
                fence = None
                out.append("```")
            else:
                out.append(escape_mrkdwn(line))
        elif opener:
            fence = opener.group(1)
            # Slack has no syntax highlighting: drop the info string ("```python"), keep the fence.
            out.append("```")
        else:
            out.append(_convert_line(line, decision))
    if fence is not None:  # an unterminated fence would swallow the rest of the message in Slack
        out.append("```")
    return "\n".join(out)


def _convert_line(line: str, decision: bool) -> str:
    if _RULE_RE.match(line):
        return "──────────"
    heading = _HEADING_RE.match(line)
    if heading:
        text = _inline(heading.group(1), decision).replace("*", "").strip()
        return f"*{text}*" if text else ""
    quote = _QUOTE_RE.match(line)
    if quote:
        return "> " + _inline(quote.group(1), decision)
    bullet = _BULLET_RE.match(line)
    if bullet:
        indent, body = bullet.groups()
        task = _TASK_RE.match(body)
        if task:
            body = ("☑ " if task.group(1).lower() == "x" else "☐ ") + body[task.end() :]
        level = len(indent.expandtabs(4)) // 2
        return "    " * level + ("•" if level == 0 else "◦") + " " + _inline(body, decision)
    return _inline(line, decision)


def _inline(text: str, decision: bool = False) -> str:
    held: list[str] = []
    sources: list[str] = []

    def hold(piece: str, source: str) -> str:
        held.append(piece)
        sources.append(source)
        return f"{_HOLD}{len(held) - 1}{_HOLD}"

    def source(part: str) -> str:  # what the model wrote, held pieces put back
        return _HOLD_RE.sub(lambda m: sources[int(m.group(1))], part)

    text = _CODE_SPAN_RE.sub(lambda m: hold(_code_span(m.group(1), m.group(2)), m.group(0)), text)
    if decision:  # links before tokens: "[<https://a|b>](https://evil)" is one link, judged as a whole
        text = _MD_LINK_RE.sub(
            lambda m: hold(_decision_link(source(m.group(2)), source(m.group(1))), source(m.group(0))), text
        )
        text = _ANY_TOKEN_RE.sub(
            lambda m: hold(_decision_token(source(m.group(1))), source(m.group(0))), text
        )
        text = _BARE_URL_RE.sub(lambda m: _bare_url(m.group(0), hold), text)
    else:  # links first here too: a token inside a link's label must not end up nested in it
        text = _MD_LINK_RE.sub(
            lambda m: hold(_link(m.group(2), m.group(1), source(m.group(1))), source(m.group(0))), text
        )
        text = _SLACK_TOKEN_RE.sub(
            lambda m: hold(_reply_token(m.group(0), source(m.group(0))), source(m.group(0))), text
        )
    text = escape_mrkdwn(text)
    text = _BOLD_ITALIC_RE.sub(lambda m: f"{_BOLD}_{m.group(1)}_{_BOLD}", text)
    text = _BOLD_RE.sub(lambda m: f"{_BOLD}{m.group(1) or m.group(2)}{_BOLD}", text)
    text = _STRIKE_RE.sub(r"~\1~", text)
    text = _ITALIC_STAR_RE.sub(r"_\1_", text)
    text = text.replace(_BOLD, "*")
    while _HOLD_RE.search(text):  # a held link label may itself contain a held code span
        text = _HOLD_RE.sub(lambda m: held[int(m.group(1))], text)
    return text


def _code_span(ticks: str, code: str) -> str:
    # Slack knows `code` and ```code```; a Markdown ``span`` becomes a single-backtick span.
    fence = "```" if len(ticks) >= 3 else "`"
    return fence + escape_mrkdwn(code) + fence


def _link(url: str, label: str, written: str | None = None) -> str:
    """A link in a reply. ``written``: the label as the model wrote it (``label`` may hold code spans)."""
    label_text = _BOLD_RE.sub(lambda m: m.group(1) or m.group(2), label).replace("`", "")
    label_text = escape_mrkdwn(label_text).replace("|", "¦")
    if not re.match(r"^(?:https?://|mailto:)", url, re.I):
        return f"{label_text} ({escape_mrkdwn(url)})"
    target = _http_target(url)
    if target is not None and _looks_like_link(written or label):  # "[https://stripe.com](https://evil…)"
        return _slack_link(target.url, escape_mrkdwn(target.shown))
    safe_url = url.replace("&", "&amp;").replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")
    return f"<{safe_url}|{label_text}>"


def _reply_token(token: str, written: str) -> str:
    """A Slack token a model wrote in a reply, kept as it is, unless it is a link whose label reads like
    an address: that one shows its real address instead. ``written``: the token with held pieces put back."""
    if _HOLD in token:  # it holds a converted link: as a token it would nest links, so it stays text
        return escape_mrkdwn(token)
    url, bar, label = written[1:-1].partition("|")
    if bar and _SCHEME_RE.match(url) and _looks_like_link(label):
        return _link(url, label)
    return _LONE_AMP_RE.sub("&amp;", token)  # Slack wants & escaped inside tokens too


# --- links and mentions a model wrote, on decision surfaces -----------------------------------

# Characters that hide text or change the order it reads in (zero-width spaces, soft hyphen, direction
# marks, embeddings, overrides and isolates): "\u202emoc.epirts" reads as "stripe.com". ZWJ and ZWNJ are
# kept: emoji sequences and some scripts need them.
_HIDDEN_RE = re.compile("[\u00ad\u061c\u180e\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_SCHEME_RE = re.compile(r"^([a-z][a-z0-9+.-]*):", re.I)
_HOST_RE = re.compile(r"^[a-z0-9_-]+(?:\.[a-z0-9_-]+)*$")
_IPV6_RE = re.compile(r"^\[[0-9a-f:.]+\]$")
# A label that reads like an address: a scheme, "www.", or a dotted name ending in letters ("stripe.com",
# "stripe。com", "x.py"). Prose rarely matches; when it does the label is only replaced by the real address.
_LINKISH_RE = re.compile(r"://|\bwww\.|mailto:|[\w-][.\u3002\uff0e\uff61](?:xn--|[^\W\d_]{2})", re.I)
_URL_SAFE = "/?#[]@!$&'()*+,;=:%~-._"
_BROADCASTS = {"!here": "@here", "!channel": "@channel", "!everyone": "@everyone"}
# a link's text (label and host) stays short: a cut drops a whole link, so a long one would vanish
LINK_LABEL_CHARS = 80
LINK_SHOWN_CHARS = 80
HOST_CHARS = 64


@dataclass(frozen=True)
class _Target:
    """Where an http(s) link goes, rebuilt from its parts so that what is shown is exactly what opens."""

    url: str  # scheme://host[:port]/path — no user info, host in ASCII
    host: str  # "evil.example", "xn--strpe-p2e.com", "[::1]:8443"; a long host keeps its end
    shown: str  # host and path: the text of a link whose own label read like an address


def _visible(text: str) -> str:
    return _HIDDEN_RE.sub("", text)


def reveal_hidden(text: str) -> str:
    """``text`` with its hidden characters written out (``[U+202E]``), for text shown exactly as written."""
    return _HIDDEN_RE.sub(lambda m: f"[U+{ord(m.group(0)):04X}]", text)


def _http_target(url: str) -> _Target | None:
    """Where an http(s) URL really goes, or None for another scheme or a host that is not a plain name
    or IP address (such a URL is shown, never linked)."""
    scheme = _SCHEME_RE.match(url)
    if scheme is None or scheme.group(1).lower() not in ("http", "https"):
        return None
    rest = url[scheme.end() :].lstrip("/\\")  # browsers read https:x, https:/x and https:\\x as https://x
    end = min((i for i in (rest.find(c) for c in "/\\?#") if i >= 0), default=len(rest))
    # "https://stripe.com@evil.example/" goes to evil.example; a backslash ends the host, as in browsers
    host, port = _split_port(rest[:end].rpartition("@")[2])
    ascii_host = _ascii_host(host)
    if ascii_host is None or not (port == "" or port.isdigit()):
        return None
    where = ascii_host + (f":{port}" if port else "")
    path = quote(rest[end:].replace("\\", "/"), safe=_URL_SAFE)
    host_shown = _keep_end(where, HOST_CHARS)
    shown = host_shown + (truncate(path, LINK_SHOWN_CHARS - len(host_shown)) if path.strip("/") else "")
    return _Target(f"{scheme.group(1).lower()}://{where}{path}", host_shown, shown)


def _split_port(hostport: str) -> tuple[str, str]:
    if hostport.startswith("["):  # [::1]:8443
        close = hostport.find("]") + 1
        host, rest = hostport[:close], hostport[close:]
        return host, rest[1:] if rest.startswith(":") else rest
    host, colon, port = hostport.rpartition(":")
    return (host, port) if colon else (hostport, "")


def _ascii_host(host: str) -> str | None:
    """The host as a browser looks it up, in ASCII: %-escapes decoded, IDN as punycode (so a Cyrillic "і"
    in "strіpe.com" shows as "xn--strpe-p2e.com"); None when it is not a plain host name or IP address."""
    host = unquote(host).lower().rstrip(".")
    if _IPV6_RE.match(host):
        return host
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    return host if len(host) <= 253 and _HOST_RE.match(host) else None


def _keep_end(host: str, limit: int) -> str:
    # the end of a host names who owns it ("….evil.example"), so a long one loses its start
    return host if len(host) <= limit else ELLIPSIS + host[-(limit - 1) :]


def _looks_like_link(label: str) -> bool:
    folded = unicodedata.normalize("NFKC", _visible(label)).replace("\u200c", "").replace("\u200d", "")
    return bool(_LINKISH_RE.search(folded))


def _link_view(url: str, label: str) -> tuple[str, str | None]:
    """A link a model wrote, as (its text, where a click goes or None).

    The real host is always part of the text: after the label, "Refund policy (evil.example)", or as
    the text itself when the label is empty or reads like an address, since "https://stripe.com/…" on
    a link to evil.example is the attack. Being inside the link, the host is never cut apart from it.
    Only http(s) links stay clickable; ``javascript:``, ``data:``, ``mailto:``… are shown as text."""
    target = _http_target(url)
    text = truncate(one_line(_BOLD_RE.sub(lambda m: m.group(1) or m.group(2), label).replace("`", "")), LINK_LABEL_CHARS)
    honest = bool(text) and not _looks_like_link(text)
    if target is None:
        where = truncate(one_line(url), LINK_SHOWN_CHARS)
        return (f"{text} ({where})" if honest else where), None
    return (f"{text} ({target.host})" if honest else target.shown), target.url


def _slack_link(url: str, escaped_text: str) -> str:
    return f"<{url.replace('&', '&amp;')}|{escaped_text.replace('|', '¦')}>"


def _decision_link(url: str, label: str) -> str:
    text, href = _link_view(url, label)
    return _slack_link(href, escape_mrkdwn(text)) if href else escape_mrkdwn(text)


# Every Slack token that notifies someone: <@U…>/<@W…> (a person), <!here>, <!channel>, <!everyone>,
# <!subteam^S…> (a group), with or without a "|label"; a date (<!date^…>) notifies nobody.
_PING_RE = re.compile(r"<((?:@|!(?!date\^))[^<>\n]*)>")


def _ping_name(target: str) -> str:
    """A pinging token's target ("@U0BOB", "!here", "!subteam^S1") as the plain name people read."""
    if target in _BROADCASTS:
        return _BROADCASTS[target]
    if target.startswith("!subteam^"):
        return "@" + target.removeprefix("!subteam^")
    return "@" + target.lstrip("@!")


def no_pings(text: str) -> str:
    """The one neutralizer: ``text`` someone typed or the model wrote, with every
    token that would notify a person or a group on the bot's behalf turned into the plain name it
    stands for: ``<!channel>`` → "@channel", ``<@U0BOB|bob>`` → "@U0BOB" (the id, never a label the
    writer chose), ``<!subteam^S1|@admins>`` → "@S1". For Markdown (a ``markdown`` block, streamed
    ``markdown_text``) and before any mrkdwn conversion; the builders of cards go further (escape
    everything). Bare words ("@here") stay words: Slack only parses them where a builder lets it
    (``verbatim: false``), and none of ours does for such text."""
    return _PING_RE.sub(lambda m: _ping_name(m.group(1).partition("|")[0]), text)


def streamable(md_so_far: str) -> str:
    """What of a reply still being written may be shown: :func:`no_pings` of it, holding back an
    unclosed ``<…`` at its end (sent in pieces, "<!chan" + "nel>" would arrive as a live ``<!channel>``).
    Each result is a prefix of the next one's and of ``no_pings`` of the whole reply."""
    start = md_so_far.rfind("<")
    if start >= 0 and ">" not in md_so_far[start:] and "\n" not in md_so_far[start:]:
        md_so_far = md_so_far[:start]
    return no_pings(md_so_far)


def _token_words(inner: str) -> str | None:
    """A Slack token a model wrote (the part between ``<`` and ``>``) as harmless words: a mention
    names without pinging, a broadcast is only words, a date shows its fallback (a date can carry a
    link); None for a link, anything else as typed."""
    target, _, label = inner.partition("|")
    if re.fullmatch(r"[@#][A-Z0-9]+", target):
        return target  # <@U0BOB> → @U0BOB, <#C1|general> → #C1: the id, not a label the model chose
    if target in _BROADCASTS or target.startswith("!subteam^"):
        return _ping_name(target)
    if target.startswith("!date^"):
        return label or target
    if _SCHEME_RE.match(target):
        return None
    return f"<{inner}>"


def _decision_token(inner: str) -> str:
    words = _token_words(inner)
    if words is not None:
        return escape_mrkdwn(words)
    url, _, label = inner.partition("|")
    return _decision_link(url, label)


def _trim_url(url: str) -> str:
    """A bare URL without the punctuation of the sentence around it: "(see https://x.io/a_(b))." gives
    "https://x.io/a_(b)"."""
    trimmed = url.rstrip(".,;:!?'\"*_~")
    while trimmed.endswith(")") and trimmed.count(")") > trimmed.count("("):
        trimmed = trimmed[:-1].rstrip(".,;:!?'\"*_~")
    return trimmed


def _bare_url(url: str, hold: Callable[[str, str], str]) -> str:
    trimmed = _trim_url(url)
    return hold(_decision_link(trimmed, ""), trimmed) + _url_tail(url)


def decision_plain(text: str, limit: int | None = None) -> str:
    """Text a model or a tool wrote, for a ``plain_text`` object on a card (button and option labels):
    the links, mentions and hidden characters of :func:`decision_mrkdwn`, as words ("Refund policy
    (evil.example)", "@here"). Slack parses nothing in plain text, but people read it all the same.
    Cut to ``limit`` without cutting into a link's words: a host cut short could read as another."""
    held: list[str] = []
    sources: list[str] = []

    def hold(piece: str, source: str) -> str:
        held.append(one_line(piece))
        sources.append(source)
        return f"{_HOLD}{len(held) - 1}{_HOLD}"

    def source(part: str) -> str:  # what the model wrote, held pieces put back
        return _HOLD_RE.sub(lambda m: sources[int(m.group(1))], part)

    text = no_pings(one_line(_visible(_PRIVATE_RE.sub("", text))))
    text = _MD_LINK_RE.sub(lambda m: hold(_link_view(m.group(2), m.group(1))[0], m.group(0)), text)
    text = _ANY_TOKEN_RE.sub(lambda m: hold(_plain_token(source(m.group(1))), source(m.group(0))), text)
    text = _BARE_URL_RE.sub(
        lambda m: hold(_link_view(_trim_url(m.group(0)), "")[0], "") + _url_tail(m.group(0)), text
    )
    return _fit(text, held, limit)


def _plain_token(inner: str) -> str:
    words = _token_words(inner)
    if words is not None:
        return words
    url, _, label = inner.partition("|")
    return _link_view(url, label)[0]


def _url_tail(url: str) -> str:
    return url[len(_trim_url(url)) :]


def _fit(text: str, held: list[str], limit: int | None) -> str:
    """``text`` with its held pieces put back, cut visibly to ``limit`` between pieces, never inside one."""
    parts = _HOLD_RE.split(text)  # text, index, text, index, …, text
    pieces = [held[int(part)] if i % 2 else part for i, part in enumerate(parts)]
    whole = "".join(pieces)
    if limit is None or len(whole) <= limit:
        return whole
    out = ""
    for i, piece in enumerate(pieces):
        room = limit - 1 - len(out)
        if len(piece) > room:
            out += "" if i % 2 else piece[:room]
            break
        out += piece
    return out.rstrip() + ELLIPSIS


def literal_mrkdwn(text: str) -> str:
    """Text shown exactly as written (a tool's argument, a person's typed answer): escaped, so nothing
    in it is a token, link or mention, with hidden characters written out. Show it ``verbatim``."""
    return escape_mrkdwn(reveal_hidden(text))


def link_hosts(text: str) -> dict[str, bool]:
    """The real hosts of the http(s) URLs in ``text``, in order, each with whether every URL going there
    spells it plainly: "https://host…", not "https://stripe.com@host", "https://%65vil.example" or
    look-alike letters (whose real host is punycode)."""
    hosts: dict[str, bool] = {}
    for match in _BARE_URL_RE.finditer(_visible(text)):
        for part in re.split(r"[|()\[\]{}\"'`,;]", match.group(0)):  # "<url|label>", "[label](url)", JSON
            target = _http_target(part) if _SCHEME_RE.match(part) else None
            if target is not None:
                plainly = re.match(rf"https?://{re.escape(target.host)}(?![\w.@%-])", part, re.I) is not None
                hosts[target.host] = hosts.get(target.host, True) and plainly
    return hosts


# --- splitting ------------------------------------------------------------------------------

_OPEN = "```\n"
_CLOSE = "\n```"


def split_message(text: str, limit: int = SECTION_TEXT) -> list[str]:
    """Cut mrkdwn ``text`` into pieces of at most ``limit`` characters.

    Prefers paragraph, then line, then word boundaries. A cut inside a ``` block closes the fence
    at the end of the piece and reopens it at the start of the next, so each piece renders alone.
    """
    if limit < 32:
        raise ValueError("limit too small to split sensibly")
    pieces: list[str] = []
    rest = text.strip("\n")
    in_code = False
    while rest:
        prefix = _OPEN if in_code else ""
        whole = prefix + rest
        if len(whole) <= limit and whole.count("```") % 2 == 0:
            pieces.append(whole)
            break
        budget = limit - len(prefix) - len(_CLOSE)
        cut, skip = _best_cut(rest, budget)
        piece = prefix + rest[:cut]
        rest = rest[cut + skip :]
        in_code = piece.count("```") % 2 == 1
        opened_at_end = piece.rstrip().endswith("```") and piece.rstrip()[:-3].strip()
        if in_code and opened_at_end:  # cut right after an opening fence: move the fence on
            piece, rest, in_code = piece.rstrip()[:-3].rstrip(), "```\n" + rest, False
        if in_code:
            piece += _CLOSE
            if rest.startswith("```"):  # the block ended right at the cut: nothing to reopen
                rest = rest[3:].lstrip("\n")
                in_code = False
        else:
            rest = rest.lstrip("\n")
        if piece.strip() and piece.strip("`\n"):
            pieces.append(piece.rstrip() if not in_code else piece)
    return pieces


def _best_cut(text: str, budget: int) -> tuple[int, int]:
    """Where to cut ``text`` (at most ``budget`` characters kept) and how many separator characters
    to drop there."""
    if len(text) <= budget:
        return len(text), 0
    for separator in ("\n\n", "\n", " "):
        at = text.rfind(separator, 0, budget + len(separator))
        if at > 0:
            safe = _safe_cut(text, at)
            return (at, len(separator)) if safe == at else (safe, 0)
    return _safe_cut(text, budget), 0


def _safe_cut(text: str, at: int) -> int:
    """Move a cut left so it does not fall inside an ``&amp;`` entity or a ``<…>`` token
    (never to 0: an absurdly long token is cut rather than looping)."""
    head = text[:at]
    lt, gt = head.rfind("<"), head.rfind(">")
    if lt > gt and ">" in text[at:] and lt > 0:
        at, head = lt, head[:lt]
    amp = head.rfind("&", max(0, at - 7))
    if amp > 0 and ";" not in head[amp:] and re.match(r"&[a-z#0-9]*;", text[amp : amp + 8]):
        at = amp
    return at


def reply_messages(md_text: str) -> list[Message]:
    """An agent's Markdown reply as messages Slack accepts: one section per ≤3000-character piece, and
    per message at most 50 blocks whose texts add up to at most 12,000 characters.

    Empty or blank text gives no messages."""
    pieces = split_message(markdown_to_mrkdwn(md_text), SECTION_TEXT) if md_text.strip() else []
    messages: list[Message] = []
    for start, group in _message_groups(pieces):
        blocks = [
            # verbatim: Slack must not turn a bare "@channel" the model wrote into a broadcast
            SectionBlock(block_id=f"reply:{start + i}", text=MarkdownTextObject(text=piece, verbatim=True)).to_dict()
            for i, piece in enumerate(group)
        ]
        messages.append({"text": truncate_mrkdwn("\n".join(group), MESSAGE_TEXT), "blocks": blocks})
    return messages


def _message_groups(pieces: list[str]) -> list[tuple[int, list[str]]]:
    """Consecutive pieces packed into messages (index of the first piece, the pieces)."""
    groups: list[tuple[int, list[str]]] = []
    start, group, size = 0, [], 0
    for index, piece in enumerate(pieces):
        if group and (len(group) == MESSAGE_BLOCKS or size + len(piece) > MESSAGE_BLOCKS_TEXT):
            groups.append((start, group))
            start, group, size = index, [], 0
        group.append(piece)
        size += len(piece)
    if group:
        groups.append((start, group))
    return groups


__all__ = [
    "ELLIPSIS",
    "Message",
    "decision_mrkdwn",
    "decision_plain",
    "link_hosts",
    "literal_mrkdwn",
    "markdown_to_mrkdwn",
    "no_pings",
    "reveal_hidden",
    "reply_messages",
    "split_message",
    "streamable",
]
