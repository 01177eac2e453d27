"""Which kind of OpenAI-compatible server an endpoint is, as far as its URL (and, for `check`, its model list)
tells: what `python -m bot check` names, and where a provider needs something of its own (DeepSeek's
thinking mode wants each tool-call step's ``reasoning_content`` sent back)."""

from __future__ import annotations

from urllib.parse import urlsplit

# hosts of the hosted providers, by the end of the host name
_HOSTS: tuple[tuple[str, str], ...] = (
    ("api.openai.com", "OpenAI"),
    (".openai.azure.com", "Azure OpenAI"),
    (".cognitiveservices.azure.com", "Azure OpenAI"),
    (".services.ai.azure.com", "Azure AI Foundry"),
    ("api.deepseek.com", "DeepSeek"),
    ("openrouter.ai", "OpenRouter"),
    ("generativelanguage.googleapis.com", "Gemini (OpenAI-compatible)"),
    ("api.anthropic.com", "Anthropic (OpenAI-compatible)"),
    ("api.groq.com", "Groq"),
    ("api.together.xyz", "Together"),
    ("api.x.ai", "xAI"),
    ("api.mistral.ai", "Mistral"),
)

# what a self-hosted server writes as ``owned_by`` in GET /models
_OWNERS = {"vllm": "vLLM", "llamacpp": "llama.cpp", "library": "Ollama", "organization_owner": "LM Studio"}

# default ports of the self-hosted servers, a guess when nothing else tells
_PORTS = {11434: "Ollama", 1234: "LM Studio", 4000: "LiteLLM proxy"}

DEEPSEEK = "DeepSeek"
GEMINI = "Gemini (OpenAI-compatible)"
UNKNOWN = "OpenAI-compatible"


def provider_kind(base_url: str, owned_by: str | None = None) -> str:
    """The provider kind an endpoint looks like: by host, then by the model list's ``owned_by``, then by the
    default port of a self-hosted server; else ``"OpenAI-compatible"``."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    for end, kind in _HOSTS:
        if host == end.lstrip(".") or host.endswith(end if end.startswith(".") else "." + end):
            return kind
    if owned_by and owned_by in _OWNERS:
        return _OWNERS[owned_by]
    try:
        port = parts.port
    except ValueError:
        port = None
    if port in _PORTS:
        return f"{_PORTS[port]} (by its default port)"
    return UNKNOWN
