"""kvceph's S3 connector for LMCache: an S3 core (s3core) and LMCache's plugin (lmcache_plugin)."""

__version__ = "0.1.0"

#: The LMCache releases whose RemoteConnector / ConnectorAdapter API the plugin was built and
#: tested against (lmcache/v1/storage_backend/connector/base_connector.py of each). Any other
#: release is refused when the plugin loads: the API moves between minor releases.
SUPPORTED_LMCACHE = ("0.5.6",)
