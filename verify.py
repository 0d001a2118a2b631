"""kvceph verification: the seed's cold -> warm -> cold proof, across the inference hosts.

    pyinfra -y inventories/<lab>.py verify.py        (make verify)

Never part of deploy.py: it restarts engines and writes/deletes bucket objects. One
``python.call`` on the first inference host runs the whole cycle from the controller, at
execution time, when every host is connected:

  1. preflight  every inference host: /health, /v1/models lists the model, a max_tokens=8
                request returns choices; the controller reaches the bucket (head_bucket)
  1b. router    each route of the router hosts (group ``router``): ready, its workers the
                inventory's engines, all healthy; a short document sent through it cold and
                again: the engine that served it cold serves the repeat from a cache tier
                (deploys/verification/routed.py). ``kvceph_verify_router_only``: this step alone
  2. cold       a document unique to this run (nonce first) to host A, streamed: TTFT, and
                the objects it created (expected: prompt_tokens // chunk_size x TP), found by
                name: A's /tokenize ids hashed as LMCache does (deploys/verification/
                object_names.py; needs kvceph_lmcache_hash_algorithm sha256_cbor or sha256),
                never a listing of the model's prefix: it runs beside live traffic
  2b. dram      with kvceph_lmcache_local_cpu: A again, no restart, with the run's cache_salt
                (vLLM's GPU prefix cache misses, LMCache's keys ignore it): every chunk from
                the node's DRAM, no S3 read, TTFT <= cold x kvceph_verify_dram_ratio
                (deploys/verification/dram.py says why not /reset_prefix_cache)
  3. warm       restart A's unit, resend: tokens loaded from the bucket (vllm metrics delta),
                TTFT vs cold, load bandwidth vs break-even
  4. cross-node the same document to host B of the same cache group: it must load A's chunks
  5. fallback   delete exactly the run's objects (by name), restart A, resend: a cold-like TTFT
  6. report     table on stdout; JSON and PNG in kvceph_verify_report_dir (default reports/)

Every request asks a greedy answer (temperature 0, a fixed seed, at least 16 tokens, EOS ignored)
and its token ids; each step after cold (dram, warm, cross-node, fallback, the router's repeat)
must give the cold answer token for token, or it fails naming the tier, the host and the first
differing position (deploys/verification/answer.py): a wrong KV load is a fast, full hit too.

A failed check fails the pyinfra run (non-zero exit) with one line per check and its likely
cause. Settings: ``kvceph_verify_*`` (deploys/settings/verification.py VerifySettings).
"""

from pyinfra import inventory, state

from deploys import preflight
from deploys.operations.run import on_the_controller
from deploys.verification.controller import run_cycle

checked = preflight.run(state, inventory)
on_the_controller(checked, "kvceph: verify cold -> warm -> cold (all cache groups)", run_cycle)
