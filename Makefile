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
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-24s %s\n", $$1, $$2}'

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $@

.venv-checkov/.installed: requirements-checkov.txt
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install -q --upgrade pip
	.venv-checkov/bin/pip install -q -r requirements-checkov.txt
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

install: $(VENV)/.installed .venv-checkov/.installed node_modules/.installed ## create .venv (+ .venv-checkov) and install Python + Node.js tools

checkov: .venv-checkov/.installed ## install checkov (make synth's security gate) into its own .venv-checkov

synth: install ## synthesize CONFIG (default: the embedded default) + run the gates into SYNTH_OUTDIR (cdk.out); prints where everything went
	$(PY) -m scripts.synth --config $(CONFIG) --outdir "$(SYNTH_OUTDIR)"

lint: install ## ruff (lint), ruff format --check, mypy, the import-cycle check (grimp) and the import layers (import-linter); fails on any finding
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m scripts.import_cycles
	PYTHONPATH=. $(VENV)/bin/lint-imports --no-cache

golden: install ## rewrite tests/data/golden/default.json, the normalised templates + manifests of the default config (commit it with a meant change)
	$(PY) -m scripts.golden

fmt: install ## format the tree and apply ruff's safe fixes (ruff format + ruff check --fix)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: install system-deps lint ## lint (above), then the whole test suite (unit + integration with real Triton, gateway, Prometheus)
	$(VENV)/bin/pytest

serve: install ## run real Triton (CPU model) + the gateway on 127.0.0.1:8080 in the foreground (Ctrl-C stops; GATEWAY_WORKERS=2; MODEL=base: multilingual)
	WHISPER_TRITON_SPEAKER__WARMUP=$${WHISPER_TRITON_SPEAKER__WARMUP:-false} WHISPER_GATEWAY_WORKERS=$${WHISPER_GATEWAY_WORKERS:-$(GATEWAY_WORKERS)} $(PY) -m whisper_build.workstation.local_triton --gateway $(if $(MODEL),--model $(MODEL))

page-screenshots: install system-deps ## screenshots of the page's Live and File tabs (make serve's stack + headless chromium) into docs/page-*.png
	$(PY) -m scripts.page_screenshots --out docs

transcribe: install ## print the transcript of FILE through the running gateway (make transcribe FILE="my recording.wav"; STREAM=1: text as it is made, for long files; TRANSLATE=1: to English, needs make serve MODEL=base)
	@test -n "$(FILE)" || { echo 'usage: make transcribe FILE="path/to/audio.wav" [STREAM=1 | TRANSLATE=1]'; exit 2; }
	$(PY) -m whisper_build.workstation.cli "$(FILE)" $(if $(STREAM),--stream) $(if $(TRANSLATE),--translate)

publish-hyperpod-chart: install ## package CONFIG's pinned HyperPod dependency chart and push it to ECR (make deploy runs it; AWS credentials, git, helm >= 3.8)
	scripts/publish_hyperpod_chart.sh "$(CONFIG)"

api-key: install ## print how to fetch and rotate the gateway API key of the deployed CONFIG
	$(PY) -m whisper_build.workstation.api_keys --config "$(CONFIG)"

# DRY_RUN=1 (and env) install nothing: they need an existing .venv and only print.
NEED_VENV = @test -x $(PY) || { echo "$(PY) is missing: run make install first (this target installs nothing)"; exit 2; }

deploy: $(if $(DRY_RUN),,install) ## deploy CONFIG end to end and print how to reach the endpoint (docs/deploy.md; DRY_RUN=1 prints the commands, installs nothing; APPROVE=1: cdk asks before each change)
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

diff: ## cdk diff of CONFIG's stacks against what is deployed: review before make deploy (credentials; changes nothing)
	$(NEED_VENV)
	$(PY) -m whisper_build.deploy diff --config "$(CONFIG)" $(if $(DRY_RUN),--dry-run)

publish-ctranslate2: ## convert CONFIG's model to CTranslate2 and upload it for the groups with serving_engine: ctranslate2 (the engine-build fallback)
	$(NEED_VENV)
	$(PY) -m whisper_build.deploy publish-ctranslate2 --config "$(CONFIG)" $(if $(DRY_RUN),--dry-run)

destroy: $(if $(DRY_RUN),,install) ## delete CONFIG's stacks, list what outlives them (PURGE=1 deletes it too; DRY_RUN=1 prints the commands)
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

bench: install ## load-test running servers: make bench AUDIO=bench-audio TARGETS="--target gw=http://127.0.0.1:8080" [CONCURRENCY=1,2,4 DURATION=20]
	@test -n "$(AUDIO)" || { echo 'usage: make bench AUDIO=file-or-folder TARGETS="--target NAME=URL ..." [CONCURRENCY=1,2,4] [DURATION=seconds] (make bench-audio writes speech files)'; exit 2; }
	@test -n "$(TARGETS)" || { echo 'usage: make bench AUDIO=$(AUDIO) TARGETS="--target gw=http://127.0.0.1:8080" (the running gateway; see docs/benchmarks.md)'; exit 2; }
	$(PY) -m benchmarks.bench --audio "$(AUDIO)" $(TARGETS) --concurrency "$(CONCURRENCY)" --duration "$(DURATION)" --out bench-results

bench-audio: install ## write sample speech files (espeak-ng + sox) into BENCH_AUDIO (default bench-audio/) for make bench
	$(PY) -m benchmarks.speech --out "$(BENCH_AUDIO)"

bench-report: install system-deps ## reference run: real Triton (CPU) + gateway side by side, writes docs/benchmarks/
	$(PY) -m benchmarks.reference --out docs/benchmarks

bench-cost: ## cost per audio hour from the stored H200 served run and the CPU sweep at CONFIG's prices, beside hosted prices: docs/benchmarks/cost_per_audio_hour.{json,md,png}
	$(NEED_VENV)
	$(PY) -m benchmarks.cost_report --config "$(CONFIG)" --out docs/benchmarks

bench-synth: install ## time synthesis of the default and the three-group config
	$(PY) -m scripts.bench_synth

.PHONY: help system-deps install checkov api-key synth lint golden fmt test serve page-screenshots transcribe publish-hyperpod-chart deploy capacity prices sizing diff publish-ctranslate2 destroy kubeconfig endpoint pods env bench bench-audio bench-report bench-cost bench-synth submit jobs fetch bulk-local bulk-demo model-contract bench-bulk bench-live

submit: install ## bulk jobs: upload a folder or enqueue an s3:// prefix of CONFIG's job bucket (make submit CONFIG=… SRC=<dir or s3://…>; local: after make bulk-local's exports)
	@test -n "$(SRC)" || { echo 'usage: make submit CONFIG=config/examples/bulk.yaml SRC=<dir or s3://<job bucket>/input/…>'; exit 2; }
	$(PY) -m whisper_build.bulk.cli --config $(CONFIG) submit --src "$(SRC)"

jobs: install ## bulk jobs of CONFIG: counts per state, queue and dead letters, oldest waiting, failures with reasons, progress of running files
	$(PY) -m whisper_build.bulk.cli --config $(CONFIG) jobs

fetch: install ## download CONFIG's final bulk results into OUT_DIR: <name>.json (verbose_json) .srt .vtt .txt, <name>.error.json
	@test -n "$(OUT_DIR)" || { echo 'usage: make fetch CONFIG=… OUT_DIR=<dir>'; exit 2; }
	$(PY) -m whisper_build.bulk.cli --config $(CONFIG) fetch --out "$(OUT_DIR)"

bulk-local: install ## the bulk path on 127.0.0.1 in the foreground: S3 + SQS (moto server), Triton (CPU), a worker; prints the exports for make submit/jobs/fetch
	$(PY) -m whisper_build.bulk.demo

bench-live: install system-deps ## N live Realtime sessions (301 words each, real-time pace) vs a running gateway: first-delta/final p50/p95, WER vs the file endpoint (LIVE_URL=… LIVE_SESSIONS=1,2,4 API_KEY=… LIVE_WEIGHTS=real|random)
	$(PY) -m benchmarks.live --url "$(LIVE_URL)" --sessions "$(LIVE_SESSIONS)" --api-key "$(API_KEY)" --weights "$(or $(LIVE_WEIGHTS),real)"

bench-bulk: install system-deps ## bulk throughput vs the in-process engine and synchronous p50 beside bulk work, interleaved rounds (benchmarks/bulk_throughput.py; docs/benchmarks.md)
	$(PY) -m benchmarks.bulk_throughput

bulk-demo: install ## transcribe every file of AUDIO_DIR through the local bulk path, results into OUT_DIR (make bulk-demo AUDIO_DIR=… OUT_DIR=…; docs/bulk.md)
	@test -n "$(AUDIO_DIR)" -a -n "$(OUT_DIR)" || { echo 'usage: make bulk-demo AUDIO_DIR=<dir of audio files> OUT_DIR=<dir>'; exit 2; }
	$(PY) -m whisper_build.bulk.demo --audio-dir "$(AUDIO_DIR)" --out-dir "$(OUT_DIR)"

model-contract: install ## rewrite config.pbtxt's tensors and the docs' tensor tables from whisper_build/serving/contract.py
	$(PY) -m whisper_build.serving.triton_model.contract_files
