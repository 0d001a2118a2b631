"""The lab tokenizer and chat template (documented contract; verification builds on it).

- one token per whitespace-separated word: str.split() (any run of whitespace separates);
- token id = zlib.crc32(word as UTF-8) % 151936 (Qwen3's vocabulary size), stable across
  processes, hosts and Python versions;
- chat template: the `content` of every message, in order, joined by "\n" (roles, names and
  special tokens are NOT tokens); a list content takes its {"type": "text"} parts' text.
  So a chat with one user message tokenizes exactly like a completion of that message.
"""

from __future__ import annotations

import zlib

VOCAB_SIZE = 151936


def token_id(word: str) -> int:
    return zlib.crc32(word.encode("utf-8")) % VOCAB_SIZE


def tokenize(text: str) -> list[int]:
    return [token_id(w) for w in text.split()]


def _content_text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    raise ValueError("message content must be a string or a list of content parts")


def apply_chat_template(messages: list) -> str:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    parts = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object")
        parts.append(_content_text(m.get("content")))
    return "\n".join(parts)
