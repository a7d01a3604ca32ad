# The two commands of the course:
#   make book   build the book (creates .venv if needed, installs, executes the notebooks)
#   make test   run every test: ruff, unit tests and doctests, nbval over every notebook (as executed here, and
#               with the floating-point rounding of other CPUs), a strict book build, browser tests of the built
#               book (offline, in Debian's chromium, installed with apt if missing), and the student versions run
#               top to bottom
# Also: make student   writes student versions of every chapter (solutions removed) into student/
#       make bench     runs the benchmarks (about 10 minutes) and rewrites bench/RESULTS.md
#       make grade SUBMISSIONS=folder   runs the notebooks students submitted (folder/<student>/<chapter>.ipynb)
#                      and writes their clinic checks' results to grades.csv (run it in a container: it runs their code)
# Both set up everything they need on a fresh machine.

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
JB     := $(VENV)/bin/jupyter-book
GRADES ?= grades.csv
NBVAL  := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-current-env -p no:cacheprovider

.PHONY: book test install unit nbval nbval-other-cpus strict-book browser students student bench grade clean

$(STAMP): requirements.txt pyproject.toml vendor/package.json vendor/package-lock.json
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	# MathJax and the ipywidgets manager, served from the book itself so that it works offline
	npm ci --prefix vendor --no-audit --no-fund --loglevel=error
	touch $(STAMP)

install: $(STAMP)

book: $(STAMP)
	$(JB) build .
	@echo
	@echo "The book is at $(CURDIR)/_build/html/index.html"

unit: $(STAMP)
	$(VENV)/bin/ruff check .
	# every code line of the chapters fits the book's column (88 characters)
	$(PY) scripts/format_notebooks.py --check
	$(PY) -m pytest -q --ignore=tests/browser

nbval: $(STAMP)
	$(PY) -m pytest -q $(NBVAL) notebooks

# The notebooks again, with the rounding of another CPU: AVX2 kernels in ATen and MKL, then a single thread (which
# sums in another order). Trained weights differ in their last bits, so an output that depends on them and is not
# tagged nbval-ignore-output fails here, as it would on a reader's or CI's machine.
nbval-other-cpus: $(STAMP)
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 $(PY) -m pytest -q $(NBVAL) notebooks
	OMP_NUM_THREADS=1 $(PY) -m pytest -q $(NBVAL) notebooks

# The strict build renders the committed outputs instead of executing every notebook again: nbval has just checked
# that a fresh execution gives them. (`make book` executes the notebooks, with Jupyter Book's cache.)
strict-book: $(STAMP)
	$(PY) scripts/book_config.py --no-execute -o .config-committed-outputs.yml
	$(JB) build . --config .config-committed-outputs.yml -W -n --keep-going
	@echo "The book is at $(CURDIR)/_build/html/index.html"

browser: $(STAMP)
	COURSE_BOOK_BUILT=$(BOOK_BUILT) $(PY) -m pytest -q tests/browser

students: $(STAMP)
	$(PY) -m pytest -q -m slow tests/test_student_versions.py

student: $(STAMP)
	$(PY) scripts/make_student_versions.py

# The browser tests use the strict build that `test` has just made.
test: BOOK_BUILT = 1
test: unit nbval nbval-other-cpus strict-book browser students

bench: $(STAMP)
	$(PY) bench/run.py
	$(PY) scripts/instructor_guide.py

grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=folder [GRADES=grades.csv]"; exit 2; }
	$(PY) -m attn_utils.grading "$(SUBMISSIONS)" -o "$(GRADES)" --chapters notebooks

clean:
	rm -rf _build student
