"""kvceph lab engine: an accelerator-free stand-in for vLLM + LMCache (it is NOT vLLM)."""

__version__ = "0.1.0"
BANNER = "kvceph lab engine — not vLLM"
