# The two commands of the course:
#   make book   build the book (creates .venv if needed, installs, executes the notebooks)
#   make test   run every test: ruff, unit tests and doctests, nbval over every notebook, a strict book build
# Both set up everything they need on a fresh machine.

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
JB     := $(VENV)/bin/jupyter-book
NBVAL  := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-current-env -p no:cacheprovider

.PHONY: book test install unit nbval strict-book clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

book: $(STAMP)
	$(JB) build .
	@echo
	@echo "The book is at $(CURDIR)/_build/html/index.html"

unit: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

nbval: $(STAMP)
	$(PY) -m pytest -q $(NBVAL) notebooks

strict-book: $(STAMP)
	$(JB) build . -W -n --keep-going
	@echo "The book is at $(CURDIR)/_build/html/index.html"

test: unit nbval strict-book

clean:
	rm -rf _build student
