# Two commands do all the set-up on a fresh machine (see README.md):
#   make compare   the main job: every strategy on the embedded digits, one table
#   make test      the test suite
# and `make docs` builds the documentation site into site/.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
# checkov, the manifest scanner the Kubernetes tests run, pins packaging<24,
# which pytest, build and ray cannot use: it lives in a virtualenv of its own,
# as pipx or its container image would run it in CI. Pinned: a new release
# brings new checks, which launch/kubernetes/checkov.yaml must answer first.
CHECKOV := $(VENV)/checkov
CHECKOV_VERSION := 3.3.30

# The oldest supported TensorFlow (tfdist._stack.SUPPORTED), with its own tf_keras, in a
# virtualenv of its own; `make test` runs the newest. tensorflow-metadata: the newest needs
# a newer protobuf than TF 2.17 allows (docs/get-started/install.md).
OLDEST := .venv-oldest
OLDEST_STACK := tensorflow==2.17.1 tf-keras==2.17.0 tensorboard==2.17.1 tensorflow-metadata==1.17.3
# What installing tfdist beside it must leave as it is.
STACK_PACKAGES := ^(tensorflow|tensorflow-cpu|tf-keras|tf_keras|keras|tensorboard|protobuf|numpy)==

.PHONY: compare test test-fast test-versions install slurm browser docs

install: $(VENV)/.installed $(CHECKOV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[tensorflow,test]"
	touch $@

$(CHECKOV)/.installed: Makefile | $(VENV)/.installed
	$(PYTHON) -m venv $(CHECKOV)
	$(CHECKOV)/bin/python -m pip install --quiet --upgrade pip
	$(CHECKOV)/bin/python -m pip install --quiet "checkov==$(CHECKOV_VERSION)"
	touch $@

# Beside the five strategies: multi_worker_mirrored with local SGD and DiLoCo every 16
# steps, and with TensorFlow's own thread pools instead of the launcher's share.
compare: install
	$(BIN)/tfdist compare --sync_every=16 --thread_share

# The SLURM tests run a real slurmctld/slurmd on localhost (Debian's packages).
# Without root or apt-get they are skipped, with the reason in pytest's summary.
slurm:
	@if command -v slurmctld >/dev/null && command -v munged >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; \
	else echo "note: slurm-wlm and munge not installed (needs root and apt-get); SLURM tests will be skipped"; fi

# The docs test opens the built site in headless Chromium (Debian's package): every image
# loads, no directive is left raw. Without root or apt-get that test is skipped, with the reason.
browser:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || { \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "note: installing chromium failed; the browser test will be skipped"; \
	else echo "note: chromium not installed (needs root and apt-get); the browser test will be skipped"; fi

# Three phases: most tests share both cores, three processes at a time (whole files per
# process, so a module's cluster is started once; two left a quarter of the cores idle
# while tests waited on their children, docs/suite-time.md), then the tests marked `alone` (speeds
# measured side by side, hundreds of ports held) run with nothing else beside them,
# then the tests marked `versions` on the oldest supported TensorFlow (test-versions).
# Each phase prints its wall time, and pytest the 20 slowest tests (setup.cfg):
# a regression shows the day it lands. The third phase's TensorFlow is installed while
# the first runs (that waits mostly on the disk and the network; tfdist itself is
# installed beside it later, so no build runs in the source tree beside the tests).
test: install slurm browser
	@($(MAKE) --no-print-directory $(OLDEST)/.stack > $(OLDEST).log 2>&1; \
	  echo $$? > $(OLDEST).code) & \
	start=$$(date +%s); $(BIN)/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder -m "not alone"; \
	  code=$$?; echo "phase 1 (not alone, 3 processes): $$(( $$(date +%s) - start )) s of wall time"; \
	  wait; if [ "$$(cat $(OLDEST).code)" != 0 ]; then cat $(OLDEST).log; \
	  echo "installing TensorFlow 2.17 for the third phase failed (above)"; exit 1; fi; \
	  exit $$code
	@start=$$(date +%s); $(BIN)/python -m pytest -m alone; \
	  code=$$?; echo "phase 2 (alone): $$(( $$(date +%s) - start )) s of wall time"; exit $$code
	@start=$$(date +%s); $(MAKE) --no-print-directory test-versions; \
	  code=$$?; echo "phase 3 (TensorFlow 2.17, the oldest supported): $$(( $$(date +%s) - start )) s of wall time"; exit $$code

# The version-sensitive tests (marked `versions`) on the oldest supported TensorFlow. Its
# stack is installed first, as a user's image has it; installing tfdist beside it must
# change none of it.
test-versions: $(OLDEST)/.installed
	$(OLDEST)/bin/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder -q -m "versions and not alone and not slurm"

# The stack, then what tfdist[test] requires beside it (read from setup.cfg, with the build
# backend): all of it while the first phase runs. tfdist itself comes later, without
# dependencies or a build environment (2 s): a build writes build/ and tfdist.egg-info in
# the source tree, where tests/test_wheel.py builds the wheel during the first phase.
$(OLDEST)/.stack: Makefile setup.cfg pyproject.toml
	rm -rf $(OLDEST)
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet $(OLDEST_STACK)
	$(OLDEST)/bin/python -m pip freeze | grep -E '$(STACK_PACKAGES)' > $(OLDEST)/stack-before.txt
	$(OLDEST)/bin/python -m pip install --quiet "setuptools>=61" wheel $$($(PYTHON) -c \
	  'import configparser; c = configparser.ConfigParser(); c.read("setup.cfg"); \
	  print(c["options"]["install_requires"], c["options.extras_require"]["test"])')
	touch $@

$(OLDEST)/.installed: $(OLDEST)/.stack
	$(OLDEST)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(OLDEST)/bin/python -m pip freeze | grep -E '$(STACK_PACKAGES)' > $(OLDEST)/stack-after.txt
	@diff $(OLDEST)/stack-before.txt $(OLDEST)/stack-after.txt || { \
	  echo "installing tfdist beside TensorFlow 2.17 changed its stack (above)"; exit 1; }
	touch $@

# Before every commit: each module's unit tests, no clusters, notebooks or SLURM.
test-fast: install
	$(BIN)/python -m pytest -n 2 -q -m "not slow and not alone and not slurm"

docs: install
	$(BIN)/mkdocs build --strict --site-dir site
