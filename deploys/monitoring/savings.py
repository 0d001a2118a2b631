"""The GPU time the cache saved: tokens the engine did not prefill x seconds it takes per token.

Prefill cost per token grows with the prompt (attention), so the seconds per token are read at
the length the engine serves (its mean prompt), off the prefill curve the crossover uses
(deploys/tier/crossover.py: ``prefill(n) = a n + b n^2`` fitted to ``kvceph_prefill_tokens_per_s``,
one rate or ``{tokens: rate}``, plus verify.py's measured cold TTFT of the cache group when
``kvceph_measured_dir`` holds it). Every output names the figure's source and whether this
fleet measured it (``measured``): a single configured rate is a straight line, the same at
every length, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from deploys.monitoring import figures
from deploys.settings import HostSettings
from deploys.tier import crossover, measured


@dataclass(frozen=True)
class PrefillFigure:
    seconds_per_token: float
    source: str  # where the figure comes from, said in every output
    measured: bool  # verify.py measured this cache group's cold prefill on this fleet
    at_tokens: float  # the length it was read at (the engine's mean prompt)


def _points_text(points) -> str:
    return ", ".join(f"{n}: {r:g}" for n, r in points)


def prefill_curve(me: HostSettings, read=measured.read) -> tuple[crossover.Prefill, str, bool]:
    """The cache group's prefill curve, where its figures come from, and whether verify.py
    measured it on this fleet (status.py and the monitoring rules read the same curve).

    + me: the host's settings (its tier's prefill points and measured directory)
    + read: ``measured.read`` (tests give recorded figures)
    """
    tier, e = me.lmcache.tier, me.engine
    if tier is None:  # settings built without a tier (by hand): the flat configured rate
        rate = me.lmcache.prefill_tokens_per_s
        return crossover.Prefill(1 / rate, 0.0), f"flat {rate:g} tokens/s, not measured", False
    points = tuple(tier.prefill_points)
    what = (
        f"kvceph_prefill_tokens_per_s {{{_points_text(points)}}}"
        if tier.prefill_source != "default"
        else f"kvceph's default prefill figures {{{_points_text(points)}}} (not this fleet's)"
    )
    path = measured.path_for(tier.measured_dir, e.serve_model, e.tensor_parallel_size)
    try:
        figures_read = read(path)
    except ValueError:
        figures_read = None  # an unusable file: the deploy's preflight names it
    if figures_read:
        tokens, cold = figures_read["prompt_tokens"], figures_read["cold_ttft_s"]
        points = (*points, (int(tokens), tokens / cold))
        what += f" and verify.py's cold prefill of this cache group ({tokens} tokens, {path})"
    curve = crossover.fit_rates(points)
    shape = "a straight line: the same at every length" if curve.b == 0 else "a n + b n^2"
    source = f"prefill curve ({shape}) from {what}"
    if not figures_read:
        source += "; not measured on this fleet (verify.py measures it)"
    return curve, source, bool(figures_read)


def prefill_seconds_per_token(
    me: HostSettings, prompt_tokens: float | None, read=measured.read
) -> PrefillFigure:
    """Seconds of GPU prefill per prompt token for this host's engines at ``prompt_tokens``.

    + me: the host's settings (its tier's prefill points and measured directory)
    + prompt_tokens: the mean prompt length the engine served (None: read at 16k)
    + read: ``measured.read`` (tests give recorded figures)
    """
    at = prompt_tokens if prompt_tokens and prompt_tokens > 0 else crossover.FLAT_AT_TOKENS
    curve, source, was_measured = prefill_curve(me, read)
    return PrefillFigure(curve.seconds(at) / at, source, was_measured, at)


def saved_seconds(reused_tokens: float | None, figure: PrefillFigure) -> float | None:
    """GPU seconds not spent on prefill (figures.saved_seconds)."""
    return figures.saved_seconds(reused_tokens, figure.seconds_per_token)
