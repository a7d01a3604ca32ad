# The two commands of the course:
#   make book   build the book, English and Chinese editions, and its PDF (creates .venv if needed, installs, executes
#               the notebooks)
#   make test   run every test (scripts/run_tests.py, two at a time on two cores, with a timing breakdown at the
#               end): nbval over every chapter, its student version's exercises and the instructor's (one thread,
#               another CPU's rounding), ruff, unit tests and doctests, a strict book build and its PDF,
#               and browser tests of the built book (offline, in Debian's chromium)
# Also: make student   writes student versions of every chapter (solutions removed) into student/
#       make pdf       prints the built book to _build/html/attention-course.pdf again, and its Chinese edition to
#                      _build/html/zh/attention-course.pdf (make book and make strict-book print them too)
#       make bench     runs the benchmarks (about 10 minutes) and rewrites bench/RESULTS.md
#       make grade SUBMISSIONS=folder   runs the notebooks students submitted (folder/<student>/<chapter>.ipynb)
#                      and writes their clinic checks' results to grades.csv (run it in a container: it runs their code)
# Both set up everything they need on a fresh machine: `make install` runs first, and installs the system programs
# (scripts/system_packages.py), then the Python environment and the npm packages. Nothing later installs anything.

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
JB     := $(VENV)/bin/jupyter-book
GRADES ?= grades.csv

.PHONY: book test install system unit nbval nbval-students strict-book pdf browser student bench grade clean

# The system programs first (Chromium, Node.js with npm, bubblewrap): installed with apt-get as root or with a sudo
# that needs no password, otherwise one line says what is missing and how to install it (scripts/system_packages.py).
system:
	python3 scripts/system_packages.py

$(STAMP): requirements.txt pyproject.toml vendor/package.json vendor/package-lock.json | system
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements.txt
	# Every module compiled once, on both cores: a Python that may not write bytecode (the grader's read-only
	# sandboxes, or PYTHONDONTWRITEBYTECODE set) would otherwise compile torch's modules again in every kernel, about
	# 8 s of CPU each (torch's own test helpers are left out: one of them is written for a newer Python)
	$(PY) -m compileall -q -j 0 -x '/torch/testing/' $(VENV)/lib > /dev/null
	# MathJax and the ipywidgets manager, served from the book itself so that it works offline
	npm ci --prefix vendor --no-audit --no-fund --loglevel=error
	touch $(STAMP)

install: system $(STAMP)

book: install
	$(JB) build .
	# the Chinese edition, from the same execution cache (no notebook runs again), into _build/html/zh
	$(PY) scripts/build_chinese.py
	# the PDF of each edition, printed from its pages (each front page links to its own)
	$(PY) scripts/build_pdf.py
	@echo
	@echo "The book is at $(CURDIR)/_build/html/index.html (中文版: $(CURDIR)/_build/html/zh/index.html)"
	@echo "Its PDF is $(CURDIR)/_build/html/attention-course.pdf (中文版: $(CURDIR)/_build/html/zh/attention-course.pdf)"

# Parts of `make test`, one at a time (`make test` runs them together: see scripts/run_tests.py).
ONE_THREAD := ATTN_UTILS_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
NBVAL := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-current-env -p no:cacheprovider

unit: install
	$(VENV)/bin/ruff check .
	# every code line of the chapters fits the book's column (88 characters)
	$(PY) scripts/format_notebooks.py --check
	$(ONE_THREAD) $(PY) -m pytest -q --ignore=tests/browser -m "slow or not slow"

# Every chapter in a fresh kernel with one thread, its outputs compared with the committed ones (which were computed
# with every free core: a single thread sums in another order, as another reader's machine would).
nbval: install
	$(ONE_THREAD) $(PY) -m pytest -q $(NBVAL) notebooks

# The student version of every chapter, then the instructor's exercises, with the AVX2 kernels of ATen and MKL (the
# rounding of another CPU).
nbval-students: install
	rm -rf _build/student-check
	$(PY) scripts/make_student_versions.py --for-testing -o _build/student-check
	$(ONE_THREAD) $(PY) -m pytest -q $(NBVAL) _build/student-check

# The strict build renders the committed outputs instead of executing every notebook again: nbval checks that a
# fresh execution gives them. (`make book` executes the notebooks, with Jupyter Book's cache.)
strict-book: install
	$(PY) scripts/run_tests.py --no-install --only book
	@echo "The book is at $(CURDIR)/_build/html/index.html"

# The PDFs of the book that `make strict-book` (or `make book`) has built, English and Chinese: every page in the order
# of _toc.yml, printed offline by Chromium, with a contents page and page numbers (both of them print them already).
pdf: install
	$(PY) scripts/build_pdf.py

# The browser tests of the book that `make strict-book` has built (without one, they build it themselves).
browser: install
	COURSE_BOOK_BUILT=1 $(PY) -m pytest -q -p no:cacheprovider tests/browser

student: install
	$(PY) scripts/make_student_versions.py

test:
	python3 scripts/run_tests.py

bench: install
	$(PY) bench/run.py
	$(PY) scripts/instructor_guide.py

grade: install
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=folder [GRADES=grades.csv]"; exit 2; }
	$(PY) -m attn_utils.grading "$(SUBMISSIONS)" -o "$(GRADES)" --chapters notebooks

clean:
	rm -rf _build student
