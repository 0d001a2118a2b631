"""The LMCache plugin (placeholder): the adapter class named in lmcache.yaml, not implemented."""


class KvcephConnectorAdapter:
    """LMCache 0.5.6 loads this by ``remote_storage_plugin.kvceph.class_name``."""

    def create_connector(self, context):
        """The real adapter returns a RemoteConnector; the placeholder has none."""
        raise NotImplementedError("kvceph_connector placeholder: no S3 connector in this build")
