# Two commands: `make run` (the main job) and `make test` (the whole suite).
# Both create .venv on first use, at the exact versions of requirements*.txt (pyproject.toml states the ranges a user
# install accepts);
# torch is installed first, at the version requirements.txt pins (override: make TORCH_PIN=torch==X).
PY := .venv/bin/python
REQS := requirements.txt requirements-test.txt requirements-kernels.txt requirements-models.txt requirements-fast.txt
TORCH_PIN ?= $(shell grep -E '^torch[=<>~! ]' requirements.txt)

.PHONY: run test figures clean

.venv/stamp: $(REQS) requirements-nodeps.txt
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q '$(TORCH_PIN)'
	$(PY) -m pip install -q $(addprefix -r ,$(REQS))
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	touch $@

run: .venv/stamp
	$(PY) forget.py

test: .venv/stamp
	$(PY) -m ruff check .
	$(PY) test_foxwindow.py

figures: .venv/stamp
	$(PY) figures/make_figures.py

clean:
	rm -rf .venv
