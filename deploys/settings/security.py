"""Settings of the serving path's security: where engines listen, who reaches /metrics and
/health, the private CA that signs RGW's certificate.

One module of the settings package (one per subject); ``settings.load`` calls
``load`` here and puts the result in ``HostSettings.security``.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from dataclasses import dataclass
from pathlib import Path

from deploys.settings import secret_names
from deploys.settings.secrets import MECHANISM, Secret


@dataclass(frozen=True)
class SecuritySettings:
    vllm_bind: str  # address the engine listens on; 127.0.0.1 behind an operator's own proxy
    # kvceph's gate (deploys/remote/engine_guard.py): with an API key, every route needs it
    guard: bool = True
    # networks that reach /health and /metrics without the key (the rest needs it)
    open_networks: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
    # the private CA that signs RGW's certificate: path on the controller, and its PEM text
    s3_ca_bundle: str | None = None
    s3_ca_pem: str | None = None


def refuse_secrets_in_data(r) -> None:
    """Secrets never live in group_data or the inventory (both are committed)."""
    for key in secret_names.GROUP_DATA_SECRETS:
        if r.peek(key, None) is not None:
            raise r.fail(
                key,
                "***",
                "secrets must not live in group_data or the inventory (they are committed)",
                MECHANISM,
            )


def refuse_secret_env(r, key: str, names) -> None:
    """``kvceph_extra_env`` (and a profile's env) carry no secret-looking variable."""
    for name in names:
        if secret_names.looks_secret(name):
            raise r.fail(
                key,
                name,
                "looks like a secret (KEY/TOKEN/SECRET/PASSWORD/CREDENTIALS in its name) and "
                "would be written in clear from a committed file",
                f"remove it; {MECHANISM}",
            )


def refuse_secret_args(r, key: str, args) -> None:
    """A profile's ``extra_args`` carry no secret: argv is readable by every user of the host
    (``/proc/<pid>/cmdline``) and shown by ``systemctl show``, the plan and the journal.

    + key: the setting that holds ``args`` (``kvceph_engine_profile.extra_args``)

    Refused: ``--api-key`` / ``--hf-token`` (``--flag value`` or ``--flag=value``) and any flag
    whose last word is a secret word (secret_names.secret_flag); the value is never shown.
    """
    for arg in args:
        flag = secret_names.secret_flag(arg)
        if flag:
            raise r.fail(
                key,
                flag,
                "passes a secret on the command line (readable in /proc/<pid>/cmdline, shown "
                "by systemctl show, the plan and the journal)",
                f"remove it; {MECHANISM}",
            )


def default_bind(data) -> str:
    """``kvceph_vllm_bind``'s default: the host's inventory address (``ssh_hostname``) when it
    is an IP address, the one the router and verify.py reach the engine at anyway; else
    ``0.0.0.0`` (a name would need resolving on the host).

    + data: the host's pyinfra data
    """
    address = (getattr(data, "get", None) or (lambda *_: None))("ssh_hostname", None)
    try:
        return ipaddress.ip_address(str(address)).compressed
    except ValueError:
        return "0.0.0.0"


def load(r) -> SecuritySettings:
    """The host's security settings (bind, gate, open networks, S3 CA bundle).

    + r: the host's settings reader
    """
    bind = r.ip(
        "kvceph_vllm_bind",
        r.str("kvceph_vllm_bind", default_bind(r.data)),
        "0.0.0.0, :: (dual-stack), 127.0.0.1, ::1 or one of the host's addresses",
    )
    networks = r.cidrs("kvceph_vllm_open_networks", list(DEFAULTS.open_networks))
    bundle = r.opt_str("kvceph_s3_ca_bundle")
    return SecuritySettings(
        vllm_bind=bind,
        guard=r.bool("kvceph_vllm_guard", True),
        open_networks=networks,
        s3_ca_bundle=bundle,
        s3_ca_pem=None if bundle is None else read_ca_bundle(r, bundle),
    )


_PEM_CERT = re.compile(
    r"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----"
)


def _read_pem_file(r, key: str, path: str) -> str:
    """The text of a PEM file on the controller; a one-line error naming ``key`` otherwise."""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise r.fail(
            key, path, f"cannot be read ({exc})", "give a PEM file on the controller"
        ) from None


def read_ca_bundle(r, path: str) -> str:
    """The CA certificates of ``kvceph_s3_ca_bundle`` (PEM, on the controller), normalised."""
    key = "kvceph_s3_ca_bundle"
    text = _read_pem_file(r, key, path)
    if "PRIVATE KEY" in text:
        raise r.fail(
            key, path, "holds a private key", "give the CA's certificate only, never its key"
        )
    certs = _PEM_CERT.findall(text)
    if not certs:
        raise r.fail(key, path, "has no PEM certificate", "give the CA certificate(s) in PEM")
    bundle = "".join(cert.replace("\r", "") + "\n" for cert in certs)
    try:
        # OpenSSL parses it as the clients will: garbage base64 or DER inside a well-formed
        # BEGIN/END block is refused here, not at the first TLS handshake.
        ssl.create_default_context(cafile=None, cadata=bundle)
    except (ValueError, ssl.SSLError):
        raise r.fail(key, path, "holds a broken PEM certificate", "re-export it") from None
    return bundle


DEFAULTS = SecuritySettings(vllm_bind="0.0.0.0")


_PEM_KEY = re.compile(
    r"-----BEGIN ((?:RSA |EC )?PRIVATE KEY)-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END \1-----"
)


def read_tls_pem(r, key: str, path: str) -> tuple[str, Secret]:
    """A server's certificate chain and private key from one PEM file on the controller.

    haproxy's ``crt`` layout (chain, then key), as lab/tls/make-cert.sh writes it. The key comes
    back as a :class:`Secret`; errors name the file, never its content.
    """
    text = _read_pem_file(r, key, path)
    certs = _PEM_CERT.findall(text)
    keys = [m.group(0) for m in _PEM_KEY.finditer(text)]
    if not certs or len(keys) != 1:
        raise r.fail(
            key,
            path,
            f"holds {len(certs)} certificate(s) and {len(keys)} private key(s)",
            "give the certificate chain and its one private key in one PEM file (mode 0600)",
        )
    chain = "".join(cert.replace("\r", "") + "\n" for cert in certs)
    return chain, Secret(keys[0].replace("\r", "") + "\n")
