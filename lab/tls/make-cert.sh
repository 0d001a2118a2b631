#!/bin/bash
# kvceph lab TLS: a private CA and a server certificate signed by it (openssl only).
#
# usage: make-cert.sh DIR NAME SAN...
#   DIR/ca.pem, DIR/ca.key        the lab CA (made once, kept; 0600 key)
#   DIR/NAME.crt, DIR/NAME.key    the server certificate (SANs as given) and its key
#   DIR/NAME.pem                  certificate + key in one file (haproxy's `crt`)
# SAN items as openssl takes them: DNS:s3.kvlab DNS:*.s3.kvlab IP:10.213.7.11
# The certificate is remade when its SAN list changes; a kept one is not touched (idempotent).
# One script for every consumer: the lab's haproxy today, cephadm's ingress spec
# (ssl_cert = the content of NAME.pem) tomorrow.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
DIR=$1 NAME=$2; shift 2
SANS=$(IFS=,; echo "$*")
DAYS=${KVCEPH_LAB_CERT_DAYS:-825}
umask 077
mkdir -p "$DIR"
if [ ! -s "$DIR/ca.pem" ] || [ ! -s "$DIR/ca.key" ]; then
  openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days 3650 \
    -subj "/CN=kvceph lab CA" -keyout "$DIR/ca.key" -out "$DIR/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
  chmod 644 "$DIR/ca.pem"
fi
if [ -s "$DIR/$NAME.pem" ] && [ "$(cat "$DIR/$NAME.sans" 2>/dev/null)" = "$SANS" ] &&
   openssl verify -CAfile "$DIR/ca.pem" "$DIR/$NAME.crt" >/dev/null 2>&1; then
  exit 0
fi
openssl req -new -newkey rsa:2048 -nodes -sha256 -subj "/CN=${1#DNS:}" \
  -keyout "$DIR/$NAME.key" -out "$DIR/$NAME.csr" 2>/dev/null
openssl x509 -req -in "$DIR/$NAME.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" -CAcreateserial \
  -days "$DAYS" -sha256 -out "$DIR/$NAME.crt" \
  -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' "$SANS") \
  2>/dev/null
cat "$DIR/$NAME.crt" "$DIR/$NAME.key" >"$DIR/$NAME.pem"
echo "$SANS" >"$DIR/$NAME.sans"
rm -f "$DIR/$NAME.csr"
chmod 644 "$DIR/$NAME.crt"
