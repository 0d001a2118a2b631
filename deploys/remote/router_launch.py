"""Start one route of vllm-router (kvceph-router@PORT.service; docs/router.md).

usage: router_launch.py CONFIG.json

Why not the ``vllm-router`` command: its options take the API key on the command line
(``--api-key``: argv is readable by every user of the host) and have no option for the key
check at the router (``api_key_validation_urls``). This launcher builds the same Rust router
from the package's own ``RouterArgs``: the key comes from systemd's credential directory
(``LoadCredential=api-key``), never from argv, the environment or the config file.
"""

import dataclasses
import json
import os
import sys

from vllm_router.router import policy_from_str
from vllm_router.router_args import RouterArgs
from vllm_router_rs import Router


def main(path: str) -> None:
    with open(path) as f:
        config = json.load(f)
    validation = config.pop("api_key_validation_urls", None)
    fields = {f.name for f in dataclasses.fields(RouterArgs)}
    unknown = sorted(set(config) - fields)
    if unknown:
        sys.exit(f"{path}: unknown router settings {unknown} (vllm-router version mismatch?)")
    args = RouterArgs(**config)
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    if credentials and os.path.exists(f"{credentials}/api-key"):
        with open(f"{credentials}/api-key") as f:
            args.api_key = f.read().strip() or None
    kwargs = vars(args)
    kwargs.pop("mini_lb", None)
    kwargs["policy"] = policy_from_str(kwargs["policy"])
    kwargs["prefill_policy"] = policy_from_str(kwargs["prefill_policy"])
    kwargs["decode_policy"] = policy_from_str(kwargs["decode_policy"])
    kwargs["prefill_urls"] = kwargs["decode_urls"] = None
    if validation and args.api_key:
        # Every route, the admin ones (/add_worker, /remove_worker, /workers) included, then
        # needs a key one of these URLs (the engines' /v1/models) accepts.
        kwargs["api_key_validation_urls"] = validation
    Router(**kwargs).start()


if __name__ == "__main__":
    main(sys.argv[1])
