#!/usr/bin/env python3
"""kvceph S3 admin helper, run on the Ceph admin host (uploaded by the "S3 tier" stage).

It performs the writes the stage decided on from facts; it decides nothing itself beyond
safety interlocks. Keys are read from a private INI file, never from the command line:

    [s3]
    endpoint = http://127.0.0.1:80
    region = default
    access_key = ...
    secret_key = ...

Subcommands:
    create-user UID --display-name NAME   create the RGW user with the file's keys
    add-key UID                           add the file's key pair to an existing user,
                                          keeping its other keys (S3 key rotation)
    create-bucket NAME                    create the bucket (owned by the file's keys)
    put-lifecycle NAME --rules-json JSON  replace the bucket's lifecycle with these rules
    create-owner UID --display-name NAME --config-out PATH
                                          create an RGW user with generated keys, written
                                          only to PATH (0600; endpoint/region from --config)
    get-read-policy NAME                  print the bucket's policy (JSON) or null
    put-read-policy NAME --reader UID     let RGW user UID read the bucket, nothing else
    put-policy NAME --policy-json JSON    replace the bucket's policy with this document
    list-namespaces NAME                  print the bucket's object namespaces (kv/<fields>/)
                                          and whether it holds objects at its root (JSON)
    trim NAME --prefix P --owner UID --share-bytes N [--state FILE] [--dry]
                                          delete a cache group's oldest objects once it
                                          nears its share; FILE keeps its fill rate

Every error is one line on stderr and exit status 1 (2 for usage errors). Needs python3 and,
for the bucket subcommands, python3-boto3 (Debian package); radosgw-admin for create-user.
"""

import argparse
import configparser
import json
import os
import subprocess
import sys
import tempfile
import time

CONNECT_TIMEOUT = 10
READ_TIMEOUT = 30
RADOSGW_TIMEOUT = 60


class Failure(Exception):
    """A one-line error for the operator."""


def load_config(path):
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path) as handle:
            parser.read_file(handle)
    except OSError as exc:
        raise Failure(f"cannot read {path}: {exc.strerror or exc}") from None
    except configparser.Error as exc:
        raise Failure(f"{path} is not a valid INI file: {str(exc).splitlines()[0]}") from None
    if not parser.has_section("s3"):
        raise Failure(f"{path} has no [s3] section") from None
    section = parser["s3"]
    missing = [k for k in ("endpoint", "access_key", "secret_key") if not section.get(k)]
    if missing:
        raise Failure("{} lacks {} in [s3]".format(path, ", ".join(missing)))
    return {
        "endpoint": section["endpoint"],
        "region": section.get("region") or "default",
        "access_key": section["access_key"],
        "secret_key": section["secret_key"],
    }


# The system trust store's bundle (Debian/Ubuntu, RHEL family): kvceph installs a private CA
# there (kvceph_s3_ca_bundle); botocore would otherwise trust only its own certifi bundle.
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


def trust_bundle(endpoint):
    """The CA file to verify an https endpoint against (None: botocore's default)."""
    if not endpoint.startswith("https://"):
        return None
    return next((path for path in SYSTEM_BUNDLES if os.path.isfile(path)), None)


def s3_client(config):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=config["endpoint"],
        verify=trust_bundle(config["endpoint"]),
        region_name=config["region"],
        aws_access_key_id=config["access_key"],
        aws_secret_access_key=config["secret_key"],
        config=Config(
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
            retries={"max_attempts": 2, "mode": "standard"},
            # Admin writes address RGW by its admin endpoint (often 127.0.0.1), where no
            # wildcard DNS exists: path-style is what works there.
            s3={"addressing_style": "path"},
        ),
    )


def s3_call(config, what, func, **kwargs):
    """Run one boto3 call; turn every failure into a one-line Failure naming the endpoint."""
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

    endpoint = config["endpoint"]
    try:
        return func(**kwargs)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), error.get("Message") or "no message"
        raise Failure(f"S3 tier: {what} on {endpoint} failed: {code}: {message}") from None
    except EndpointConnectionError as exc:
        raise Failure(f"S3 tier: cannot reach RGW at {endpoint}: {exc}") from None
    except BotoCoreError as exc:
        # Connect/read timeouts and the like: the endpoint is there but does not answer.
        raise Failure(f"S3 tier: cannot reach RGW at {endpoint}: {exc}") from None


def create_bucket(config, name):
    client = s3_client(config)
    try:
        s3_call(config, f"CreateBucket {name}", client.create_bucket, Bucket=name)
    except Failure as exc:
        # A concurrent run created it first: the goal is reached.
        if "BucketAlreadyOwnedByYou" not in str(exc):
            raise
    print(f"created bucket {name}")


def validate_rules(rules):
    if not isinstance(rules, list) or not rules:
        raise Failure("--rules-json must be a non-empty JSON list of lifecycle rules") from None
    seen = set()
    for rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("ID"), str) or not rule["ID"]:
            raise Failure("--rules-json: every rule must be an object with a non-empty ID")
        if rule["ID"] in seen:
            raise Failure("--rules-json: rule ID {} repeats".format(rule["ID"]))
        if rule.get("Status") not in ("Enabled", "Disabled"):
            raise Failure(
                "--rules-json: rule {}: Status must be Enabled or Disabled".format(rule["ID"])
            )
        seen.add(rule["ID"])
    return rules


def put_lifecycle(config, name, rules_json):
    try:
        rules = json.loads(rules_json)
    except ValueError as exc:
        raise Failure(f"--rules-json is not valid JSON: {exc}") from None
    rules = validate_rules(rules)
    client = s3_client(config)
    s3_call(
        config,
        f"PutBucketLifecycleConfiguration {name}",
        client.put_bucket_lifecycle_configuration,
        Bucket=name,
        LifecycleConfiguration={"Rules": rules},
    )
    print("lifecycle of {}: {}".format(name, ", ".join(r["ID"] for r in rules)))


def read_policy(bucket, reader):
    """The bucket policy of the model mirror: the reader may list and get, nothing else."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "kvceph-models-read",
                "Effect": "Allow",
                "Principal": {"AWS": [f"arn:aws:iam:::user/{reader}"]},
                "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            }
        ],
    }


def get_read_policy(config, name):
    from botocore.exceptions import ClientError

    client = s3_client(config)
    try:
        policy = client.get_bucket_policy(Bucket=name)["Policy"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchBucketPolicy", "NoSuchBucket"):
            print("null")
            return
        raise Failure(f"S3 tier: GetBucketPolicy {name}: {exc}") from None
    print(json.dumps(json.loads(policy), sort_keys=True))


def list_namespaces(config, name):
    """Two delimiter listings (1000 entries each, read-only): the folders under kv/ and
    whether any object sits at the bucket root (LMCache's stock names, pre-namespace ones)."""
    client = s3_client(config)
    root = s3_call(config, f"ListObjectsV2 {name}", client.list_objects_v2,
                   Bucket=name, Delimiter="/", MaxKeys=1000)  # fmt: skip
    under = s3_call(config, f"ListObjectsV2 {name} kv/", client.list_objects_v2,
                    Bucket=name, Prefix="kv/", Delimiter="/", MaxKeys=1000)  # fmt: skip
    found = {
        "namespaces": sorted(p["Prefix"] for p in under.get("CommonPrefixes", ())),
        "bucket_root": bool(root.get("Contents")),
        "truncated": bool(under.get("IsTruncated")),
    }
    print(json.dumps(found, sort_keys=True))


# A group's share is trimmed from HIGH_WATER down to LOW_WATER of it (docs/capacity.md): one
# trim frees a tenth of the share, so the timer deletes in batches, not one object per write.
HIGH_WATER = 0.9
LOW_WATER = 0.8
DELETE_BATCH = 1000  # DeleteObjects' limit per call


def trim_plan(objects, share, owner, high=HIGH_WATER, low=LOW_WATER):
    """(keys to delete, oldest first; bytes the group holds): nothing until the group's
    objects pass ``high`` x ``share``, then the oldest down to ``low`` x ``share``.

    objects: ListObjectsV2 entries under the group's prefix (Key, Size, LastModified,
    Owner.ID); share: the group's bytes; owner: the group's uid. An object another user
    wrote is neither counted nor deleted, whatever its name (kvceph deletes only what its
    group wrote)."""
    mine = [o for o in objects if (o.get("Owner") or {}).get("ID") == owner]
    used = sum(int(o["Size"]) for o in mine)
    if share <= 0 or used <= high * share:
        return [], used
    doomed, left = [], used
    for o in sorted(mine, key=lambda o: (o["LastModified"], o["Key"])):
        if left <= low * share:
            break
        doomed.append(o["Key"])
        left -= int(o["Size"])
    return doomed, used


def fill_rate(previous, used, now):
    """Bytes/s the group wrote since the last trim (its bytes then, after that trim's deletes,
    against now); None on the first run, or when objects expired in between (negative)."""
    if not previous or now <= previous.get("time", now):
        return None
    rate = (used - previous["left"]) / (now - previous["time"])
    return rate if rate >= 0 else None


def save_state(path, prefix, entry):
    """Replace the group's entry of the state file atomically (status.py reads it)."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {}
    state[prefix] = entry
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".trim-")
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, sort_keys=True)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def load_state(path, prefix):
    """The group's entry of the state file, or None."""
    try:
        with open(path) as f:
            return json.load(f).get(prefix)
    except (OSError, ValueError, AttributeError):
        return None


def trim(config, name, prefix, owner, share, dry, state=None, sync_uid=None):
    """List a cache group's objects (its prefix, written by its user), delete the oldest when
    it nears its share, print one JSON line: used, share, deleted, freed bytes, fill rate;
    with ``state`` also keep it there for status.py (never under --dry). With ``sync_uid``
    (the bucket's owner) its user stats are synced after a delete: RGW's user-scope quota
    otherwise sees the freed room only at its next stats flush (180 s)."""
    client = s3_client(config)
    objects, token = [], None
    while True:
        page = s3_call(config, f"ListObjectsV2 {name} {prefix}", client.list_objects_v2,
                       Bucket=name, Prefix=prefix, FetchOwner=True,
                       **({"ContinuationToken": token} if token else {}))  # fmt: skip
        objects += page.get("Contents", ())
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token:
            break
    doomed, used = trim_plan(objects, share, owner)
    sizes = {o["Key"]: int(o["Size"]) for o in objects}
    for i in range(0, 0 if dry else len(doomed), DELETE_BATCH):
        batch = [{"Key": k} for k in doomed[i : i + DELETE_BATCH]]
        s3_call(config, f"DeleteObjects {name} {prefix}", client.delete_objects,
                Bucket=name, Delete={"Objects": batch, "Quiet": True})  # fmt: skip
    if doomed and sync_uid and not dry:
        rc, _, err = radosgw_admin(["user", "stats", f"--uid={sync_uid}", "--sync-stats"])
        if rc != 0:
            raise Failure(f"radosgw-admin user stats --sync-stats: {first_line(err, rc)}")
    found = {
        "prefix": prefix,
        "used": used,
        "share": share,
        "deleted": 0 if dry else len(doomed),
        "would_delete": len(doomed) if dry else 0,
        "freed": sum(sizes[k] for k in doomed),
    }
    now = time.time()
    found["rate"] = fill_rate(load_state(state, prefix) if state else None, used, now)
    if state and not dry:
        left = used - found["freed"]
        save_state(state, prefix, {**found, "time": now, "left": left})
    print(json.dumps(found, sort_keys=True))


def put_read_policy(config, name, reader):
    client = s3_client(config)
    policy = json.dumps(read_policy(name, reader))
    s3_call(config, f"PutBucketPolicy {name}", client.put_bucket_policy, Bucket=name, Policy=policy)
    print(f"bucket {name}: read-only for RGW user {reader}")


def put_policy(config, name, policy_json):
    try:
        document = json.loads(policy_json)
    except ValueError as exc:
        raise Failure(f"--policy-json is not valid JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("Statement"), list):
        raise Failure("--policy-json must be a policy document with a Statement list")
    client = s3_client(config)
    policy = json.dumps(document, sort_keys=True)
    s3_call(config, f"PutBucketPolicy {name}", client.put_bucket_policy, Bucket=name, Policy=policy)
    sids = [str(s.get("Sid", "?")) for s in document["Statement"]]
    print("policy of {}: {}".format(name, ", ".join(sids)))


def create_owner(config, uid, display_name, config_out):
    # Generated keys: radosgw-admin prints them on stdout (captured here, never echoed) and
    # they are written only to config_out, so they never leave this host.
    rc, out, err = radosgw_admin(["user", "info", f"--uid={uid}"])
    if rc == 0:
        if os.path.isfile(config_out):
            print(f"RGW user {uid} exists")
            return
        raise Failure(
            f"RGW user {uid} exists but {config_out} is gone; fix: restore it, or have an RGW "
            f"admin delete user {uid} (kvceph deletes no user) so kvceph creates it again"
        )
    if "no user info saved" not in err:
        raise Failure(f"radosgw-admin user info --uid={uid}: {first_line(err, rc)}") from None
    rc, out, err = radosgw_admin(
        ["user", "create", f"--uid={uid}", f"--display-name={display_name}"]
    )
    if rc:
        raise Failure(f"radosgw-admin user create --uid={uid}: {first_line(err, rc)}") from None
    key = json.loads(out)["keys"][0]
    fd = os.open(config_out + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(
            f"# kvceph: keys of RGW user {uid} (generated on this host; 0600)\n[s3]\n"
            f"endpoint = {config['endpoint']}\nregion = {config['region']}\n"
            f"access_key = {key['access_key']}\nsecret_key = {key['secret_key']}\n"
        )
    os.rename(config_out + ".tmp", config_out)
    print(f"created RGW user {uid} (keys in {config_out})")


def radosgw_admin(args, stdin=None):
    command = ["radosgw-admin"] + args
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
        )
    except OSError as exc:
        raise Failure("cannot run radosgw-admin: %s" % (exc.strerror or exc)) from None
    try:
        out, err = proc.communicate(stdin, timeout=RADOSGW_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise Failure(f"radosgw-admin {args[0]} timed out after {RADOSGW_TIMEOUT}s") from None
    return proc.returncode, out, err


def user_document(uid, display_name, access_key, secret_key):
    """The user record as ``radosgw-admin metadata get user:<uid>`` prints it (Pacific)."""
    quota = {
        "enabled": False,
        "check_on_raw": False,
        "max_size": -1,
        "max_size_kb": 0,
        "max_objects": -1,
    }
    return {
        "key": f"user:{uid}",
        "data": {
            "user_id": uid,
            "display_name": display_name,
            "email": "",
            "suspended": 0,
            "max_buckets": 1000,
            "subusers": [],
            "keys": [{"user": uid, "access_key": access_key, "secret_key": secret_key}],
            "swift_keys": [],
            "caps": [],
            "op_mask": "read, write, delete",
            "default_placement": "",
            "default_storage_class": "",
            "placement_tags": [],
            "bucket_quota": dict(quota),
            "user_quota": dict(quota),
            "temp_url_keys": [],
            "type": "rgw",
            "mfa_ids": [],
            "attrs": [],
        },
    }


def create_user(config, uid, display_name):
    # `radosgw-admin user create` only takes keys as arguments (visible in /proc/*/cmdline);
    # `metadata put` reads the same record from stdin, so the secret never reaches an argv.
    # It overwrites unconditionally, hence the two interlocks first.
    rc, _, err = radosgw_admin(["user", "info", f"--uid={uid}"])
    if rc == 0:
        raise Failure(f"RGW user {uid} already exists; refusing to overwrite it") from None
    if "no user info saved" not in err:
        raise Failure(f"radosgw-admin user info --uid={uid}: {first_line(err, rc)}") from None
    # The access key is an identifier (it travels in every request's Authorization header).
    rc, out, err = radosgw_admin(["user", "info", "--access-key={}".format(config["access_key"])])
    if rc == 0:
        owner = json.loads(out).get("user_id", "?")
        raise Failure(
            f"the access key is already owned by RGW user {owner}; refusing to create {uid} with it"
        )
    document = json.dumps(
        user_document(uid, display_name, config["access_key"], config["secret_key"])
    )
    rc, _, err = radosgw_admin(["metadata", "put", f"user:{uid}"], stdin=document)
    if rc:
        raise Failure(f"radosgw-admin metadata put user:{uid}: {first_line(err, rc)}") from None
    print(f"created RGW user {uid}")


def add_key(config, uid):
    # `radosgw-admin key create` takes the secret only as --secret-key (visible in
    # /proc/*/cmdline); the user's own record, read and written back on stdin with the key
    # appended, adds it with no secret on any command line. RGW indexes the new access key
    # and drops none: the record keeps every key the user had.
    access_key, secret_key = config["access_key"], config["secret_key"]
    rc, out, err = radosgw_admin(["metadata", "get", f"user:{uid}"])
    if rc:
        if "No such file or directory" in err:
            raise Failure(f"RGW user {uid} does not exist; fix: run deploy.py (it creates it)")
        raise Failure(f"radosgw-admin metadata get user:{uid}: {first_line(err, rc)}") from None
    try:
        record = json.loads(out)
        keys = record["data"]["keys"]
    except (ValueError, KeyError, TypeError):
        raise Failure(f"radosgw-admin metadata get user:{uid}: unexpected output") from None
    for key in keys:
        if key.get("access_key") != access_key:
            continue
        if key.get("secret_key") != secret_key:
            raise Failure(
                f"RGW user {uid} holds the access key with a different secret key; "
                "refusing to replace it (engines using it would get 403)"
            )
        print(f"RGW user {uid} already holds the access key")
        return
    # The access key is an identifier (it travels in every request's Authorization header).
    rc, out, err = radosgw_admin(["user", "info", f"--access-key={access_key}"])
    if rc == 0:
        owner = json.loads(out).get("user_id", "?")
        raise Failure(f"the access key is already owned by RGW user {owner}; refusing to add it")
    keys.append({"user": uid, "access_key": access_key, "secret_key": secret_key})
    rc, _, err = radosgw_admin(["metadata", "put", f"user:{uid}"], stdin=json.dumps(record))
    if rc:
        raise Failure(f"radosgw-admin metadata put user:{uid}: {first_line(err, rc)}") from None
    print(f"added the access key to RGW user {uid} ({len(keys)} keys)")


def first_line(text, rc):
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit status {rc}"


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="s3admin.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="private INI file with [s3] keys")
    sub = parser.add_subparsers(dest="command")
    sub.required = True
    user = sub.add_parser("create-user", help="create the RGW user with the file's keys")
    user.add_argument("uid")
    user.add_argument("--display-name", required=True)
    add = sub.add_parser("add-key", help="add the file's key pair to an existing user")
    add.add_argument("uid")
    bucket = sub.add_parser("create-bucket", help="create a bucket")
    bucket.add_argument("bucket")
    lifecycle = sub.add_parser("put-lifecycle", help="replace a bucket's lifecycle rules")
    lifecycle.add_argument("bucket")
    lifecycle.add_argument("--rules-json", required=True, help="JSON list of S3 rules")
    owner = sub.add_parser("create-owner", help="create an RGW user with generated keys")
    owner.add_argument("uid")
    owner.add_argument("--display-name", required=True)
    owner.add_argument("--config-out", required=True)
    get_policy = sub.add_parser("get-read-policy", help="print a bucket's policy")
    get_policy.add_argument("bucket")
    put_policy = sub.add_parser("put-read-policy", help="let one RGW user read a bucket")
    put_policy.add_argument("bucket")
    put_policy.add_argument("--reader", required=True)
    namespaces = sub.add_parser("list-namespaces", help="print a bucket's object namespaces")
    namespaces.add_argument("bucket")
    cut = sub.add_parser("trim", help="delete a cache group's oldest objects near its share")
    cut.add_argument("bucket")
    cut.add_argument("--prefix", required=True, help="the group's object-name prefix")
    cut.add_argument("--owner", required=True, help="the group's RGW uid (objects it wrote)")
    cut.add_argument("--share-bytes", required=True, type=int)
    cut.add_argument("--state", help="JSON file keeping each group's last trim (fill rate)")
    cut.add_argument("--sync-uid", help="the bucket owner: sync its quota stats after deletes")
    cut.add_argument("--dry", action="store_true", help="print what would go, delete nothing")
    policy = sub.add_parser("put-policy", help="replace a bucket's policy")
    policy.add_argument("bucket")
    policy.add_argument("--policy-json", required=True)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        config = load_config(args.config)
        if args.command == "create-user":
            create_user(config, args.uid, args.display_name)
        elif args.command == "add-key":
            add_key(config, args.uid)
        elif args.command == "create-bucket":
            create_bucket(config, args.bucket)
        elif args.command == "create-owner":
            create_owner(config, args.uid, args.display_name, args.config_out)
        elif args.command == "get-read-policy":
            get_read_policy(config, args.bucket)
        elif args.command == "list-namespaces":
            list_namespaces(config, args.bucket)
        elif args.command == "trim":
            trim(config, args.bucket, args.prefix, args.owner, args.share_bytes, args.dry,
                 args.state, args.sync_uid)  # fmt: skip
        elif args.command == "put-policy":
            put_policy(config, args.bucket, args.policy_json)
        elif args.command == "put-read-policy":
            put_read_policy(config, args.bucket, args.reader)
        else:
            put_lifecycle(config, args.bucket, args.rules_json)
    except Failure as exc:
        message = str(exc)
        if not message.startswith("S3 tier:"):
            message = "S3 tier: " + message
        sys.stderr.write(message + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
