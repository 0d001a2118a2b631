"""The verification document: unique to one run, built from common words.

The nonce is the very first word, so the first chunk's hash (and, chained, every later one)
is new: no chunk of this document can be in the bucket before the run. The lab engine counts
one token per whitespace-separated word; a real tokenizer differs, so the runner reads the
prompt size from the response's ``usage``, never from here.
"""

from __future__ import annotations

import secrets
import time

# Common English words: one token each for the usual BPE vocabularies (with the leading space).
_WORDS = (
    "the of and to in is was for on that with as by at from his her they this are had not "
    "but be have one all were we when your can said there use an each which she do how their "
    "if will up other about out many then them these so some would make like him into time "
    "has look two more write go see number no way could people my than first water been call "
    "who oil its now find long down day did get come made may part over new sound take only "
    "little work know place year live me back give most very after thing our just name good "
    "sentence man think say great where help through much before line right too mean old any "
    "same tell boy follow came want show also around form three small set put end does another "
    "well large must big even such because turn here why ask went men read need land different "
    "home us move try kind hand picture again change off play spell air away animal house point"
).split()

QUESTION = "Summarize the text above in one sentence."


def new_nonce(clock=time.time) -> str:
    """Run id: UTC timestamp plus randomness (readable in the report, never repeated)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock())) + "-" + secrets.token_hex(6)


def build(nonce: str, tokens: int) -> str:
    """``tokens`` whitespace-separated words, the nonce first.

    + nonce: the run id; must contain no whitespace
    + tokens: document length in (lab-engine) tokens, >= 2
    """
    if not nonce or any(c.isspace() for c in nonce):
        raise ValueError(f"nonce {nonce!r} must be one non-empty word")
    if tokens < 2:
        raise ValueError(f"document of {tokens} tokens is too short")
    n = len(_WORDS)
    # A stride co-prime to the vocabulary size avoids a short repeating period.
    words = [_WORDS[(i * 7 + i // n) % n] for i in range(tokens - 1)]
    return f"kvceph-verify-{nonce} " + " ".join(words)


def prompt(nonce: str, tokens: int) -> str:
    """The user message: the document, then the question (after it, so the prefix is shared)."""
    return build(nonce, tokens) + "\n\n" + QUESTION
