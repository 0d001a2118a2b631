"""The GPU time the cache saved: tokens the engine did not prefill x seconds it takes per token.

The seconds per token should be measured, at the length of the prompts the engine serves
(prefill cost per token grows with the prompt: attention is quadratic). Until kvceph has such
a measurement, the figure is the configured flat rate ``kvceph_prefill_tokens_per_s`` and every
output says so (``source``). ``prefill_seconds_per_token`` is the one place a length-dependent
figure plugs in.
"""

from __future__ import annotations

from dataclasses import dataclass

from deploys.settings import HostSettings

FLAT_SOURCE = (
    "configured flat rate kvceph_prefill_tokens_per_s = {rate:g} tokens/s (not measured at "
    "this length; a length-dependent measured figure replaces it when kvceph has one)"
)


@dataclass(frozen=True)
class PrefillFigure:
    seconds_per_token: float
    source: str  # where the figure comes from, said in every output
    measured: bool


def prefill_seconds_per_token(me: HostSettings, prompt_tokens: float | None) -> PrefillFigure:
    """Seconds of GPU prefill per prompt token for this host's engines at ``prompt_tokens``.

    + me: the host's settings
    + prompt_tokens: the mean prompt length the engine served (None: unknown)

    Today the configured flat rate, whatever the length.
    """
    rate = me.lmcache.prefill_tokens_per_s
    return PrefillFigure(1.0 / rate, FLAT_SOURCE.format(rate=rate), measured=False)


def saved_seconds(reused_tokens: float | None, figure: PrefillFigure) -> float | None:
    """GPU seconds not spent on prefill: reused tokens x seconds per token."""
    if reused_tokens is None:
        return None
    return reused_tokens * figure.seconds_per_token
