# kvceph — every entry point an operator or CI uses.
SHELL := /bin/bash
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
# KVCEPH_LAB_INSTANCE=N (default 0): the Nth lab beside the others (lab/README.md); N>0 -> its own dir.
export KVCEPH_LAB_DIR ?= /var/lib/kvceph-lab$(filter-out 0,$(KVCEPH_LAB_INSTANCE))
export PYINFRA_PROGRESS := off
# LMCache's own config loader, for the unit tests of the rendered lmcache.yaml (no torch: 123 MB).
LMCACHE_VENV := $(VENV)/lmcache
export KVCEPH_LMCACHE_PYTHON ?= $(CURDIR)/$(LMCACHE_VENV)/bin/python
# The lab's S3 keys: generated once per lab, mode 0600, never committed.
export KVCEPH_SECRETS_FILE ?= $(KVCEPH_LAB_DIR)/secrets.env
WHEELHOUSE := $(KVCEPH_LAB_DIR)/wheelhouse
# kvceph's LMCache connector (connector/) and its tests against real LMCache 0.5.6 classes on the
# CPU: CPU torch 2.13.0 (the file on this machine's disk; a plain `torch` would pull a CUDA build),
# lmcache --no-deps and the pinned import-time deps (connector/tests/requirements-cpu.txt).
CONNECTOR_VENV := $(VENV)/connector
# The unit test of the rendered MP server command line parses it with LMCache's own parser there.
export KVCEPH_CONNECTOR_PYTHON ?= $(CURDIR)/$(CONNECTOR_VENV)/bin/python
# uv, pinned, in a venv of its own: `make locks` compiles the shipped engine locks with it.
UV_VENV := $(VENV)/uv
UV_VERSION := 0.13.9

# System packages: the lab (nspawn hosts, mmdebstrap), Ceph for fact fixtures and spec
# validation (python3-ceph-common), systemd-analyze for unit checks.
APT_LAB  := mmdebstrap systemd-container iproute2 openssh-client curl uuid-runtime
APT_CEPH := ceph-mon ceph-mgr ceph-osd radosgw ceph-common ceph-mgr-modules-core python3-ceph-common
# promtool for the monitoring unit tests, prometheus for the lab's (19 MB download, ~96 MB
# installed without recommends); its packaged service is disabled again: the tests run their own.
APT_MON  := prometheus
APT_PKGS := $(APT_LAB) $(APT_CEPH) $(APT_MON)
# A long quiet step as a line when it starts and one with its seconds when it ends.
STEP := lab/step.sh

.PHONY: help deps venv lmcache-venv connector-venv connector-unit lint unit integration test lab lab-up \
        lab-down lab-purge deploy verify probe status bench dry clean rotate-add rotate-retire images wheelhouse \
        locks \
        _integration _test _labs-free test-down _lab _lab-up _lab-secrets _bench

# A lab instance belongs to one run at a time (lab/claim.py): the top-level command holds the
# instance's claim while it runs, what it starts (sub-makes, pytest, lab.sh) passes; a second
# run on a busy instance stops at once in one line. Nested calls just run the target.
# A busy instance stops the target in that one line as make's own $(error) (expanded when the
# recipe runs), not as a failed command: make would add `Error 75`; make exits 2, having done
# nothing (lab/claim.py and lab/lab.sh exit 75). A run that wins a race past the check still
# stops in claim.py, with make's line after it.
BUSY = $(eval _busy := $(shell $(PY) lab/claim.py busy))$(if $(_busy),$(error $(_busy)))
CLAIM = $(BUSY)$(PY) lab/claim.py run "make $@" -- $(MAKE) --no-print-directory

help:
	@echo "make lab       bring up the local lab, deploy, verify (README quick start)"
	@echo "make lab-down  stop the lab, remove its hosts (keeps images, wheelhouse, keys, secrets)"
	@echo "make lab-purge lab-down, then remove the rest of the instance's state dir too"
	@echo "make test      lint + unit tests + integration tests on three labs at once (what CI runs)"
	@echo "make test-down the three labs of make test down (N, CEPHADM_LAB_INSTANCE, PACIFIC2_LAB_INSTANCE)"
	@echo "make unit      offline unit tests only"
	@echo "make dry       plan the lab deploy with pyinfra --dry"
	@echo "make locks     recompile the shipped engine locks (locks/*.txt) from the built-in profiles"

deps: $(VENV)/.deps-apt
$(VENV)/.deps-apt: Makefile
	@mkdir -p $(VENV)
	@missing() { for p in "$$@"; do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done; }; \
	lab=$$(missing $(APT_LAB) | xargs); ceph=$$(missing $(APT_CEPH) | xargs); \
	mon=$$(missing $(APT_MON) | xargs); \
	apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -qq); \
	if [ -n "$$lab$$ceph$$mon" ]; then \
	  $(STEP) deps "apt: package lists" "$${apt[@]}" update && \
	  { [ -z "$$lab" ] || $(STEP) deps "apt: lab tools ($$lab)" \
	      "$${apt[@]}" install -y --no-install-recommends $$lab >/dev/null; } && \
	  { [ -z "$$ceph" ] || $(STEP) deps "apt: Ceph client and fixtures ($$ceph)" \
	      "$${apt[@]}" install -y --no-install-recommends $$ceph >/dev/null; } && \
	  { [ -z "$$mon" ] || { $(STEP) deps "apt: Prometheus ($$mon)" \
	      "$${apt[@]}" install -y --no-install-recommends $$mon >/dev/null && \
	    { systemctl disable --now prometheus >/dev/null 2>&1 || true; }; }; }; \
	fi
	@touch $@

venv: $(BIN)/.installed
$(BIN)/.installed: pyproject.toml connector/pyproject.toml
	@$(STEP) venv "python venv $(VENV)" $(PY) -m venv $(VENV)
	@$(STEP) venv "pip: pip itself" $(BIN)/pip install -q --upgrade pip
	@$(STEP) venv "pip: kvceph (pyinfra, boto3, paramiko, jinja2) + dev (pytest, ruff) + report (matplotlib)" \
	  $(BIN)/pip install -q -e '.[dev,report]'
	@$(STEP) venv "pip: lab engine (lab/engine)" $(BIN)/pip install -q -e lab/engine
	@$(STEP) venv "pip: kvceph connector (connector/)" $(BIN)/pip install -q --no-deps -e connector
	@touch $@

lmcache-venv: $(LMCACHE_VENV)/.installed
$(LMCACHE_VENV)/.installed:
	@$(STEP) venv "lmcache venv $(LMCACHE_VENV): lmcache 0.5.6, no torch (config loader for unit tests)" \
	  sh -c '$(PY) -m venv $(LMCACHE_VENV) && \
	  $(LMCACHE_VENV)/bin/pip install -q --no-deps lmcache==0.5.6 pyyaml requests urllib3 idna certifi'
	@touch $@

connector-venv: $(CONNECTOR_VENV)/.installed
$(CONNECTOR_VENV)/.installed: connector/pyproject.toml connector/tests/requirements-cpu.txt
	@$(STEP) venv "python venv $(CONNECTOR_VENV)" $(PY) -m venv $(CONNECTOR_VENV)
	@$(STEP) venv "pip: torch 2.13.0 (CPU) + lmcache 0.5.6 + the connector's test deps" \
	  $(CONNECTOR_VENV)/bin/pip install -q --no-deps torch==2.13.0 lmcache==0.5.6 \
	  -r connector/tests/requirements-cpu.txt
	@$(STEP) venv "pip: kvceph connector (connector/)" $(CONNECTOR_VENV)/bin/pip install -q --no-deps -e connector
	@touch $@

$(UV_VENV)/.installed: Makefile
	@$(STEP) venv "uv $(UV_VERSION) venv $(UV_VENV)" \
	  sh -c '$(PY) -m venv $(UV_VENV) && $(UV_VENV)/bin/pip install -q uv==$(UV_VERSION)'
	@touch $@

# The engine locks kvceph ships (locks/*.txt), compiled from the built-in profiles
# (deploys/settings/engine.py DEFAULT_PROFILES): run after changing one; the shipped lock's unit
# test fails until then. Reaches the package index; not part of `make test`.
locks: venv $(UV_VENV)/.installed
	@$(STEP) locks "uv: the built-in profiles' locks" $(BIN)/python -m locks.compile --uv $(UV_VENV)/bin/uv

# The connector's own tests (loopback S3 + real LMCache classes); part of `make unit`.
connector-unit: connector-venv
	cd connector && ../$(CONNECTOR_VENV)/bin/pytest -q -p no:cacheprovider tests

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The unit tests (`make test` runs them as a session of their own beside the labs').
UNIT_TESTS := tests/unit lab/engine/tests/test_limits.py lab/engine/tests/test_kvceph_store.py \
              lab/engine/tests/test_core.py lab/engine/tests/test_dram_tier.py \
              lab/engine/tests/test_answer.py lab/engine/tests/test_mp.py
unit: venv deps lmcache-venv connector-unit
	$(BIN)/pytest -q $(UNIT_TESTS)

integration:
	@$(CLAIM) _integration
_integration: venv deps
	$(BIN)/pytest -q -x tests/integration

# The slowest steps (setup, call, teardown) of each session, then every module's and every
# wider fixture's seconds (tests/timings.py), so CI's output says where its minutes go.
DURATIONS := --durations=80 --durations-min=5 -p timings
# Integration tests by lab (lab/README.md "Which lab"): the deploy chain, verification, node
# replacement, the RGW stage, the quota and the bucket policies (status.py with them) run on the
# cephadm lab (Ceph 20.2.4; a fresh machine builds its images first, ~8 min); the rest keeps the
# faster Pacific lab, split over two sessions on two Pacific labs by their measured minutes
# (bench/README.md "CI runs": ~22 min each). PACIFIC2_TESTS is the named half; a new module
# goes to PACIFIC_TESTS. test_ceph_local and test_s3_local share one local cluster on fixed
# ports (tests/integration/conftest.py local_ceph): they stay in one session.
CEPHADM_TESTS := $(addprefix tests/integration/,test_01_lab_deploy.py test_02_verify.py \
                 test_03_node_replacement.py test_11_cephadm_rgw.py test_15_rgw_ha.py \
                 test_18_capacity.py test_20_privilege.py)
PACIFIC2_TESTS := $(addprefix tests/integration/,test_05_key_rotation.py \
                  test_06_lmcache_limits.py test_07_tls.py test_10_engines.py test_14_drain.py \
                  test_19_router.py test_21_mp.py)
PACIFIC_TESTS := $(filter-out $(CEPHADM_TESTS) $(PACIFIC2_TESTS),$(sort $(wildcard tests/integration/test_*.py)))
# `make test` runs four pytest sessions side by side: the unit tests (no lab), the Pacific one
# on KVCEPH_LAB_INSTANCE (N, default 0), the cephadm one on the next instance (99: 98) and the
# second Pacific one on the one after (N+2; 98: 96, 99: 97). All three labs are claimed for the
# run (lab/claim.py); `make test-down` brings all three down.
_N := $(or $(KVCEPH_LAB_INSTANCE),0)
CEPHADM_LAB_INSTANCE ?= $(shell n=$(_N); echo $$((n < 99 ? n + 1 : n - 1)))
PACIFIC2_LAB_INSTANCE ?= $(shell n=$(_N); echo $$((n < 98 ? n + 2 : n - 2)))
CEPHADM_LAB_DIR ?= /var/lib/kvceph-lab$(filter-out 0,$(CEPHADM_LAB_INSTANCE))
PACIFIC2_LAB_DIR ?= /var/lib/kvceph-lab$(filter-out 0,$(PACIFIC2_LAB_INSTANCE))
# lab_env INSTANCE,DIR,CEPH: the variables that point a command at another lab instance.
lab_env = KVCEPH_LAB_INSTANCE=$(1) KVCEPH_LAB_DIR=$(2) KVCEPH_SECRETS_FILE=$(2)/secrets.env \
          KVCEPH_LAB_CEPH=$(3)
CEPHADM_ENV = $(call lab_env,$(CEPHADM_LAB_INSTANCE),$(CEPHADM_LAB_DIR),cephadm)
PACIFIC2_ENV = $(call lab_env,$(PACIFIC2_LAB_INSTANCE),$(PACIFIC2_LAB_DIR),pacific)
# Each session's whole output, printed when it ends (lab/sessions.sh); kept in its lab's dir.
# No pytest cache: four sessions at once would write the same .pytest_cache.
SESSION_ARGS := -q -p no:cacheprovider $(DURATIONS)
UNIT_LOG := $(KVCEPH_LAB_DIR)/test-unit.log
PACIFIC_LOG := $(KVCEPH_LAB_DIR)/test-pacific.log
CEPHADM_LOG := $(CEPHADM_LAB_DIR)/test-cephadm.log
PACIFIC2_LOG := $(PACIFIC2_LAB_DIR)/test-pacific2.log

test:
	@$(LABS_FREE)$(CLAIM) _test
# Installs at once what the lab sessions wait on (apt, the venv, the Pacific lab's images and
# wheelhouse; the images need apt's mmdebstrap), then the four sessions side by side: on 2
# cores the labs' sessions mostly wait (boots, bootstrap, orchestrator polls, restarts) while
# another computes. What only the unit tests need (the LMCache and connector venvs, the
# connector's own tests: ~2-4 min on a fresh clone) is built inside the unit session, off the
# labs' path. The cephadm lab builds its own images inside its session (~3.5 min on a fresh
# machine), off the longer sessions' path. The other labs' base image (and the second Pacific
# lab's ceph layer) and wheelhouse are hard links to the Pacific lab's just-built ones (a
# rebuild replaces those files, never edits them).
_test: _labs-free
	@KVCEPH_LAB_CEPH=pacific $(MAKE) --no-print-directory -j4 lint deps venv images wheelhouse
	@$(call link_lab,$(CEPHADM_LAB_DIR),base) && $(call link_lab,$(PACIFIC2_LAB_DIR),base ceph)
	@lab/sessions.sh \
	  unit $(UNIT_LOG) "MAKEFLAGS= KVCEPH_LAB_CEPH=pacific $(MAKE) --no-print-directory \
	    lmcache-venv connector-unit && exec $(BIN)/pytest $(SESSION_ARGS) $(UNIT_TESTS)" \
	  pacific $(PACIFIC_LOG) "MAKEFLAGS= KVCEPH_LAB_CEPH=pacific exec $(BIN)/pytest $(SESSION_ARGS) \
	    $(PACIFIC_TESTS)" \
	  cephadm $(CEPHADM_LOG) "MAKEFLAGS= $(CEPHADM_ENV) exec $(PY) lab/claim.py run 'make test (cephadm session)' \
	    -- $(BIN)/pytest $(SESSION_ARGS) $(CEPHADM_TESTS)" \
	  $(if $(strip $(PACIFIC2_TESTS)),pacific2 $(PACIFIC2_LOG) "MAKEFLAGS= $(PACIFIC2_ENV) exec $(PY) \
	    lab/claim.py run 'make test (pacific2 session)' -- $(BIN)/pytest $(SESSION_ARGS) $(PACIFIC2_TESTS)")

# link_lab DIR,LAYERS: the Pacific lab's image LAYERS and wheelhouse into another instance's DIR
# as hard links, where its copies are older (read-only overlay lower layers: a rebuild replaces
# the files, never edits them).
link_lab = src=$(KVCEPH_LAB_DIR) dst=$(1); mkdir -p $$dst/image && \
  for layer in $(2); do cmp -s $$src/image/$$layer.stamp $$dst/image/$$layer.stamp || { \
    rm -rf $$dst/image/$$layer $$dst/image/$$layer.stamp && cp -al $$src/image/$$layer $$dst/image/ && \
    cp -a $$src/image/$$layer.stamp $$dst/image/; } || exit 1; done && \
  if [ $$src/wheelhouse/.built -nt $$dst/wheelhouse/.built ]; then \
    rm -rf $$dst/wheelhouse && cp -al $$src/wheelhouse $$dst/; fi

# The other sessions' instances must be free before the install starts, not 5 min into it.
# lab_free INSTANCE,DIR,SESSION,VARIABLE: make's own error naming the run that holds it.
_LAB_BUSY = [lab] ERROR: lab instance $(1) ($(2)), where `make test` runs its $(3) session, is in \
  use by $(4); pick another with $(5)=M, or end that run and `KVCEPH_LAB_INSTANCE=$(1) make lab-down`
lab_free = $(eval _claim := $(shell KVCEPH_LAB_INSTANCE=$(1) KVCEPH_LAB_DIR=$(2) $(PY) lab/claim.py \
  show))$(if $(findstring : live,$(_claim)),$(error $(call _LAB_BUSY,$(1),$(2),$(3),$(_claim),$(4))))
LABS_FREE = $(call lab_free,$(CEPHADM_LAB_INSTANCE),$(CEPHADM_LAB_DIR),cephadm,CEPHADM_LAB_INSTANCE)$(call \
  lab_free,$(PACIFIC2_LAB_INSTANCE),$(PACIFIC2_LAB_DIR),pacific2,PACIFIC2_LAB_INSTANCE)
_labs-free:
	@$(LABS_FREE)true

# Every lab of `make test` down (what .ci/run does on exit); `make lab-down` is one instance's.
test-down:
	lab/lab.sh down; rc=$$?; $(CEPHADM_ENV) lab/lab.sh down || rc=$$?; \
	  $(PACIFIC2_ENV) lab/lab.sh down || rc=$$?; exit $$rc

# The cephadm lab unless KVCEPH_LAB_CEPH=pacific is set.
lab:
	@$(CLAIM) _lab
# The images (the longest step) build while pip fills the venv and the wheelhouse: apt first,
# since the image build needs mmdebstrap.
_lab: deps
	@KVCEPH_LAB_CEPH=$${KVCEPH_LAB_CEPH:-cephadm} $(MAKE) --no-print-directory -j3 venv images wheelhouse
	KVCEPH_LAB_CEPH=$${KVCEPH_LAB_CEPH:-cephadm} $(MAKE) -s lab-up deploy verify
	@n=$(filter-out 0,$(KVCEPH_LAB_INSTANCE)); echo "lab is up: reports in reports/$${n:+lab$$n/}," \
	  "stop it with: $${n:+KVCEPH_LAB_INSTANCE=$$n }make lab-down"

# The lab's root filesystems (and the cephadm lab's container images), built once, cached.
images: deps
	lab/lab.sh build

wheelhouse: $(WHEELHOUSE)/.built

lab-up:
	@$(CLAIM) _lab-up
_lab-up: venv deps _lab-secrets $(WHEELHOUSE)/.built
	@lab/model.sh $(KVCEPH_LAB_DIR)/model >/dev/null
	lab/lab.sh up

# Secrets added since a lab's secrets.env was first written: each generated once, kept.
_lab-secrets: $(KVCEPH_SECRETS_FILE)
	@# Labs made before the API key existed get one (the lab runs with a key by default).
	@grep -q '^KVCEPH_VLLM_API_KEY=' $(KVCEPH_SECRETS_FILE) || { umask 077; \
	  echo "KVCEPH_VLLM_API_KEY=lab-$$(head -c 24 /dev/urandom | base64 | tr -d '/+=\n')" \
	  >> $(KVCEPH_SECRETS_FILE); echo "lab API key added to $(KVCEPH_SECRETS_FILE)"; }
	@# The model mirror's read-only key (group_data/lab.py serves the lab model from the mirror).
	@grep -q '^KVCEPH_MODELS_ACCESS_KEY=' $(KVCEPH_SECRETS_FILE) || { umask 077; \
	  echo "KVCEPH_MODELS_ACCESS_KEY=LABM$$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)"; \
	  echo "KVCEPH_MODELS_SECRET_KEY=$$(head -c 30 /dev/urandom | base64 | tr -d '/+=\n')"; } \
	  >> $(KVCEPH_SECRETS_FILE)
	@# Least privilege (issue 36): the bucket owner's key, one key pair per cache group
	@# (inventories/lab.py: gpu, gaudi) and the lab's own hash seed, each generated once.
	@for v in ADMIN GPU GAUDI; do \
	  case $$v in ADMIN) a=KVCEPH_S3_ADMIN_ACCESS_KEY s=KVCEPH_S3_ADMIN_SECRET_KEY;; \
	    *) a=KVCEPH_S3_ACCESS_KEY_$$v s=KVCEPH_S3_SECRET_KEY_$$v;; esac; \
	  grep -q "^$$a=" $(KVCEPH_SECRETS_FILE) || { umask 077; \
	    echo "$$a=LAB$$v$$(head -c 10 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)"; \
	    echo "$$s=$$(head -c 30 /dev/urandom | base64 | tr -d '/+=\n')"; } >> $(KVCEPH_SECRETS_FILE); \
	done
	@grep -q '^KVCEPH_PYTHON_HASH_SEED=' $(KVCEPH_SECRETS_FILE) || { umask 077; \
	  echo "KVCEPH_PYTHON_HASH_SEED=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')" >> $(KVCEPH_SECRETS_FILE); }

# The lab engine and its dependencies as wheels: lab hosts have no route to any index.
$(WHEELHOUSE)/.built: $(shell find lab/engine -name '*.py' -o -name pyproject.toml | grep -v /tests/) lab/engine/build-wheelhouse.sh
	@rm -rf $(WHEELHOUSE) && $(STEP) wheelhouse "pip: lab engine + lmcache wheels for the offline hosts" \
	  lab/engine/build-wheelhouse.sh $(WHEELHOUSE) >/dev/null
	@touch $@

$(KVCEPH_SECRETS_FILE):
	@mkdir -p $(dir $@)
	@umask 077; { echo "KVCEPH_S3_ADMIN_ACCESS_KEY=LABADMIN$$(head -c 10 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)"; \
	  echo "KVCEPH_S3_ADMIN_SECRET_KEY=$$(head -c 30 /dev/urandom | base64 | tr -d '/+=\n')"; \
	  echo "KVCEPH_VLLM_API_KEY=lab-$$(head -c 24 /dev/urandom | base64 | tr -d '/+=\n')"; } > $@
	@echo "lab S3 keys and engine API key written to $@ (0600)"

# lab-down keeps what is slow to make again (images, wheelhouse) and the lab's identity (SSH
# keys, TLS CA, secrets); lab-purge removes the instance's whole state dir.
lab-down:
	lab/lab.sh down

lab-purge:
	lab/lab.sh purge

# A target that needs the lab stops in one line when none of its hosts runs (deploys/lab.py)
# instead of one paramiko traceback per host. Expanded when the recipe runs (in `make lab`, after
# lab-up); $(error), not a failing command, so make adds no `Error N` line of its own.
NEED_LAB = $(eval _down := $(shell $(PY) -m deploys.lab $(KVCEPH_LAB_DIR) "$(KVCEPH_LAB_INSTANCE)"))$(if \
  $(_down),$(error $(_down)))

# deploy and verify: a line when they start, one with their seconds when they end (lab/step.sh).
deploy: venv
	@$(NEED_LAB)$(STEP) deploy "pyinfra deploy.py on the lab" $(BIN)/pyinfra -y inventories/lab.py deploy.py

dry: venv
	$(NEED_LAB)$(BIN)/pyinfra --dry inventories/lab.py deploy.py

verify: venv
	@$(NEED_LAB)$(STEP) verify "pyinfra verify.py on the lab" $(BIN)/pyinfra -y inventories/lab.py verify.py

probe: venv
	$(NEED_LAB)$(BIN)/pyinfra -y inventories/lab.py probe.py

# Read-only fleet status (docs/status.md): table, reports/status-<run>.json and .png.
status: venv
	$(NEED_LAB)$(BIN)/pyinfra -y inventories/lab.py status.py

# Provisioning benchmark (bench/README.md): never part of `make test`. BENCH_HOSTS="2 4 8 16".
BENCH_HOSTS ?= 2 4 8 16
bench:
	@$(CLAIM) _bench
_bench: venv deps _lab-secrets $(WHEELHOUSE)/.built $(VENV)/ansible/.installed
	$(BIN)/python bench/run.py --hosts $(BENCH_HOSTS) --repeat 3

$(VENV)/ansible/.installed:
	$(PY) -m venv $(VENV)/ansible
	$(VENV)/ansible/bin/pip install -q 'ansible-core>=2.18,<2.20'
	@touch $@

# S3 key rotation (docs/security.md): with the NEW keys configured, rotate-add, then deploy,
# then rotate-retire OLD=<old access key>.
rotate-add: venv
	$(NEED_LAB)$(BIN)/pyinfra -y inventories/lab.py rotate.py --data kvceph_rotation=add

rotate-retire: venv
	@test -n "$(OLD)" || { echo "usage: make rotate-retire OLD=<old access key>" >&2; exit 2; }
	$(NEED_LAB)$(BIN)/pyinfra -y inventories/lab.py rotate.py --data kvceph_rotation=retire \
	  --data kvceph_retire_access_key=$(OLD)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache reports
