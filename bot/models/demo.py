"""An offline, deterministic model for trying the bot without an API key.

It understands the demo tool pack's requests ("refund ch_1001 $40", "deploy api to staging",
"announce lunch is here", "look up acme", "ask me about lunch", "report an incident") and
explains how to plug in a real model for everything else.
"""

from __future__ import annotations

import json
import re
import secrets

from bot.models.base import Message, ModelResponse, TextCallback, ToolCall, ToolSpec, Usage

HELP = (
    "I'm running **offline** with a built-in demo model, so I only understand a few requests:\n"
    "- `look up acme` — runs right away (no approval)\n"
    "- `refund ch_1001 $40` — needs a finance approver (bob in the local workspace)\n"
    "- `deploy api to staging` — four-eyes: someone other than you approves\n"
    "- `announce lunch is here` — asks once per conversation\n"
    "- `ask me about lunch` — I ask you a question with choices\n"
    "- `report an incident` — I ask you to fill in a short form\n"
    "To use a real model, set `OPENAI_API_KEY` (and optionally `OPENAI_BASE_URL` and `MODEL` for any "
    "OpenAI-compatible endpoint) and restart."
)


class DemoModel:
    name = "demo"

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec], *, on_text: TextCallback | None = None
    ) -> ModelResponse:
        available = {t.name for t in tools}
        last = messages[-1] if messages else {"role": "user", "content": ""}
        if last.get("role") == "tool":
            return _say(_summarize(messages))
        text = str(last.get("content") or "")
        for pattern, build in _INTENTS:
            match = pattern.search(text)
            if match:
                built = build(match)
                if isinstance(built, str):  # not enough to act on: the demo asks instead of guessing
                    return _say(built)
                name, args = built
                if name in available:
                    return ModelResponse(
                        tool_calls=[ToolCall(id=f"call_{secrets.token_hex(6)}", name=name, arguments=json.dumps(args))],
                        usage=Usage(prompt_tokens=len(text) // 4 + 50, completion_tokens=20),
                    )
        return _say(HELP)


def _say(text: str) -> ModelResponse:
    return ModelResponse(text=text, usage=Usage(prompt_tokens=50, completion_tokens=len(text) // 4))


def _refund(m: re.Match[str]) -> tuple[str, dict] | str:
    charge, minus, digits = m.group(1), m.group(2), m.group(3)
    if digits is None:
        return f"How much should I refund on `{charge}`? For example: `refund {charge} $40`."
    if minus or float(digits) <= 0:
        return f"A refund has to be a positive amount; `{minus or ''}{digits}` isn't one."
    return "refund_charge", {"charge_id": charge, "amount": float(digits)}


def _deploy(m: re.Match[str]) -> tuple[str, dict]:
    env = (m.group(2) or "production").lower()
    return "deploy_service", {"service": m.group(1), "environment": "production" if env.startswith("prod") else env}


def _announce(m: re.Match[str]) -> tuple[str, dict]:
    return "post_announcement", {"channel": "#general", "text": m.group(1).strip()}


def _lookup(m: re.Match[str]) -> tuple[str, dict]:
    return "lookup_customer", {"name": m.group(1)}


def _ask(m: re.Match[str]) -> tuple[str, dict]:
    topic = (m.group(1) or "lunch").strip(" ?.!")
    return "ask_question", {
        "question": f"What should we do about {topic}?",
        "options": [{"label": "Pizza"}, {"label": "Sushi"}, {"label": "Skip it"}],
    }


def _incident(m: re.Match[str]) -> tuple[str, dict]:
    return "request_info", {
        "prompt": "Tell me about the incident and I'll write it up.",
        "title": "Incident report",
        "fields": [
            {"name": "what_happened", "label": "What happened?", "type": "long_text"},
            {"name": "severity", "label": "Severity", "type": "choice", "options": ["SEV1", "SEV2", "SEV3"]},
            {"name": "started_at", "label": "Started at", "type": "datetime", "required": False},
            {"name": "customer_facing", "label": "Customers are affected", "type": "yes_no"},
        ],
    }


_INTENTS = [
    (re.compile(r"\brefund\b[^\n]*?\b(ch_\w+)(?:[^\d\n-]*?(-)?\s*\$?\s*(\d+(?:\.\d+)?))?", re.I), _refund),
    (re.compile(r"\bdeploy\s+([\w-]+)(?:\s+(?:to|in|on)\s+(staging|production|prod))?", re.I), _deploy),
    (re.compile(r"\bannounce\s+(.+)", re.I | re.S), _announce),
    (re.compile(r"\b(?:look\s*up|lookup|find)\s+(?:customer\s+)?(?!(?:a|an|the)\b)(\w+)", re.I), _lookup),
    (re.compile(r"\bask\s+me(?:\s+about\s+(.+))?", re.I), _ask),
    (re.compile(r"\b(?:report|file)\s+(?:an?\s+)?incident\b", re.I), _incident),
]


def _summarize(messages: list[Message]) -> str:
    """Say what the last tool calls did, in words a person reads."""
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(str(message.get("content") or ""))
    lines = []
    for content in reversed(results):
        try:
            data = json.loads(content)
        except ValueError:
            lines.append(content)
            continue
        lines.append(_describe(data))
    return "\n".join(lines) or "Done."


_NOT_DONE = {"denied": "it was not approved.", "expired": "nobody answered in time.",
             "cancelled": "the turn was stopped.", "ignored": "the request was set aside."}


def _why_not(denied: dict) -> str:
    """Why a call did not run, in words for people (an approval's outcome, or a rule that refused it)."""
    status = (denied.get("approval") or {}).get("status") if isinstance(denied.get("approval"), dict) else None
    if denied.get("note"):  # only a person who cancelled leaves a note
        return _NOT_DONE["denied"]
    return _NOT_DONE.get(str(status), "it isn't allowed here.")


def _plain_value(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value if isinstance(value, str) else json.dumps(value)


def _describe(data: object) -> str:
    if not isinstance(data, dict):
        return f"Result: `{json.dumps(data)}`"
    if isinstance(data.get("result"), str) and "arguments" in data:  # approved with changes (Edit & approve)
        try:
            inner = json.loads(data["result"])
        except ValueError:
            inner = data["result"]
        return _describe(inner) + " (The approver changed the request before approving it.)"
    if data.get("code") == "TOOL_EXECUTION_DENIED":
        # the note names the canceller by principal id (for a model); a person reads "The approver wrote"
        note = " " + re.sub(r"^\S+ wrote:", "The approver wrote:", str(data["note"])) if data.get("note") else ""
        # its "message" is written for the model ("tell the customer…; do not retry"): people hear what happened
        return f"I didn't do it: {_why_not(data)}{note}"
    if data.get("status") == "failed":
        return f"That failed: {data.get('error', 'unknown error')}"
    if data.get("status") == "answered" and isinstance(data.get("values"), dict):
        filled = "\n".join(f"- {key.replace('_', ' ')}: {_plain_value(value)}"
                           for key, value in data["values"].items() if value not in (None, ""))
        return "Thanks, that's what I needed. I have:\n" + filled
    if data.get("status") == "answered":
        return f"Got it — **{data.get('answer')}**."
    if data.get("interrupted"):
        return "OK, I'll drop that question."
    if "refund_id" in data:
        return f"Refunded ${data['amount']:.2f} on `{data['charge_id']}` (refund `{data['refund_id']}`)."
    if "deployed" in data:
        return f"Deployed **{data['deployed']}** {data['version']} to {data['environment']}."
    if data.get("posted"):
        where = f"[{data['channel']}]({data['link']})" if data.get("link") else data["channel"]
        return f"Posted to {where}: “{data['text']}”"
    if data.get("posted") is False:
        return f"I couldn't post that: {data.get('error', 'the workspace refused it')}"
    if data.get("status") == "expired":
        return f"No answer came in time — {data.get('message', 'nobody answered')}"
    if "error" in data and "known" in data:  # lookup_customer found nobody by that name
        known = ", ".join(str(k).title() for k in data["known"])
        return f"I couldn't find that customer. I know {known}: try `look up {str(data['known'][0]).title()}`."
    if "customer" in data:
        charge = data.get("last_charge") or {}
        return (f"**{data['customer']}** is on the {data['plan']} plan with {data['seats']} seats; last charge "
                f"`{charge.get('id')}` for ${charge.get('amount', 0):.2f}.")
    return f"Result: `{json.dumps(data)}`"
