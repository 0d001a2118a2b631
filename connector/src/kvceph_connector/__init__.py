"""kvceph's S3 connector for LMCache (placeholder: the names of the contract, no S3 yet).

Branch ``connector`` replaces this package with the real one (S3Core + the LMCache plugin);
until then the deploy can install it, and an engine that loads it gets no remote tier, as
LMCache does with a plugin whose connector cannot be created.
"""

__version__ = "0.0.1"
# The LMCache releases whose plugin interface this package implements.
SUPPORTED_LMCACHE = ("0.5.6",)
