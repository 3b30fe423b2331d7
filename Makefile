# Two commands do all the set-up on a fresh machine (see README.md):
#   make compare   the main job: every strategy on the embedded digits, one table
#   make test      the test suite
# and `make docs` builds the documentation site into site/.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
# The machine's busy CPU so far (user, nice, system, irq, softirq), in clock ticks, and the
# seconds of it since a shell variable took BUSY's value: $(call CPU_SINCE,variable).
BUSY := awk '/^cpu /{print $$2 + $$3 + $$4 + $$7 + $$8}' /proc/stat
CPU_SINCE = $$(( ($$($(BUSY)) - $$$(1)) / $$(getconf CLK_TCK) ))

# checkov, the manifest scanner the Kubernetes tests run, pins packaging<24,
# which pytest, build and ray cannot use: it lives in a virtualenv of its own,
# as pipx or its container image would run it in CI. Pinned: a new release
# brings new checks, which launch/kubernetes/checkov.yaml must answer first.
CHECKOV := $(VENV)/checkov
CHECKOV_VERSION := 3.3.30

# The oldest and the newest supported TensorFlow (tfdist._stack.SUPPORTED), each with its own
# tf_keras and the oldest and newest Keras 3, in a virtualenv of its own; `make test` runs
# the default (the newest releases).
# tensorflow-metadata: the newest needs a newer protobuf than TF 2.17 allows
# (docs/get-started/install.md). 2.22 is a release candidate: it brings the Keras nightly it
# requires, and no tf-keras is released for it yet, so its tf_keras is the 2.22 nightly,
# installed without the tf-nightly it names (docs/get-started/install.md).
OLDEST := .venv-oldest
OLDEST_STACK := tensorflow==2.17.1 tf-keras==2.17.0 keras==3.12.4 tensorboard==2.17.1 tensorflow-metadata==1.17.3
NEWEST := .venv-newest
NEWEST_STACK := tensorflow==2.22.0rc0 keras-nightly==3.16.0.dev2026102704 tensorboard==2.21.0
NEWEST_NO_DEPS := tf-keras-nightly==2.22.0.dev2026101709
# `tensorflow-cpu`, as CPU images carry it: tf-keras requires the distribution named
# `tensorflow`, so it comes without its dependencies, as docs/get-started/install.md says.
CPU := .venv-cpu
CPU_STACK := tensorflow-cpu==2.21.0 keras==3.15.1 tensorboard==2.21.0
CPU_NO_DEPS := tf-keras==2.21.0
# The three, each with tfdist installed beside it.
STACKS := $(OLDEST)/.installed $(NEWEST)/.installed $(CPU)/.installed
# What installing tfdist beside them must leave as it is.
STACK_PACKAGES := ^(tensorflow|tensorflow[-_]cpu|tf[-_]keras|tf[-_]keras[-_]nightly|keras|keras[-_]nightly|tensorboard|protobuf|numpy)==

.PHONY: compare test test-fast test-versions test-oldest test-newest test-cpu install slurm browser \
  system-packages docs

install: $(VENV)/.installed $(CHECKOV)/.installed

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: setup.cfg pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[tensorflow,test]"
	touch $@

$(CHECKOV)/.installed: Makefile | $(BIN)/python
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
# loads, no directive is left raw. Without root or apt-get that test is skipped, with the
# reason; under CI (CI set) it fails instead.
browser:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || { \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "note: installing chromium failed; the browser test will be skipped (fail under CI)"; \
	else echo "note: chromium not installed (needs root and apt-get); the browser test will be skipped (fail under CI)"; fi

# Three phases, after a set-up. The first runs most tests, three processes at a time (whole
# files per process, so a module's cluster is started once; two left a quarter of the cores
# idle while tests waited on their children, docs/suite-time.md). Beside it, one process at
# a time, the tests marked `versions` run on the oldest and the newest supported TensorFlow
# and on tensorflow-cpu (test-versions, in the stacks the set-up installed). Then the tests
# marked `alone` (speeds measured side by side, hundreds of ports held) run with nothing
# else beside them.
# The suite is CPU-bound on 2 cores, so the work beside phase 1 slows it: the version
# checks' three stacks are installed in the set-up, side by side with its other parts, and
# phase 3 runs only their tests beside phase 1 (docs/suite-time-cpu.md). A stack that failed
# to install is tried again by test-versions, whose failure then fails `make test`.
# tfdist is compiled once before the tests: where PYTHONDONTWRITEBYTECODE is set (as on these
# machines), each of the suite's processes would compile the modules it imports again, about
# 0.24 s of CPU in a process that imports the training modules (docs/suite-time-runs.md).
# Each phase prints its wall time and the machine's CPU in it (BUSY), and pytest the 20
# slowest tests (setup.cfg) and the 20 tests and files that used the most CPU
# (tests/conftest.py): a regression shows the day it lands. The machine's CPU holds what the
# tests' own count cannot: the tasks Ray's and SLURM's daemons start
# (docs/suite-time-cpu.md). Phase 3 runs in a process group of its own, which an interrupt
# of `make test` (Ctrl-C) ends too: a shell's background job ignores Ctrl-C, and ran on
# for minutes.
test:
	@rm -f .venv-versions.log .venv-versions.code .venv-versions.pid; start=$$(date +%s); \
	 trap 'versions=$$(cat .venv-versions.pid 2>/dev/null); [ -n "$$versions" ] && kill -TERM -$$versions 2>/dev/null; exit 130' INT TERM HUP; \
	 (setsid $(MAKE) -k -j3 --no-print-directory $(STACKS) > .venv-versions.log 2>&1 & \
	  echo $$! > .venv-versions.pid; wait $$!) & stacks=$$!; \
	 $(MAKE) --no-print-directory -j3 install system-packages || { \
	   echo "set-up failed (above)"; kill -TERM -$$(cat .venv-versions.pid) 2>/dev/null; exit 1; }; \
	 wait $$stacks; \
	 echo "set-up (the test virtualenv, checkov, SLURM, Chromium and the version checks' three stacks, side by side): $$(( $$(date +%s) - start )) s of wall time"; \
	 $(BIN)/python -m compileall -q -j 2 tfdist > /dev/null; \
	 phase1=$$(date +%s); busy1=$$($(BUSY)); \
	 (setsid $(MAKE) -k --no-print-directory test-versions VERSIONS_WORKERS=1 >> .venv-versions.log 2>&1 & \
	  echo $$! > .venv-versions.pid; wait $$!; echo $$? > .venv-versions.code; \
	  echo "phase 3 (the version-sensitive tests on TensorFlow 2.17.1, 2.22.0rc0 and tensorflow-cpu 2.21, beside phase 1): $$(( $$(date +%s) - phase1 )) s of wall time" \
	  >> .venv-versions.log) & \
	 $(BIN)/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder -m "not alone"; \
	  code=$$?; echo "phase 1 (not alone, 3 processes): $$(( $$(date +%s) - phase1 )) s of wall time, $(call CPU_SINCE,busy1) s of the machine's CPU (phase 3's beside it included)"; \
	  wait; echo "--- the version checks' installs (in the set-up) and phase 3, beside phase 1 (.venv-versions.log):"; \
	  cat .venv-versions.log; [ "$$(cat .venv-versions.code)" = 0 ] && exit $$code; \
	  echo "phase 3 failed (above)"; exit 1
	@start=$$(date +%s); busy=$$($(BUSY)); $(BIN)/python -m pytest -m alone; \
	  code=$$?; echo "phase 2 (alone): $$(( $$(date +%s) - start )) s of wall time, $(call CPU_SINCE,busy) s of the machine's CPU"; exit $$code

# The system packages the suite uses, one after the other: apt-get takes a lock.
system-packages:
	@$(MAKE) --no-print-directory slurm
	@$(MAKE) --no-print-directory browser

# The version-sensitive tests (marked `versions`) on the oldest and the newest supported
# TensorFlow, and `tfdist doctor` with its tests on tensorflow-cpu. Each stack is installed
# first, as a user's image has it; installing tfdist beside it must change none of it.
# Their temporary folders are their own: pytest prunes the numbered ones of other runs.
VERSIONS_WORKERS ?= 3
# One stack at a time is installed, and each is tested as soon as it is, beside the next
# one's install: no stack's tests wait for all three installs (docs/suite-time-cpu.md). A
# stack that fails to install or to pass fails this target after the others have run.
# The tests run in the foreground, where Ctrl-C reaches them; the install beside them runs
# in a process group of its own, which an interrupt ends too.
test-versions:
	@failed=0; install=; \
	 trap 'if [ -n "$$install" ]; then kill -TERM -$$install 2>/dev/null; fi; exit 130' INT TERM HUP; \
	 $(MAKE) --no-print-directory .venv-oldest/.installed; installed=$$?; \
	 set -- oldest newest cpu; while [ $$# -gt 0 ]; do \
	   stack=$$1; shift; \
	   if [ $$# -gt 0 ]; then setsid $(MAKE) --no-print-directory .venv-$$1/.installed & install=$$!; fi; \
	   if [ $$installed = 0 ]; then $(MAKE) --no-print-directory test-$$stack || failed=1; else failed=1; fi; \
	   if [ $$# -gt 0 ]; then wait $$install; installed=$$?; install=; fi; \
	 done; exit $$failed

test-oldest test-newest: test-%: .venv-%/.installed
	@temporary=$${TMPDIR:-/tmp}/tfdist-test-$*-$$$$; \
	.venv-$*/bin/python -m pytest -n $(VERSIONS_WORKERS) --dist loadfile --no-loadscope-reorder -q \
	  -p no:cacheprovider --basetemp=$$temporary -m "versions and not alone and not slurm"; \
	  code=$$?; rm -rf $$temporary; exit $$code

# The tree's tfdist, as the tests import it (the installed copy may be an older build).
test-cpu: $(CPU)/.installed
	$(CPU)/bin/python -m tfdist doctor > $(CPU)/doctor.txt || { cat $(CPU)/doctor.txt; exit 1; }
	@temporary=$${TMPDIR:-/tmp}/tfdist-test-cpu-$$$$; \
	$(CPU)/bin/python -m pytest -q -p no:cacheprovider --basetemp=$$temporary \
	  tests/test_doctor.py tests/internals/test_gates.py; code=$$?; rm -rf $$temporary; exit $$code

# A stack, then what tfdist[test] requires beside it (read from setup.cfg, with the build
# backend), held to that stack; not what only the docs and the Kubernetes manifests' tests
# use (MkDocs, the schemas): no test marked `versions` needs them, and they cost each
# stack about 15 s of CPU beside the first phase (docs/suite-time-runs.md).
$(OLDEST)/.stack: STACK = $(OLDEST_STACK)
$(NEWEST)/.stack: STACK = $(NEWEST_STACK)
$(NEWEST)/.stack: NO_DEPS = $(NEWEST_NO_DEPS)
$(CPU)/.stack: STACK = $(CPU_STACK)
$(CPU)/.stack: NO_DEPS = $(CPU_NO_DEPS)
.venv-%/.stack: Makefile setup.cfg pyproject.toml
	rm -rf $(@D)
	$(PYTHON) -m venv $(@D)
	$(@D)/bin/python -m pip install --quiet --upgrade pip
	$(@D)/bin/python -m pip install --quiet $(STACK)
	$(if $(NO_DEPS),$(@D)/bin/python -m pip install --quiet --no-deps $(NO_DEPS))
	$(@D)/bin/python -m pip freeze | grep -E '$(STACK_PACKAGES)' > $(@D)/stack-before.txt
	$(@D)/bin/python -m pip install --quiet -c $(@D)/stack-before.txt "setuptools>=61" wheel \
	  $$($(PYTHON) -c 'import configparser, re; c = configparser.ConfigParser(); c.read("setup.cfg"); \
	  test = c["options.extras_require"]["test"].split(); \
	  print(c["options"]["install_requires"], *[r for r in test if not re.match("mkdocs|kubernetes-validate|kubeflow", r)])')
	touch $@

# tfdist as a user installs it, with its requirements (all there already): its sdist, then
# its wheel with the extras that bring no TensorFlow. Neither may change the stack. Built
# from a copy of the tree: a build writes build/ and tfdist.egg-info where it runs, and
# tests/test_wheel.py builds in the tree meanwhile. (The tests import the tree's tfdist, as
# `make test`'s do.)
.venv-%/.installed: .venv-%/.stack
	rm -rf $(@D)/source $(@D)/dist && mkdir $(@D)/source
	tar -c --exclude='./.venv*' --exclude=./.git --exclude=./build --exclude=./site \
	  --exclude=./dist --exclude='*.egg-info' --exclude=__pycache__ . | tar -x -C $(@D)/source
	$(@D)/bin/python -m build --no-isolation --sdist --wheel --outdir $(@D)/dist $(@D)/source \
	  > $(@D)/build.log 2>&1 || { cat $(@D)/build.log; exit 1; }
	$(@D)/bin/python -m pip install --quiet --no-build-isolation $(@D)/dist/tfdist-*.tar.gz
	$(@D)/bin/python -m pip uninstall --quiet --yes tfdist
	$(@D)/bin/python -m pip install --quiet "$$(ls $(@D)/dist/tfdist-*.whl)[tfds,ray,notebooks]"
	$(@D)/bin/python -m pip freeze | grep -E '$(STACK_PACKAGES)' > $(@D)/stack-after.txt
	@diff $(@D)/stack-before.txt $(@D)/stack-after.txt || { \
	  echo "installing tfdist beside the stack of $(@D) changed it (above)"; exit 1; }
	touch $@

# Before every commit: each module's unit tests, no clusters, notebooks or SLURM.
test-fast: install
	$(BIN)/python -m pytest -n 2 -q -m "not slow and not alone and not slurm"

docs: install
	$(BIN)/mkdocs build --strict --site-dir site
