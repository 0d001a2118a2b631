"""The KV cache tier: KV sizes, the crossover, measured figures, the remote tier's log lines,
kvceph's connector wheel.
"""
